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

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

import pgqueue
from pgqueue._sync.runtime.leader import _MAX_MAINTENANCE_ROUNDS

from .admin_queries import _dsn_for, _url
from .report import docs_section_write

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PG_BIN = Path("/usr/lib/postgresql/15/bin")
JOBS = "pgqueue_jobs"  # the jobs table, in schema public (pgqueue's defaults)
QUEUE = "default"
MARKERS = {
    None: ("<!-- soak:begin -->", "<!-- soak:end -->"),
    "cleanup": ("<!-- soak-overload-cleanup:begin -->", "<!-- soak-overload-cleanup:end -->"),
    "drain": ("<!-- soak-overload-drain:begin -->", "<!-- soak-overload-drain:end -->"),
}
# What each --overload sets, unless given on the command line.
OVERLOAD_DEFAULTS: dict[str | None, dict[str, Any]] = {
    None: {"duration": 1800.0, "sample": 30.0},
    "cleanup": {"duration": 180.0, "sample": 10.0, "cleanup_batch": 10},
    "drain": {"duration": 180.0, "sample": 10.0, "job_ms": 10.0, "workers": 1, "concurrency": 4},
}
# Bound on cleanup statements per leader tick: cleanup's ceiling is this many times
# cleanup_batch rows per leader_interval.
CLEANUP_ROUNDS = _MAX_MAINTENANCE_ROUNDS
# Logging settings only (the server's behaviour stays stock): every autovacuum run is logged,
# with UTC timestamps that the report can place on the run's timeline.
CLUSTER_CONF = """
# benchmarks/soak.py: a throwaway cluster, stock settings but these
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{socket_dir}'
autovacuum = on
log_autovacuum_min_duration = 0
log_timezone = 'UTC'
log_line_prefix = '%m [%p] '
"""


# -- the job ----------------------------------------------------------------------------------

# Seconds each job sleeps: 0 in the soak (a trivial job); set in the worker processes of
# --overload drain (from --job-ms), so that the workers drain less than the producer adds.
_JOB_SECONDS = 0.0


@dataclass
class SoakJob(pgqueue.Worker):
    """The soak's job: records nothing (its row's timestamps are the measurement)."""

    kind = "bench.soak"
    i: int

    def process(self, ctx: pgqueue.JobContext) -> None:
        """Do nothing, or sleep ``--job-ms`` (``--overload drain``)."""
        if _JOB_SECONDS:
            time.sleep(_JOB_SECONDS)


registry = pgqueue.WorkerRegistry(SoakJob)


# -- the server -------------------------------------------------------------------------------


def _as_postgres(command: list[str]) -> list[str]:
    """``command`` run as the ``postgres`` OS user when we are root (initdb refuses root)."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Cluster:
    """A server to run on: an admin DSN, and the server log when the run started it."""

    admin_dsn: str
    log: Path | None
    own: bool


@contextlib.contextmanager
def own_cluster(pg_bin: Path, keep: bool) -> Iterator[Cluster]:
    """initdb a cluster under /tmp, start it on a free port; stop and remove it at the end."""
    base = Path(tempfile.mkdtemp(prefix="pgqueue-soak-"))
    data, log = base / "data", base / "postgresql.log"
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
    started = False
    try:
        subprocess.run(
            _as_postgres(
                [
                    *(str(pg_bin / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"),
                    *("-E", "UTF8", "--locale=C", "--no-sync"),
                ]
            ),
            cwd=base,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        port = _free_port()
        with open(data / "postgresql.conf", "a") as conf:
            conf.write(CLUSTER_CONF.format(port=port, socket_dir=base))
        # a session of its own: a Ctrl-C in the terminal reaches this process, which stops
        # the server in order, not the server directly
        subprocess.run(
            _as_postgres(
                [
                    *(str(pg_bin / "pg_ctl"), "start", "-w", "-t", "60", "-D", str(data)),
                    *("-l", str(log)),
                ]
            ),
            cwd=base,
            check=True,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        started = True
        print(f"PostgreSQL cluster in {data}, port {port}, log {log}", flush=True)
        yield Cluster(f"postgresql://postgres@127.0.0.1:{port}/postgres", log, True)
    except Exception:
        if log.exists():
            print(f"--- tail of {log}:\n{''.join(log.read_text().splitlines(True)[-30:])}")
        raise
    finally:
        if started:
            subprocess.run(
                _as_postgres([str(pg_bin / "pg_ctl"), "stop", "-w", "-m", "fast", "-D", str(data)]),
                cwd=base,
                check=False,
                stdout=subprocess.DEVNULL,
            )
        if keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def database(cluster: Cluster, keep: bool) -> Iterator[str]:
    """A database of the run's own on ``cluster``; yield its DSN; drop it at the end."""
    name = f"pgqueue_soak_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(cluster.admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    try:
        yield _dsn_for(cluster.admin_dsn, name)
    finally:
        if keep:
            print(f"kept database {name}")
        else:
            with psycopg.connect(cluster.admin_dsn, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


# -- the worker processes -----------------------------------------------------------------------


def worker_main(spec: dict[str, Any]) -> None:
    """One worker process (``--worker-process SPEC``): run jobs until SIGTERM."""
    global _JOB_SECONDS
    _JOB_SECONDS = spec["job_ms"] / 1000
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    config = pgqueue.RuntimeConfig(
        completed_retention=spec["completed_retention"],
        cleanup_batch=spec["cleanup_batch"],
        leader_interval=spec["leader_interval"],
    )
    with pgqueue.Client.connect(spec["url"], registry=registry) as client:
        client.start({QUEUE: spec["concurrency"]}, config=config)
        while not stop.wait(0.5):
            pass
        client.stop(5.0)


@contextlib.contextmanager
def workers(url: str, args: argparse.Namespace, log_dir: Path) -> Iterator[list[Any]]:
    """Start ``args.workers`` worker processes; yield them; SIGTERM them at the end."""
    spec = {
        "url": url,
        "concurrency": args.concurrency,
        "completed_retention": args.completed_retention,
        "cleanup_batch": args.cleanup_batch,
        "leader_interval": args.leader_interval,
        "job_ms": args.job_ms,
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        for n in range(args.workers):
            log = log_dir / f"worker-{n}.log"
            with open(log, "wb") as out:
                procs.append(
                    (
                        subprocess.Popen(
                            [
                                *(sys.executable, "-m", "benchmarks.soak"),
                                *("--worker-process", json.dumps(spec)),
                            ],
                            cwd=ROOT,
                            env=env,
                            stdin=subprocess.DEVNULL,
                            stdout=out,
                            stderr=out,
                            start_new_session=True,
                        ),
                        log,
                    )
                )
        yield procs
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, log in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.returncode not in (0, -signal.SIGTERM):
                print(f"--- worker exited with {proc.returncode}; its log:\n{log.read_text()}")


def wait_registered(conn: psycopg.Connection[Any], count: int, procs: list[Any]) -> None:
    """Wait until ``count`` worker processes have registered (and one of them leads)."""
    deadline = time.monotonic() + 60
    while True:
        for proc, log in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"a worker process exited:\n{log.read_text()}")
        row = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE is_leader) FROM pgqueue_instances"
        ).fetchone()
        if row and row[0] >= count and row[1] >= 1:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the workers did not register in 60 s: {row}")
        time.sleep(0.2)


# -- the producer -----------------------------------------------------------------------------


class Producer(threading.Thread):
    """Adds ``rate`` jobs/s for ``duration`` s, a batch every ``tick`` s, paced on the clock.

    Each batch adds what the wall clock says is due (``rate * elapsed`` minus what was added),
    so a late batch catches up and the rate over the run is the one asked for.
    """

    def __init__(self, url: str, rate: float, duration: float, tick: float = 0.1) -> None:
        super().__init__(name="soak-producer", daemon=True)
        self.url, self.rate, self.duration, self.tick = url, rate, duration, tick
        self.enqueued = 0
        self.error: BaseException | None = None
        self.stopping = threading.Event()
        self.ready = threading.Event()  # set once started_at is
        self.started_at = self.ended_at = 0.0
        self.batches = self.late_batches = 0
        self.max_lag = 0.0
        self._lock = threading.Lock()
        self._calls: list[float] = []  # add_jobs durations (s) since the last take_calls()

    def take_calls(self) -> list[float]:
        """The ``add_jobs`` durations (s) since the previous call."""
        with self._lock:
            calls, self._calls = self._calls, []
        return calls

    def run(self) -> None:
        try:
            with pgqueue.Client.connect(self.url, registry=registry) as client:
                self._produce(client)
        except BaseException as exc:  # the main thread raises it
            self.error = exc
        finally:
            self.ended_at = time.monotonic()
            self.ready.set()

    def _produce(self, client: pgqueue.Client) -> None:
        start = self.started_at = time.monotonic()
        self.ready.set()
        tick = 0
        while not self.stopping.is_set():
            elapsed = min(time.monotonic() - start, self.duration)
            due = int(self.rate * elapsed) - self.enqueued
            if due > 0:
                first = self.enqueued
                t0 = time.perf_counter()
                client.add_jobs([SoakJob(i) for i in range(first, first + due)])
                spent = time.perf_counter() - t0
                with self._lock:
                    self.enqueued += due
                    self._calls.append(spent)
                self.batches += 1
            if elapsed >= self.duration:
                return
            tick += 1
            lag = time.monotonic() - (start + tick * self.tick)
            if lag < 0:
                self.stopping.wait(-lag)
            else:
                self.max_lag = max(self.max_lag, lag)
                self.late_batches += 1


# -- sampling -------------------------------------------------------------------------------

TABLE_STATS = """
SELECT n_live_tup, n_dead_tup, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del,
    autovacuum_count, autoanalyze_count, vacuum_count, last_autovacuum, last_autoanalyze
FROM pg_stat_user_tables WHERE relid = %(t)s::regclass
"""
SIZES = """
SELECT pg_relation_size(%(t)s::regclass), pg_total_relation_size(%(t)s::regclass),
    pg_database_size(current_database()),
    (SELECT json_object_agg(indexrelname, pg_relation_size(indexrelid))
     FROM pg_stat_user_indexes WHERE relid = %(t)s::regclass)
"""
# Claim latency (enqueue to claim) and end-to-end time (enqueue to finish) of the jobs that
# finished in the window: retention keeps them longer than a sample's window.
LATENCY = """
SELECT count(*),
    percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY
        extract(epoch FROM locked_at - created_at)),
    max(extract(epoch FROM locked_at - created_at))::float8,
    percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY
        extract(epoch FROM finished_at - created_at))
FROM pgqueue_jobs
WHERE status = 'completed' AND finished_at > %(since)s AND finished_at <= %(until)s
"""


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


class Sampler:
    """Reads the table's state every sample, on a connection and a pgqueue client of its own."""

    def __init__(self, url: str, producer: Producer, config: pgqueue.RuntimeConfig) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.client = pgqueue.Client.connect(url, driver="psycopg")
        self.producer = producer
        self.config = config
        # the leader's cleanup statement as pgqueue renders it, timed once per sample
        self.conn.execute(f"PREPARE soak_cleanup AS {self.client._store._q.job_cleanup}")
        row = self.conn.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None
        self.server_t0: datetime = row[0]
        self.bound = self.server_t0
        self.last_enqueued = 0
        self.last_elapsed = 0.0

    def close(self) -> None:
        self.client.close()
        self.conn.close()

    def cleanup_probe(self) -> dict[str, Any]:
        """How many completed jobs are past retention, and what one cleanup statement costs.

        The leader's ``job_cleanup`` (a ``DELETE`` of up to ``cleanup_batch`` rows) runs under
        ``EXPLAIN ANALYZE`` in a transaction rolled back: its rows stay for the leader.
        """
        c = self.config
        row = self.conn.execute(
            f"SELECT count(*) FROM {JOBS} WHERE status = 'completed' "
            "AND finished_at < now() - %s * interval '1 second'",
            (c.completed_retention,),
        ).fetchone()
        plan: dict[str, Any] = {}
        with contextlib.suppress(psycopg.Rollback), self.conn.transaction():
            found = self.conn.execute(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE soak_cleanup("
                f"{float(c.completed_retention)}, {float(c.failed_retention)}, "
                f"{int(c.cleanup_batch)})"
            ).fetchone()
            plan = found[0][0] if found else {}
            raise psycopg.Rollback
        return {
            "past_retention": row[0] if row else 0,
            "ms": round(plan.get("Execution Time", 0.0), 2),
            "removed": plan.get("Plan", {}).get("Actual Rows"),
            "plan": _plan_shape(plan.get("Plan", {})),
        }

    def _since(self, at: datetime | None) -> float | None:
        return None if at is None else round((at - self.server_t0).total_seconds(), 1)

    def sample(self, elapsed: float) -> dict[str, Any]:
        """One sample: counts, sizes, table statistics, the window's latency, pgqueue stats."""
        t0 = time.perf_counter()
        enqueued = self.producer.enqueued
        calls = self.producer.take_calls()
        conn, t = self.conn, {"t": JOBS}
        now_row = conn.execute("SELECT clock_timestamp()").fetchone()
        assert now_row is not None
        until = now_row[0]
        rows: dict[str, int] = dict(
            conn.execute(f"SELECT status, count(*) FROM {JOBS} GROUP BY status").fetchall()
        )
        heap, total, db, indexes = conn.execute(SIZES, t).fetchone() or (0, 0, 0, {})
        stats = conn.execute(TABLE_STATS, t).fetchone()
        assert stats is not None
        n, claim, claim_max, finish = conn.execute(
            LATENCY, {"since": self.bound, "until": until}
        ).fetchone() or (0, None, None, None)
        self.bound = until
        queue = next((q for q in self.client.queue_stats(QUEUE)), None)
        cleanup = self.cleanup_probe()
        unfinished = sum(rows.get(s, 0) for s in ("pending", "processing"))
        window = elapsed - self.last_elapsed
        sample = {
            "elapsed": round(elapsed, 1),
            "enqueued": enqueued,
            "completed": max(0, enqueued - unfinished - rows.get("failed", 0)),
            "rate": round((enqueued - self.last_enqueued) / window, 1) if window else None,
            "rows": {s: rows.get(s, 0) for s in ("pending", "processing", "completed", "failed")},
            "sizes": {"heap": heap, "total": total, "indexes": indexes or {}, "database": db},
            "table": {
                "n_live_tup": stats[0],
                "n_dead_tup": stats[1],
                "n_tup_ins": stats[2],
                "n_tup_upd": stats[3],
                "n_tup_hot_upd": stats[4],
                "n_tup_del": stats[5],
                "autovacuum_count": stats[6],
                "autoanalyze_count": stats[7],
                "vacuum_count": stats[8],
                "last_autovacuum": self._since(stats[9]),
                "last_autoanalyze": self._since(stats[10]),
            },
            "latency": {
                "jobs": n,
                "claim_ms": {
                    "p50": _ms(claim[0]) if claim else None,
                    "p95": _ms(claim[1]) if claim else None,
                    "p99": _ms(claim[2]) if claim else None,
                    "max": _ms(claim_max),
                },
                "finish_ms": {
                    "p50": _ms(finish[0]) if finish else None,
                    "p99": _ms(finish[1]) if finish else None,
                },
            },
            "stats": {
                "available": queue.counts.available if queue else 0,
                "processing": queue.counts.processing if queue else 0,
                "oldest_available_age": queue.oldest_available_age if queue else None,
            },
            "enqueue_ms": {
                "calls": len(calls),
                "median": _ms(statistics.median(calls)) if calls else None,
                "max": _ms(max(calls)) if calls else None,
            },
            "cleanup": cleanup,
            "sample_ms": 0.0,
        }
        sample["sample_ms"] = _ms(time.perf_counter() - t0)
        self.last_enqueued, self.last_elapsed = enqueued, elapsed
        return sample


def _plan_shape(node: dict[str, Any]) -> str:
    """A plan as one line: each node's type (and relation or index), children in brackets."""
    if not node:
        return ""
    name = node.get("Node Type", "?")
    on = node.get("Index Name") or node.get("Relation Name")
    if node.get("Sort Method"):
        on = node["Sort Method"]
    head = f"{name} ({on})" if on else name
    children = [_plan_shape(c) for c in node.get("Plans", [])]
    return head + (f" [{', '.join(children)}]" if children else "")


def sample_line(s: dict[str, Any]) -> str:
    """One printed line per sample."""
    r, sz, tb, lat = s["rows"], s["sizes"], s["table"], s["latency"]["claim_ms"]
    idx = sum(sz["indexes"].values())
    age = s["stats"]["oldest_available_age"]
    return (
        f"{_clock(s['elapsed'])}  enq {s['enqueued']:>9,} ({s['rate'] or 0:>6,.0f}/s)  "
        f"done {s['completed']:>9,}  rows p {r['pending']:,} r {r['processing']:,} "
        f"c {r['completed']:,}  dead {tb['n_dead_tup']:,}  heap {_mb(sz['heap'])} "
        f"idx {_mb(idx)} total {_mb(sz['total'])} MB  autovacuum {tb['autovacuum_count']}  "
        f"claim p50/p95/p99 {_f(lat['p50'])}/{_f(lat['p95'])}/{_f(lat['p99'])} ms  "
        f"oldest available {age or 0:.1f} s  past retention {s['cleanup']['past_retention']:,} "
        f"(cleanup statement {s['cleanup']['ms']:.1f} ms)"
    )


# -- the server log: autovacuum runs ------------------------------------------------------------

LOG_ENTRY = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) UTC \[\d+\] LOG:  "
    r'automatic (vacuum|analyze) of table "([^"]+)"'
)


def autovacuum_runs(log: Path, server_t0: datetime) -> list[dict[str, Any]]:
    """Every autovacuum and autoanalyze of a pgqueue table in the server log, parsed."""
    runs: list[dict[str, Any]] = []
    block: list[str] = []

    def flush() -> None:
        if not block:
            return
        m = LOG_ENTRY.match(block[0])
        text = "\n".join(block)
        block.clear()
        if m is None or "pgqueue_" not in m.group(3):
            return
        at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC)
        run: dict[str, Any] = {
            "elapsed": round((at - server_t0).total_seconds(), 1),
            "what": m.group(2),
            "table": m.group(3).rsplit(".", 1)[-1],
        }
        for key, pattern in (
            ("index_scans", r"index scans: (\d+)"),
            ("pages_removed", r"pages: (\d+) removed"),
            ("pages_remain", r"pages: \d+ removed, (\d+) remain"),
            ("tuples_removed", r"tuples: (\d+) removed"),
            ("tuples_remain", r"tuples: \d+ removed, (\d+) remain"),
            ("dead_not_removable", r"(\d+) are dead but not yet removable"),
            ("pages_scanned", r"remain, (\d+) scanned"),
            ("dead_items_removed", r"had (\d+) dead item identifiers removed"),
            ("seconds", r"elapsed: ([\d.]+) s"),
        ):
            found = re.search(pattern, text)
            if found:
                run[key] = float(found.group(1)) if key == "seconds" else int(found.group(1))
        indexes = re.findall(
            r'index "([^"]+)": pages: (\d+) in total, (\d+) newly deleted, (\d+) currently '
            r"deleted, (\d+) reusable",
            text,
        )
        if indexes:
            run["indexes"] = {
                name: {"pages": int(p), "newly_deleted": int(nd), "reusable": int(r)}
                for name, p, nd, _, r in indexes
            }
        runs.append(run)

    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("\t") and block:
            block.append(line)
        else:
            flush()
            if LOG_ENTRY.match(line):
                block.append(line)
    flush()
    return runs


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


# -- the report -------------------------------------------------------------------------------


def _mb(n: float) -> str:
    return f"{n / 2**20:.1f}"


def _f(v: float | None, digits: int = 1) -> str:
    return "–" if v is None else f"{float(v):,.{digits}f}"


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def _span(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def _short(index: str) -> str:
    return index.removeprefix(f"{JOBS}_").removesuffix("_idx")


def _marks(samples: list[dict[str, Any]], duration: float, rows: int = 7) -> list[int]:
    """Indexes of the samples nearest to ``rows`` evenly spaced times (every 5 min in 30)."""
    out: list[int] = []
    for k in range(rows):
        target = duration * k / (rows - 1)
        best = min(range(len(samples)), key=lambda i: abs(samples[i]["elapsed"] - target))
        if best not in out:
            out.append(best)
    return out


def _thirds(samples: list[dict[str, Any]], duration: float) -> tuple[list[Any], list[Any]]:
    middle = [s for s in samples if duration / 3 < s["elapsed"] <= 2 * duration / 3]
    last = [s for s in samples if s["elapsed"] > 2 * duration / 3]
    return middle, last


def _median(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def verdict(doc: dict[str, Any]) -> dict[str, Any]:
    """Bounded or not: the middle third of the run against the last third."""
    samples, duration = doc["samples"], doc["meta"]["params"]["duration"]
    middle, last = _thirds(samples, samples[-1]["elapsed"] if samples else duration)
    if not middle or not last:
        return {"enough_samples": False}

    def peak(part: list[Any], f: Any) -> float:
        return float(max(f(s) for s in part))

    size_mid = peak(middle, lambda s: s["sizes"]["total"])
    size_last = peak(last, lambda s: s["sizes"]["total"])
    dead_mid = peak(middle, lambda s: s["table"]["n_dead_tup"])
    dead_last = peak(last, lambda s: s["table"]["n_dead_tup"])
    rows_mid = peak(middle, lambda s: sum(s["rows"].values()))
    rows_last = peak(last, lambda s: sum(s["rows"].values()))
    p50 = [_median([s["latency"]["claim_ms"]["p50"] for s in part]) for part in (middle, last)]
    p99 = [_median([s["latency"]["claim_ms"]["p99"] for s in part]) for part in (middle, last)]
    av = [s["table"]["autovacuum_count"] for s in samples]
    av_last = av[-1] - (middle[-1]["table"]["autovacuum_count"])

    def flat(a: float | None, b: float | None) -> bool:
        return a is not None and b is not None and b <= 1.5 * a + 1.0

    return {
        "enough_samples": True,
        "size_middle": size_mid,
        "size_last": size_last,
        "size_growth_pct": round((size_last / size_mid - 1) * 100, 1) if size_mid else None,
        "bounded": size_last <= 1.10 * size_mid,
        "rows_middle": rows_mid,
        "rows_last": rows_last,
        "dead_middle": dead_mid,
        "dead_last": dead_last,
        "autovacuum_last_third": av_last,
        "autovacuum_kept_up": dead_last <= 1.10 * dead_mid + 1000,
        "claim_p50_ms": p50,
        "claim_p99_ms": p99,
        "latency_flat": flat(p50[0], p50[1]) and flat(p99[0], p99[1]),
    }


def _header(doc: dict[str, Any], source: str) -> str:
    meta, prod = doc["meta"], doc["producer"]
    p = meta["params"]
    m, pg = meta["machine"], meta["machine"]["postgresql"]
    server = (
        "a cluster started for the run (stock settings, autovacuum on, every autovacuum logged)"
        if meta["cluster"] == "started for the run"
        else f"an existing server (`--dsn`; autovacuum {pg['autovacuum']})"
    )
    load = meta["load_average"]
    short = ""
    if meta["mode"] == "soak" and p["duration"] < 1800:
        short = f"**A short run ({p['duration']:.0f} s), not the 30-minute soak.** "
    if meta.get("interrupted"):
        short += "**Interrupted before its end.** "
    return (
        f"{short}Run of {meta['date']}: {p['rate']:,.0f} jobs/s asked for "
        f"{_span(p['duration'])} ({prod['actual_rate']:,.0f} jobs/s added, "
        f"{prod['enqueued']:,} jobs in {prod['seconds']:.0f} s, in batches every 100 ms; "
        f"late batches: {prod['late_batches']}, by at most {prod['max_lag_ms']:.0f} ms); "
        f"{p['workers']} worker process{'es' if p['workers'] != 1 else ''} × concurrency "
        f"{p['concurrency']}, "
        + (f"jobs that sleep {p['job_ms']:.0f} ms" if p["job_ms"] else "a job that does nothing")
        + f"; leader's cleanup: completed_retention {p['completed_retention']:.0f} s, "
        f"cleanup_batch {p['cleanup_batch']:,}, leader_interval {p['leader_interval']:.0f} s "
        f"(at most {p['cleanup_ceiling_per_s']:,.0f} rows/s); a sample every "
        f"{p['sample']:.0f} s. On {m['nproc']} CPUs ({m['cpu']}), PostgreSQL "
        f"{pg['server_version'].split()[0]}, {server}; jobs table options "
        f"`{', '.join(m['jobs_reloptions'] or [])}`; commit "
        f"`{meta['git']['commit'][:10]}{'+dirty' if meta['git']['dirty'] else ''}`; load "
        f"average {load['before']:.1f} before, {load['after']:.1f} after; source: `{source}`."
    )


def _size_table(doc: dict[str, Any], marks: list[int]) -> list[str]:
    samples = doc["samples"]
    names = sorted(samples[-1]["sizes"]["indexes"], key=lambda n: (not n.endswith("_pkey"), n))
    lines = [
        "| elapsed | rows: pending / processing / completed | dead rows | heap, MB | "
        + " | ".join(f"`{_short(n)}`" for n in names)
        + " | total, MB | autovacuums | completed past retention | one cleanup statement, ms |",
        "|---|---|---|---|" + "---|" * len(names) + "---|---|---|---|",
    ]
    for i in marks:
        s = samples[i]
        r, sz = s["rows"], s["sizes"]
        lines.append(
            f"| {_clock(s['elapsed'])} | {r['pending']:,} / {r['processing']:,} / "
            f"{r['completed']:,} | {s['table']['n_dead_tup']:,} | {_mb(sz['heap'])} | "
            + " | ".join(_mb(sz["indexes"].get(n, 0)) for n in names)
            + f" | {_mb(sz['total'])} | {s['table']['autovacuum_count']} | "
            f"{_cleanup_cells(s)} |"
        )
    return lines


def _cleanup_cells(s: dict[str, Any]) -> str:
    c = s.get("cleanup")
    return f"{c['past_retention']:,} | {c['ms']:,.1f}" if c else "– | –"


def _latency_table(doc: dict[str, Any], marks: list[int]) -> list[str]:
    samples = doc["samples"]
    lines = [
        "| window ending at | added, jobs/s | jobs finished in the window | claim p50 / p95 / "
        "p99 / max, ms | enqueue to finish p50 / p99, ms | worst window p99 since the row "
        "above, ms | `add_jobs` of a batch, median / max, ms | oldest available job, s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    prev = -1
    for i in marks:
        s = samples[i]
        c, f = s["latency"]["claim_ms"], s["latency"]["finish_ms"]
        worst = max(
            (x["latency"]["claim_ms"]["p99"] or 0.0 for x in samples[prev + 1 : i + 1]),
            default=0.0,
        )
        prev = i
        e = s["enqueue_ms"]
        lines.append(
            f"| {_clock(s['elapsed'])} | {_f(s['rate'], 0)} | {s['latency']['jobs']:,} | "
            f"{_f(c['p50'])} / {_f(c['p95'])} / {_f(c['p99'])} / {_f(c['max'])} | "
            f"{_f(f['p50'])} / {_f(f['p99'])} | {_f(worst)} | {_f(e['median'])} / "
            f"{_f(e['max'])} | {_f(s['stats']['oldest_available_age'])} |"
        )
    return lines


def _autovacuum_table(doc: dict[str, Any], marks: list[int]) -> list[str]:
    """Autovacuum runs on the jobs table between the rows of the size table."""
    runs = [r for r in doc.get("autovacuum_runs") or [] if r["table"] == JOBS]
    samples = doc["samples"]
    vacuums = [r for r in runs if r["what"] == "vacuum"]
    if not doc.get("autovacuum_runs"):
        total = samples[-1]["table"]["autovacuum_count"]
        return [f"Autovacuum ran {total} times on the jobs table (pg_stat_user_tables)."]
    gaps = [b["elapsed"] - a["elapsed"] for a, b in itertools.pairwise(vacuums)]
    lines = [
        f"Autovacuum on the jobs table, from the server's log: {len(vacuums)} vacuums and "
        f"{len(runs) - len(vacuums)} analyzes"
        + (f", a vacuum every {statistics.median(gaps):.0f} s (median)" if gaps else "")
        + ".",
        "",
        "| between | vacuums | dead tuples removed | dead item identifiers removed | not yet "
        "removable (most) | heap pages scanned / in all (last) | longest, s | index pages "
        "reusable / in all (last) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    bounds = [0.0] + [samples[i]["elapsed"] for i in marks if samples[i]["elapsed"] > 0]
    for lo, hi in itertools.pairwise(bounds):
        part = [r for r in vacuums if lo < r["elapsed"] <= hi]
        last = part[-1] if part else {}
        reusable = last.get("indexes", {})
        pages = (
            f"{last.get('pages_scanned', 0):,} / {last.get('pages_remain', 0):,}" if part else "–"
        )
        lines.append(
            f"| {_clock(lo)}–{_clock(hi)} | {len(part)} | "
            f"{sum(r.get('tuples_removed', 0) for r in part):,} | "
            f"{sum(r.get('dead_items_removed', 0) for r in part):,} | "
            f"{max((r.get('dead_not_removable', 0) for r in part), default=0):,} | {pages} | "
            f"{_f(max((r.get('seconds', 0.0) for r in part), default=None), 2)} | "
            + (
                ", ".join(
                    f"`{_short(n)}` {v['reusable']:,}/{v['pages']:,}"
                    for n, v in sorted(reusable.items())
                )
                or "–"
            )
            + " |"
        )
    return lines


def _verdict_line(doc: dict[str, Any]) -> str:
    v = verdict(doc)
    if not v["enough_samples"]:
        return "**Verdict:** too few samples to compare the middle and the last third."
    p50, p99 = v["claim_p50_ms"], v["claim_p99_ms"]
    return (
        f"**Verdict: {'bounded' if v['bounded'] else 'NOT bounded'}**: table + indexes peaked "
        f"at {_mb(v['size_middle'])} MB in the middle third of the run and "
        f"{_mb(v['size_last'])} MB in the last ({v['size_growth_pct']:+.1f} %; bounded means "
        f"within 10 %), rows at {v['rows_middle']:,.0f} and {v['rows_last']:,.0f}. Claim "
        f"latency {'flat' if v['latency_flat'] else '**rising**'}: median of the windows' p50 "
        f"{_f(p50[0])} ms then {_f(p50[1])} ms, of their p99 {_f(p99[0])} ms then "
        f"{_f(p99[1])} ms. Autovacuum "
        f"{'kept up' if v['autovacuum_kept_up'] else '**did not keep up**'}: dead row "
        f"versions peaked at {v['dead_middle']:,.0f} then {v['dead_last']:,.0f}, "
        f"{v['autovacuum_last_third']} autovacuums in the last third."
    )


def soak_section(doc: dict[str, Any], source: str) -> str:
    """The ``soak`` section of docs/benchmarks.md for one results file."""
    samples = doc["samples"]
    marks = _marks(samples, samples[-1]["elapsed"])
    return "\n".join(
        [
            _header(doc, source),
            "",
            _verdict_line(doc),
            "",
            "Size over time (`pg_relation_size` of the heap and of each index; total: "
            "`pg_total_relation_size`, with TOAST, free space and visibility maps; dead rows: "
            "`n_dead_tup`; autovacuums: `autovacuum_count`, both from `pg_stat_user_tables`):",
            "",
            *_size_table(doc, marks),
            "",
            "Latency over time: claim latency is `locked_at − created_at` of the jobs that "
            "finished in the sample window ending at that time (percentiles by PostgreSQL over "
            "those rows; the server's clock at both ends); the worst window's p99 covers every "
            "window since the row above:",
            "",
            *_latency_table(doc, marks),
            "",
            *_autovacuum_table(doc, marks),
        ]
    )


def overload_section(doc: dict[str, Any], source: str) -> str:
    """A ``soak-overload-<kind>`` section: what grows, and what an operator sees."""
    samples, p = doc["samples"], doc["meta"]["params"]
    first, last = samples[0], samples[-1]
    span = (last["elapsed"] - first["elapsed"]) / 60 or 1.0
    # cleanup's rate once there was something to remove (retention passed)
    due = next((s for s in samples if s["elapsed"] >= p["completed_retention"]), last)
    removed = (last["table"]["n_tup_del"] - due["table"]["n_tup_del"]) / max(
        last["elapsed"] - due["elapsed"], 1.0
    )
    lines = [
        _header(doc, source),
        "",
        "| elapsed | rows: pending / processing / completed | table + indexes, MB | dead rows | "
        "removed by cleanup, rows/s | `pgqueue stats`: available, oldest available (s) | "
        "claim p50 / p99, ms | autovacuums | completed past retention | one cleanup "
        "statement, ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    prev: dict[str, Any] | None = None
    for i in _marks(samples, last["elapsed"]):
        s = samples[i]
        r = s["rows"]
        rate = "–"
        if prev is not None and s["elapsed"] > prev["elapsed"]:
            rate = _f(
                (s["table"]["n_tup_del"] - prev["table"]["n_tup_del"])
                / (s["elapsed"] - prev["elapsed"]),
                0,
            )
        prev = s
        lines.append(
            f"| {_clock(s['elapsed'])} | {r['pending']:,} / {r['processing']:,} / "
            f"{r['completed']:,} | {_mb(s['sizes']['total'])} | {s['table']['n_dead_tup']:,} | "
            f"{rate} | {s['stats']['available']:,}, {_f(s['stats']['oldest_available_age'])} | "
            f"{_f(s['latency']['claim_ms']['p50'])} / {_f(s['latency']['claim_ms']['p99'])} | "
            f"{s['table']['autovacuum_count']} | {_cleanup_cells(s)} |"
        )
    growth = (last["sizes"]["total"] - first["sizes"]["total"]) / span
    rows = sum(last["rows"].values()) - sum(first["rows"].values())
    lines += [
        "",
        f"From {_clock(first['elapsed'])} to {_clock(last['elapsed'])}: table + indexes "
        f"{growth / 2**20:+.1f} MB/min, rows {rows / (span * 60):+,.0f}/s (pending "
        f"{(last['rows']['pending'] - first['rows']['pending']) / (span * 60):+,.0f}/s, "
        f"completed {(last['rows']['completed'] - first['rows']['completed']) / (span * 60):+,.0f}"
        f"/s); from {_clock(due['elapsed'])}, when retention had passed, cleanup removed "
        f"{removed:,.0f} rows/s (its ceiling here: "
        f"{p['cleanup_ceiling_per_s']:,.0f}/s).",
    ]
    if last.get("cleanup"):
        lines += [
            "",
            f"The cleanup statement's plan at the end (`EXPLAIN ANALYZE`, rolled back; "
            f"{last['cleanup']['ms']:,.1f} ms): `{last['cleanup']['plan']}`.",
        ]
    if doc.get("pgqueue_stats"):
        lines += [
            "",
            "`pgqueue stats --completed` at the end:",
            "",
            "```text",
            doc["pgqueue_stats"],
            "```",
        ]
    return "\n".join(lines)


def write_report(doc: dict[str, Any], path: Path) -> None:
    """Rewrite this run's section of docs/benchmarks.md from ``doc`` (read from ``path``)."""
    source = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
    overload = doc["meta"].get("overload")
    body = (overload_section if overload else soak_section)(doc, source)
    begin, end = MARKERS[overload]
    docs_section_write(begin, end, body, path)


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
    print(f"results: {out.relative_to(ROOT) if out.resolve().is_relative_to(ROOT) else out}")
    v = verdict(doc)
    if v["enough_samples"] and not (args.overload or doc["meta"]["interrupted"]):
        print(_verdict_line(doc))
    if not (args.no_report or doc["meta"]["interrupted"] or not doc["samples"]):
        write_report(doc, out.resolve())


if __name__ == "__main__":
    main()
