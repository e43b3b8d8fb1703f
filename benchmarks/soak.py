"""Sustained load: ``make bench-soak`` (``--help`` for the options; the full run takes ~32 min).

A steady producer adds ``--rate`` jobs/s (default 1,000) for ``--duration`` seconds (default
30 min) while worker processes run them and their leader's cleanup removes completed jobs
``--completed-retention`` seconds (default 60) after they finished. Every ``--sample`` seconds
the run records the jobs table's rows by status, the size of the table and of each of its
indexes, its dead row versions and autovacuum runs (``pg_stat_user_tables``), and the claim
latency of the jobs finished since the previous sample (``locked_at - created_at``, both the
server's clock, percentiles computed by PostgreSQL over those rows while retention still keeps
them). The question (issue 21): with the settings pgqueue's migrations set on the jobs table
(``pgqueue/sql/migrations/0002_storage_tuning.sql``) and autovacuum on, do the table and its
indexes stay bounded and the claim latency flat?

The shared development server runs with autovacuum off, so by default the run starts a
PostgreSQL cluster of its own (``initdb`` into a directory under /tmp, as the ``postgres`` OS
user when run as root; stock settings, autovacuum on, each autovacuum logged), and stops and
removes it at the end, Ctrl-C and errors included. ``--dsn`` uses an existing server instead
(a database of the run's own is created there and dropped).

``--overload cleanup`` (``cleanup_batch`` 10: cleanup removes at most 200 rows per leader
tick) and ``--overload drain`` (jobs that sleep 10 ms on 4 slots of one worker: at most ~400
jobs/s) show, for a few minutes, what happens when cleanup, or the workers, cannot keep up.

Results go to ``benchmarks/results/<UTC time>-soak[-overload-<kind>].json`` (parameters, every
sample, the autovacuum runs read from the server's log, the machine, the commit), and the
script rewrites its own section of docs/benchmarks.md (between the ``soak`` markers, or the
``soak-overload-<kind>`` ones). ``--report FILE`` rewrites the section from a results file.
"""

# The command: options, the run loop, the results file. The server is soak_cluster.py's, the
# load (job, worker processes, producer) soak_load.py's, the samples soak_sample.py's, the
# printed line, the verdict and the docs sections soak_report.py's.

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

import pgqueue
from pgqueue._sync.runtime.leader import _MAX_MAINTENANCE_ROUNDS

from .admin_queries import _url
from .soak_cluster import PG_BIN, Cluster, autovacuum_runs, database, own_cluster
from .soak_load import Producer, wait_registered, worker_main, workers
from .soak_report import _verdict_line, sample_line, verdict, write_report
from .soak_sample import JOBS, Sampler, _ms

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
# What each --overload sets, unless given on the command line.
OVERLOAD_DEFAULTS: dict[str | None, dict[str, Any]] = {
    None: {"duration": 1800.0, "sample": 30.0},
    "cleanup": {"duration": 180.0, "sample": 10.0, "cleanup_batch": 10},
    "drain": {"duration": 180.0, "sample": 10.0, "job_ms": 10.0, "workers": 1, "concurrency": 4},
}
# Bound on cleanup statements per leader tick: cleanup's ceiling is this many times
# cleanup_batch rows per leader_interval.
CLEANUP_ROUNDS = _MAX_MAINTENANCE_ROUNDS


# -- the machine ------------------------------------------------------------------------------

SETTINGS = (
    "server_version",
    "shared_buffers",
    "autovacuum",
    "autovacuum_naptime",
    "autovacuum_max_workers",
    "autovacuum_vacuum_cost_limit",
    "autovacuum_vacuum_cost_delay",
    "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_threshold",
    "maintenance_work_mem",
    "max_wal_size",
    "checkpoint_timeout",
    "synchronous_commit",
    "fsync",
)


def machine(url: str) -> dict[str, Any]:
    """What the run was taken on: CPUs, memory, PostgreSQL's version and autovacuum settings."""
    cpu, mem_kb = "", 0
    with contextlib.suppress(OSError, StopIteration):
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
        with open("/proc/meminfo") as f:
            mem_kb = int(next(ln.split()[1] for ln in f if ln.startswith("MemTotal")))
    with psycopg.connect(url, autocommit=True) as conn:
        settings = {n: str((conn.execute(f"SHOW {n}").fetchone() or ("?",))[0]) for n in SETTINGS}
        version = (conn.execute("SELECT version()").fetchone() or ("?",))[0]
        reloptions = (
            conn.execute(
                f"SELECT reloptions FROM pg_class WHERE oid = '{JOBS}'::regclass"
            ).fetchone()
            or (None,)
        )[0]
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "memory_gb": round(mem_kb / 2**20, 1),
        "python": sys.version.split()[0],
        "postgresql": {"version": version, **settings},
        "jobs_reloptions": reloptions,
    }


def git_commit() -> dict[str, Any]:
    """The commit the run was taken at (``git rev-parse HEAD``), and whether the tree differed."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    return {
        "commit": git("rev-parse", "HEAD") or "unknown",
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
    }


# -- the run ----------------------------------------------------------------------------------


def soak(url: str, args: argparse.Namespace, log_dir: Path, cluster: Cluster) -> dict[str, Any]:
    """Migrate, start the workers and the producer, sample until the end; return the results."""
    with pgqueue.Client.connect(url) as client:
        client.migrate()
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    samples: list[dict[str, Any]] = []
    interrupted = False
    stats_text = ""
    with (
        workers(url, args, log_dir) as procs,
        psycopg.connect(url, autocommit=True) as conn,
    ):
        wait_registered(conn, args.workers, procs)
        producer = Producer(url, args.rate, args.duration)
        config = pgqueue.RuntimeConfig(
            completed_retention=args.completed_retention,
            cleanup_batch=args.cleanup_batch,
            leader_interval=args.leader_interval,
        )
        sampler = Sampler(url, producer, config)
        producer.start()
        producer.ready.wait()
        try:
            k = 1
            while True:
                at = min(k * args.sample, args.duration)
                while (wait := producer.started_at + at - time.monotonic()) > 0:
                    time.sleep(min(wait, 1.0))
                    _check(producer, procs)
                if at >= args.duration:
                    producer.join()
                _check(producer, procs)
                sample = sampler.sample(time.monotonic() - producer.started_at)
                samples.append(sample)
                print(sample_line(sample), flush=True)
                if at >= args.duration:
                    break
                k += 1
        except KeyboardInterrupt:
            interrupted = True
            print("interrupted: keeping the samples taken so far", flush=True)
        finally:
            producer.stopping.set()
            producer.join(30)
        if args.overload and not interrupted:
            stats_text = _pgqueue_stats(url)
        server_t0 = sampler.server_t0
        sampler.close()
    produced_for = (producer.ended_at or time.monotonic()) - producer.started_at
    return {
        "meta": {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "mode": "soak" if args.overload is None else f"overload-{args.overload}",
            "overload": args.overload,
            "params": {
                "rate": args.rate,
                "duration": args.duration,
                "sample": args.sample,
                "workers": args.workers,
                "concurrency": args.concurrency,
                "job_ms": args.job_ms,
                "completed_retention": args.completed_retention,
                "cleanup_batch": args.cleanup_batch,
                "leader_interval": args.leader_interval,
                "cleanup_ceiling_per_s": CLEANUP_ROUNDS * args.cleanup_batch / args.leader_interval,
            },
            "cluster": "started for the run" if cluster.own else "--dsn",
            "machine": machine(url),
            "git": git_commit(),
            "pgqueue": pgqueue.__version__,
            "load_average": {"before": load_before, "after": os.getloadavg()[0]},
            "wall_seconds": round(time.monotonic() - started, 1),
            "interrupted": interrupted,
        },
        "producer": {
            "enqueued": producer.enqueued,
            "seconds": round(produced_for, 1),
            "actual_rate": round(producer.enqueued / produced_for, 1) if produced_for else 0,
            "batches": producer.batches,
            "late_batches": producer.late_batches,
            "max_lag_ms": _ms(producer.max_lag),
        },
        "samples": samples,
        "autovacuum_runs": autovacuum_runs(cluster.log, server_t0) if cluster.log else None,
        "pgqueue_stats": stats_text,
    }


def _check(producer: Producer, procs: list[Any]) -> None:
    if producer.error is not None:
        raise RuntimeError(f"the producer failed: {producer.error!r}") from producer.error
    for proc, log in procs:
        if proc.poll() is not None:
            raise RuntimeError(f"a worker process exited ({proc.returncode}):\n{log.read_text()}")


def _pgqueue_stats(url: str) -> str:
    """What ``pgqueue stats --completed`` shows an operator at the end of the run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
    env.update(COLUMNS="110", NO_COLOR="1", TERM="dumb")
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pgqueue", "stats", "--completed"),
            *("--format", "table", "--dsn", url),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return (done.stdout + done.stderr).rstrip()


# -- main -------------------------------------------------------------------------------------


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=1000.0, help="jobs added per second")
    parser.add_argument(
        "--duration", type=float, help="seconds of load (1800; 180 with --overload)"
    )
    parser.add_argument(
        "--sample", type=float, help="seconds between samples (30; 10 with --overload)"
    )
    parser.add_argument("--workers", type=int, help="worker processes (2; 1 with --overload drain)")
    parser.add_argument(
        "--concurrency",
        type=int,
        help="jobs at once per worker process (10; 4 with --overload drain)",
    )
    parser.add_argument(
        "--job-ms", type=float, help="milliseconds each job sleeps (0; 10 with --overload drain)"
    )
    parser.add_argument(
        "--completed-retention", type=float, default=60.0, help="RuntimeConfig.completed_retention"
    )
    parser.add_argument(
        "--cleanup-batch",
        type=int,
        help="RuntimeConfig.cleanup_batch (1000; 10 with --overload cleanup)",
    )
    parser.add_argument(
        "--leader-interval", type=float, default=5.0, help="RuntimeConfig.leader_interval"
    )
    parser.add_argument(
        "--overload",
        choices=["cleanup", "drain"],
        help="cleanup: cleanup_batch 10, too small for the rate; drain: workers slower than "
        "the rate (jobs of 10 ms on 4 slots); a few minutes each",
    )
    parser.add_argument(
        "--dsn",
        help="use this existing server (an admin connection; the run creates a database of its "
        "own there and drops it) instead of starting a cluster",
    )
    parser.add_argument("--pg-bin", type=Path, default=PG_BIN, help="PostgreSQL's binaries")
    parser.add_argument("--keep", action="store_true", help="keep the cluster or database")
    parser.add_argument("--no-report", action="store_true", help="leave docs/benchmarks.md")
    parser.add_argument("--out", type=Path, help="the results file (default: results/<time>...)")
    parser.add_argument("--report", type=Path, help="only rewrite the docs from this results file")
    parser.add_argument("--worker-process", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker_process:
        worker_main(json.loads(args.worker_process))
        return
    if args.report:
        write_report(json.loads(args.report.read_text()), args.report.resolve())
        return
    defaults = {
        "duration": 1800.0,
        "sample": 30.0,
        "workers": 2,
        "concurrency": 10,
        "job_ms": 0.0,
        "cleanup_batch": pgqueue.RuntimeConfig().cleanup_batch,
    } | OVERLOAD_DEFAULTS[args.overload]
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.sample >= args.completed_retention:
        parser.error(
            "--sample must be shorter than --completed-retention: the latency of a window is "
            "read from the completed jobs that retention still keeps"
        )
    # SIGTERM ends the run as Ctrl-C does: the cluster and the workers are stopped
    signal.signal(signal.SIGTERM, _interrupt)

    with contextlib.ExitStack() as stack:
        if args.dsn:
            cluster = Cluster(args.dsn, None, False)
        else:
            cluster = stack.enter_context(own_cluster(args.pg_bin, args.keep))
        url = _url(stack.enter_context(database(cluster, args.keep)))
        log_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pgqueue-soak-")))
        print(
            f"soak: {args.rate:,.0f} jobs/s for {args.duration:.0f} s, a sample every "
            f"{args.sample:.0f} s"
            + (f", overload: {args.overload}" if args.overload else "")
            + f"; database {url}",
            flush=True,
        )
        doc = soak(url, args, log_dir, cluster)

    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    suffix = f"-overload-{args.overload}" if args.overload else ""
    out = args.out or RESULTS / f"{stamp}-soak{suffix}.json"
    out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    where = out.resolve()
    print(f"results: {where.relative_to(ROOT) if where.is_relative_to(ROOT) else out}")
    v = verdict(doc)
    if v["enough_samples"] and not (args.overload or doc["meta"]["interrupted"]):
        print(_verdict_line(doc))
    if not (args.no_report or doc["meta"]["interrupted"] or not doc["samples"]):
        write_report(doc, out.resolve())


if __name__ == "__main__":
    main()
