"""The benchmark harness: ``make bench`` (or ``python -m benchmarks.run --help``).

Every measurement runs in a database created for it alone, with each library in processes of
its own (``benchmarks/role.py``, measurements in ``benchmarks/harness.py``). Repetitions
interleave the subjects (A B C A B C ...), so that drift in the machine's state hits all of them
alike. Every job of every measurement is checked to have run exactly once. The pgbench
references of SPEC §10 (``benchmarks/pgbench.py``: pgqueue's own INSERT on its own table) are
subjects named ``pgbench...``, interleaved with the libraries in the enqueue measurements. Each
library's best concurrency comes from the ``sweep`` scenario (``benchmarks/sweep.py``). Results
go to ``benchmarks/results/<stamp>.json``, with the commit they ran from; ``benchmarks/report.py``
turns a results file into the tables of docs/benchmarks.md and a chart.

Scenarios (``--scenarios``), and the measurements they make:

- sweep: ``sweep_c<level>``, a drain at each of ``--sweep-levels``, one process;
- enqueue_single: one add_job per call, one producer (and pgbench's single INSERT, 1 client,
  with its variants: no NOTIFY, only the primary key, each secondary index dropped);
- enqueue_concurrent: ``--producers`` concurrent producers, one add_job per call (and pgbench at
  10 clients);
- enqueue_bulk_1000: the batch API in calls of ``--batch`` jobs (and pgbench's 1,000-row
  INSERT);
- enqueue_bulk: one batch call of ``--bulk-jobs`` jobs;
- drain: ``drain_c1``, ``drain_c10``, ``drain_best``; drain_2proc; drain_long (``--long-jobs``
  at the best concurrency, ``--long-reps`` repetitions);
- latency, claim_cost (``claim_empty``, ``claim_1m_finished``), memory, admin.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import psycopg

from . import pgbench
from .harness import Harness, _summary
from .subjects.registry import ALL
from .sweep import DEFAULT_LEVELS, BestConcurrency

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

SCENARIOS = (
    "sweep",
    "enqueue_single",
    "enqueue_concurrent",
    "enqueue_bulk_1000",
    "enqueue_bulk",
    "drain",
    "drain_2proc",
    "drain_long",
    "latency",
    "claim_cost",
    "memory",
    "admin",
)
#: Subjects that drain a few hundred jobs a second: their sweep drains fewer jobs.
SLOW = ("procrastinate",)
PGBENCH_VARIANTS = ("no-notify", "pkey-only", "per-index")


@dataclass
class Step:
    """One measurement: run ``fn(subject)`` for each subject, ``reps`` times, interleaved."""

    name: str
    subjects: list[str]
    fn: Callable[[str], dict[str, Any]]
    reps: int


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in (
        "pgqueue",
        "pgqueuer",
        "procrastinate",
        "asyncpg",
        "psycopg",
        "sqlalchemy",
        "uvloop",
    ):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    with contextlib.suppress(OSError):
        version = subprocess.run([pgbench.PGBENCH, "--version"], capture_output=True, text=True)
        found = re.search(r"\d+(\.\d+)+", version.stdout)
        out["pgbench"] = found.group(0) if found else version.stdout.strip()
    return out


def _git() -> dict[str, Any]:
    """The commit the run is from, and the files that differ from it (a dirty tree)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.rstrip("\n")

    try:
        commit = git("rev-parse", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no").splitlines()
    except (OSError, subprocess.CalledProcessError) as exc:
        return {"commit": None, "error": str(exc)}
    return {
        "commit": commit,
        "dirty": bool(changed),
        "dirty_files": [line[3:] for line in changed][:100],
    }


def _server(dsn: str) -> dict[str, str]:
    with psycopg.connect(dsn) as conn:
        return {
            name: conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
            for name in (
                "server_version",
                "synchronous_commit",
                "fsync",
                "wal_sync_method",
                "autovacuum",
                "shared_buffers",
                "max_connections",
            )
        }


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--dsn",
        default=os.environ.get(
            "PGQUEUE_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
        help="an admin connection: each measurement creates and drops its own database",
    )
    p.add_argument(
        "--subjects",
        default=",".join((*ALL, "pgbench")),
        help="libraries (pgqueue/<mode>, pgqueuer, pgqueuer-pool, procrastinate), and pgbench "
        "for the references",
    )
    p.add_argument(
        "--scenarios",
        default=",".join(SCENARIOS),
        help="admin: the admin API's reads on 1M finished + 100k pending jobs, pgqueue only "
        "(benchmarks/admin_queries.py, results of its own: results/<time>-admin.json)",
    )
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="small sizes, one repetition: a smoke test")
    p.add_argument("--memory-jobs", type=int, default=1_000_000)
    p.add_argument(
        "--memory-subjects",
        default="pgqueue/asyncpg,pgqueue/psycopg-sync,pgqueuer",
        help="whose worker memory to follow over --memory-jobs jobs (one run each)",
    )
    p.add_argument("--drain-jobs", type=int, default=20_000, help="jobs per drain")
    p.add_argument(
        "--claim-subjects",
        default=",".join(ALL),
        help="who runs the claim-cost measurement (filling 1M rows takes up to a minute each)",
    )
    p.add_argument(
        "--drain-c1-jobs",
        type=int,
        default=5_000,
        help="jobs in the concurrency-1 drain (the slowest measurement: ~100 jobs/s for PGQueuer, "
        "whose two setups take ~45 s each)",
    )
    p.add_argument("--long-jobs", type=int, default=200_000, help="jobs per long drain")
    p.add_argument("--long-reps", type=int, default=1, help="repetitions of the long drains")
    p.add_argument(
        "--sweep-levels",
        default=",".join(map(str, DEFAULT_LEVELS)),
        help="concurrencies of the sweep (quick: 10,100)",
    )
    p.add_argument("--sweep-jobs", type=int, default=20_000, help="jobs per sweep drain")
    p.add_argument(
        "--sweep-slow-jobs",
        type=int,
        default=5_000,
        help=f"jobs per sweep drain of {', '.join(SLOW)} (a few hundred jobs/s at any level)",
    )
    p.add_argument("--sweep-reps", type=int, default=1, help="repetitions of the sweep")
    p.add_argument("--single-jobs", type=int, default=3_000, help="add_job calls, one producer")
    p.add_argument("--producers", type=int, default=10, help="concurrent producers")
    p.add_argument("--concurrent-jobs", type=int, default=10_000, help="jobs, all producers")
    p.add_argument("--batch", type=int, default=1_000, help="jobs per batch call")
    p.add_argument("--batch-jobs", type=int, default=100_000, help="jobs added in --batch calls")
    p.add_argument("--bulk-jobs", type=int, default=100_000, help="jobs in one bulk call")
    p.add_argument("--pgbench-seconds", type=float, default=10.0, help="pgbench -T")
    p.add_argument(
        "--pgbench-variants",
        default=",".join(PGBENCH_VARIANTS),
        help="pgbench references besides pgqueue's INSERT as migrated: no-notify, pkey-only "
        "(every secondary index dropped), per-index (each dropped alone); '' for none",
    )
    p.add_argument(
        "--poll",
        action="store_true",
        help="end every drain by polling the library's table, pgqueue's too (default: "
        "pgqueue's worker runs until empty and tells the end itself)",
    )
    p.add_argument("--out", type=Path)
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def main() -> None:
    args = _parser().parse_args()
    subjects = [s for s in args.subjects.split(",") if s]
    libs = [s for s in subjects if not s.startswith("pgbench")]
    with_pgbench = "pgbench" in subjects
    scenarios = [s for s in args.scenarios.split(",") if s]
    for name in scenarios:
        if name not in SCENARIOS:
            raise SystemExit(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    quick = args.quick
    reps = 1 if quick else args.reps
    levels = [int(c) for c in ("10,100" if quick else args.sweep_levels).split(",") if c]
    sizes = {
        "single": 300 if quick else args.single_jobs,
        "concurrent": 1_000 if quick else args.concurrent_jobs,
        "producers": args.producers,
        "batch": args.batch,
        "batch_jobs": 10_000 if quick else args.batch_jobs,
        "bulk": 10_000 if quick else args.bulk_jobs,
        "drain": 2_000 if quick else args.drain_jobs,
        "drain_c1": 500 if quick else args.drain_c1_jobs,
        "long": 5_000 if quick else args.long_jobs,
        "sweep": 1_000 if quick else args.sweep_jobs,
        "sweep_slow": 500 if quick else args.sweep_slow_jobs,
        "claim_jobs": 2_000 if quick else 10_000,
        "finished": 50_000 if quick else 1_000_000,
        "latency": 50 if quick else 200,
        "memory": 20_000 if quick else args.memory_jobs,
        "pgbench_seconds": 2.0 if quick else args.pgbench_seconds,
        "pgbench_rows": pgbench.BULK_ROWS,
    }
    harness = Harness(args.dsn, args.verbose, until_empty=not args.poll)
    server = _server(args.dsn)
    best = BestConcurrency()
    git = _git()  # before the run: the tree may change while it runs
    runs: list[dict[str, Any]] = []

    # the pgbench references of each enqueue measurement
    variants = [v for v in args.pgbench_variants.split(",") if v] if with_pgbench else []
    single_refs = ["pgbench"] if with_pgbench else []
    if "no-notify" in variants:
        single_refs.append("pgbench/no-notify")
    if "pkey-only" in variants:
        single_refs.append("pgbench/pkey-only")
    if "per-index" in variants and "enqueue_single" in scenarios:
        single_refs += [f"pgbench/drop-{i}" for i in harness.pgbench_indexes()]
    concurrent_refs = [r for r in single_refs if r in ("pgbench", "pgbench/no-notify")]
    secs = sizes["pgbench_seconds"]

    def enqueue(
        measurement: str, lib: Callable[[str], dict[str, Any]], clients: int = 1
    ) -> Callable[[str], dict[str, Any]]:
        def fn(subject: str) -> dict[str, Any]:
            if subject.startswith("pgbench"):
                return harness.pgbench(subject, measurement, secs, clients)
            return lib(subject)

        return fn

    plan: list[Step] = []
    if "sweep" in scenarios:
        for c in levels:
            plan.append(
                Step(
                    f"sweep_c{c}",
                    libs,
                    lambda s, c=c: harness.drain(
                        s, sizes["sweep_slow" if s in SLOW else "sweep"], c
                    ),
                    args.sweep_reps if not quick else 1,
                )
            )
    if "enqueue_single" in scenarios:
        fn = enqueue("enqueue_single", lambda s: harness.enqueue_single(s, sizes["single"]))
        plan.append(Step("enqueue_single", libs + single_refs, fn, reps))
    if "enqueue_concurrent" in scenarios:
        fn = enqueue(
            "enqueue_concurrent",
            lambda s: harness.enqueue_concurrent(s, sizes["concurrent"], args.producers),
            clients=args.producers,
        )
        plan.append(Step("enqueue_concurrent", libs + concurrent_refs, fn, reps))
    if "enqueue_bulk_1000" in scenarios:
        fn = enqueue(
            "enqueue_bulk_1000",
            lambda s: harness.enqueue_batches(s, sizes["batch_jobs"], args.batch),
        )
        plan.append(Step("enqueue_bulk_1000", libs + single_refs[:1], fn, reps))
    if "enqueue_bulk" in scenarios:
        plan.append(
            Step("enqueue_bulk", libs, lambda s: harness.enqueue_bulk(s, sizes["bulk"]), reps)
        )
    if "drain" in scenarios:
        plan.append(Step("drain_c1", libs, lambda s: harness.drain(s, sizes["drain_c1"], 1), reps))
        plan.append(Step("drain_c10", libs, lambda s: harness.drain(s, sizes["drain"], 10), reps))
        plan.append(
            Step("drain_best", libs, lambda s: harness.drain(s, sizes["drain"], best(s)), reps)
        )
    if "drain_2proc" in scenarios:
        plan.append(
            Step(
                "drain_2proc",
                libs,
                lambda s: harness.drain(s, sizes["drain"], best(s), processes=2),
                reps,
            )
        )
    if "drain_long" in scenarios:
        plan.append(
            Step(
                "drain_long",
                libs,
                lambda s: harness.drain(s, sizes["long"], best(s)),
                1 if quick else args.long_reps,
            )
        )
    if "latency" in scenarios:
        plan.append(
            Step("latency", libs, lambda s: harness.latency(s, sizes["latency"], 0.02, 10), reps)
        )
    if "claim_cost" in scenarios:
        claimers = [s for s in args.claim_subjects.split(",") if s in libs]
        plan.append(
            Step("claim_empty", claimers, lambda s: harness.drain(s, sizes["claim_jobs"], 10), reps)
        )
        plan.append(
            Step(
                "claim_1m_finished",
                claimers,
                lambda s: harness.drain(s, sizes["claim_jobs"], 10, finished=sizes["finished"]),
                reps,
            )
        )

    started = time.monotonic()
    for step in plan:
        for rep in range(step.reps):
            for subject in step.subjects:
                t = time.monotonic()
                result = step.fn(subject)
                runs.append({"measurement": step.name, "subject": subject, "rep": rep, **result})
                print(
                    f"[{time.monotonic() - started:7.1f}s] {step.name:18} {subject:26} rep {rep}: "
                    + ", ".join(f"{k}={v:,.1f}" for k, v in result.items() if isinstance(v, float))
                    + f"  ({time.monotonic() - t:.1f}s)",
                    flush=True,
                )
        if step.name.startswith("sweep_"):
            best.use_sweep(summarize(runs))
            print("best concurrency so far: " + ", ".join(f"{s} {best(s)}" for s in libs))
    if "memory" in scenarios:
        for subject in [s for s in args.memory_subjects.split(",") if s in libs]:
            runs.append(memory(harness, subject, sizes["memory"], best(subject)))

    summary = summarize(runs)
    doc = {
        "meta": {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "postgresql": server["server_version"],
            "server": server,
            "git": git,
            "versions": _versions(),
            "argv": sys.argv[1:],
            "reps": reps,
            "long_reps": 1 if quick else args.long_reps,
            "sweep_reps": 1 if "sweep" not in scenarios or quick else args.sweep_reps,
            "sweep_levels": levels if "sweep" in scenarios else [],
            "sizes": sizes,
            "best_concurrency": {s: best(s) for s in libs},
            "best_concurrency_from": {s: best.origin(s) for s in libs},
            "drain_end": "polled"
            if args.poll
            else "pgqueue: its worker's until-empty run "
            "where the pgqueue under test has one; peers: polled",
            "pgbench": _pgbench_meta() if with_pgbench else {},
            "wall_seconds": round(time.monotonic() - started, 1),
        },
        "summary": summary,
        "runs": runs,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = args.out or RESULTS / (
        f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}{'-quick' if quick else ''}.json"
    )
    if runs:  # not for "--scenarios admin" alone, which writes a results file of its own
        out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"results: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    if "admin" in scenarios:
        cmd = [sys.executable, "-m", "benchmarks.admin_queries", "--dsn", args.dsn]
        subprocess.run(cmd + (["--quick"] if quick else []), cwd=ROOT, check=True)


def memory(harness: Harness, subject: str, n: int, concurrency: int) -> dict[str, Any]:
    """Worker memory over a drain of ``n`` jobs, sampled every 0.5 s (one run)."""
    result = harness.drain(subject, n, concurrency, sample_rss=0.5)
    rss = result.pop("rss")
    warm = [b for _, done, b in rss if done >= n * 0.1]
    result.update(
        {
            "rss_start_mb": warm[0] / 2**20 if warm else 0.0,
            "rss_end_mb": warm[-1] / 2**20 if warm else 0.0,
            "rss_max_mb": max(warm) / 2**20 if warm else 0.0,
            "rss_growth_pct": (max(warm) / warm[0] - 1) * 100 if warm else 0.0,
            "samples": [[done, b] for _, done, b in rss],
        }
    )
    print(
        f"memory {subject}: {result['rss_start_mb']:.1f} -> {result['rss_max_mb']:.1f} MB "
        f"({result['rss_growth_pct']:+.1f}%) over {n:,} jobs",
        flush=True,
    )
    return {"measurement": "memory", "subject": subject, "rep": 0, **result}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """measurement -> subject -> key -> {median, min, max} over the repetitions."""
    values: dict[str, dict[str, dict[str, list[float]]]] = {}
    for run in runs:
        for key, value in run.items():
            if key in ("rep", "seconds", "transactions") or not isinstance(value, float):
                continue
            by_key = values.setdefault(run["measurement"], {}).setdefault(run["subject"], {})
            by_key.setdefault(key, []).append(value)
    return {
        m: {s: {k: _summary(v) for k, v in d.items()} for s, d in by.items()}
        for m, by in values.items()
    }


def _pgbench_meta() -> dict[str, Any]:
    """What the pgbench references ran: the scripts and their variables."""
    single, bulk = pgbench.job_insert_script(), pgbench.bulk_insert_script()
    return {
        "command": "pgbench -n -M prepared -c C -j J -T SECONDS -f SCRIPT -D ...",
        "job_insert": {"script": single.text, "defines": single.defines},
        "bulk_1000": {"script": bulk.text},
    }


if __name__ == "__main__":
    main()
