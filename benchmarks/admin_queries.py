"""The admin API's reads on a large table: ``make bench-admin`` (``--help`` for the options).

A database of its own gets 1,000,000 finished jobs and 100,000 pending ones
(``benchmarks/admin_data.py``), then each query runs through the public API, on the psycopg
sync client and the asyncpg async client in turn, repetition after repetition (the first
repetition is a warm-up and is not counted; more than five repetitions on one connection
let PostgreSQL's plan cache settle on its custom or generic plan, as it does in an
application). The results (median, p95, min, max in ms per query and driver, the machine, the
row counts, each statement's plan and which plan the clients' prepared statements used) go to
``benchmarks/results/<UTC time>-admin.json``, and the table between the ``admin`` markers of
docs/benchmarks.md is rewritten from it. SPEC §10's bar: the first page of failed jobs and
``queue_stats()`` under 50 ms each.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import psycopg

import pgqueue

from . import admin_data
from .admin_plans import PLAN_CACHE_SQL, explain_all, plan_cache
from .report import docs_section_write

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- admin:begin -->", "<!-- admin:end -->"
BAR_MS = 50.0
DRIVERS = ("psycopg-sync", "asyncpg")
QUEUE = "emails"  # the busiest queue: a third of the jobs
ARGS = {"user_id": 4242}  # one user's jobs: a handful among the queue's 380,000
FAILED_ARGS = {"template": "invoice"}  # a quarter of the failed ones


@dataclass(frozen=True)
class Case:
    """One admin call to time: ``call(client, cursor)`` returns its result (or a coroutine)."""

    key: str
    label: str  # the call, as code
    call: Callable[[Any, str | None], Any]
    note: str = ""
    bar: bool = False  # held to BAR_MS (SPEC §10)
    informative: bool = False


CASES = (
    Case(
        "failed_page",
        'list_jobs(status="failed", limit=50)',
        lambda c, _: c.list_jobs(status="failed", limit=50),
        note="first page",
        bar=True,
    ),
    Case(
        "failed_next_page",
        'list_jobs(status="failed", limit=50, cursor=...)',
        lambda c, cursor: c.list_jobs(status="failed", limit=50, cursor=cursor),
        note="the next page",
    ),
    Case("queue_stats", "queue_stats()", lambda c, _: c.queue_stats(), bar=True),
    Case(
        "pending_by_due",
        f'list_jobs(status="pending", queue="{QUEUE}", sort="due")',
        lambda c, _: c.list_jobs(status="pending", queue=QUEUE, sort="due"),
    ),
    Case(
        "pending_by_due_all",
        'list_jobs(status="pending", sort="due")',
        lambda c, _: c.list_jobs(status="pending", sort="due"),
        note="every queue: no index holds that order",
        informative=True,
    ),
    Case(
        "args_in_queue",
        f'list_jobs(queue="{QUEUE}", args={ARGS})'.replace("'", '"'),
        lambda c, _: c.list_jobs(queue=QUEUE, args=ARGS),
        note="no index: the whole table is read",
        informative=True,
    ),
    Case(
        "args_failed",
        f'list_jobs(status="failed", queue="{QUEUE}", args={FAILED_ARGS})'.replace("'", '"'),
        lambda c, _: c.list_jobs(status="failed", queue=QUEUE, args=FAILED_ARGS),
        note="args with a status: only failed jobs are read",
        informative=True,
    ),
    Case(
        "queue_stats_completed",
        "queue_stats(completed=True)",
        lambda c, _: c.queue_stats(completed=True),
        note="reads every completed job",
        informative=True,
    ),
)


# -- the database -------------------------------------------------------------------------


def _dsn_for(admin_dsn: str, db: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(admin_dsn)
    info["dbname"] = db
    return psycopg.conninfo.make_conninfo(**info)  # type: ignore[arg-type]


def _url(dsn: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    host, port, user = info.get("host", "127.0.0.1"), info.get("port", 5432), info.get("user")
    return f"postgresql://{str(user) + '@' if user else ''}{host}:{port}/{info['dbname']}"


# -- timing -------------------------------------------------------------------------------


def _check(case: Case, result: Any, counts: dict[str, int]) -> None:
    """Fail the run if a call did not return what it was asked for (a fast wrong answer)."""
    if case.key.startswith("queue_stats"):
        failed = sum(s.counts.failed for s in result)
        done = sum(s.counts.completed or 0 for s in result)
        ok = failed == counts.get("failed", 0) and (
            case.key != "queue_stats_completed" or done == counts.get("completed", 0)
        )
    else:
        jobs = result.jobs
        ids = [j.id for j in jobs]
        ok = bool(jobs)
        if case.key.startswith("failed"):
            ok = ok and len(jobs) == 50 and {j.status for j in jobs} == {"failed"}
            ok = ok and ids == sorted(ids, reverse=True)
        elif case.key.startswith("pending_by_due"):
            due = [(j.scheduled_for, j.id) for j in jobs]
            ok = ok and due == sorted(due) and {j.status for j in jobs} == {"pending"}
            ok = ok and (case.key != "pending_by_due" or {j.queue for j in jobs} == {QUEUE})
        elif case.key == "args_in_queue":
            ok = ok and all(
                j.queue == QUEUE and j.payload["user_id"] == ARGS["user_id"] for j in jobs
            )
    if not ok:
        raise RuntimeError(f"{case.label} returned a wrong answer: {result!r:.500}")


def measure(url: str, reps: int, counts: dict[str, int]) -> dict[str, Any]:
    """Time every case on both clients, interleaved; return the times in ms, warm-up apart."""
    try:
        import uvloop  # type: ignore[import-not-found,unused-ignore]

        loop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    sync = pgqueue.Client.connect(url, driver="psycopg")
    aclient = loop.run_until_complete(pgqueue.AsyncClient.connect(url, driver="asyncpg"))
    times: dict[str, dict[str, list[float]]] = {c.key: {d: [] for d in DRIVERS} for c in CASES}
    try:
        cursors = {
            "psycopg-sync": sync.list_jobs(status="failed", limit=50).next_cursor,
            "asyncpg": loop.run_until_complete(
                aclient.list_jobs(status="failed", limit=50)
            ).next_cursor,
        }

        async def timed_async(case: Case) -> tuple[float, Any]:
            t0 = time.perf_counter()
            result = await case.call(aclient, cursors["asyncpg"])
            return (time.perf_counter() - t0) * 1000, result

        for _ in range(reps + 1):
            for case in CASES:
                t0 = time.perf_counter()
                result = case.call(sync, cursors["psycopg-sync"])
                times[case.key]["psycopg-sync"].append((time.perf_counter() - t0) * 1000)
                _check(case, result, counts)
                ms, result = loop.run_until_complete(timed_async(case))
                times[case.key]["asyncpg"].append(ms)
                _check(case, result, counts)
        # which plans (custom, generic) the clients' prepared statements used; each client
        # ran everything on one pooled connection (the pool keeps one when idle)
        caches = {
            "psycopg-sync": plan_cache(list(sync.driver.query(PLAN_CACHE_SQL, ()))),
            "asyncpg": plan_cache(
                list(loop.run_until_complete(aclient.driver.query(PLAN_CACHE_SQL, ())))
            ),
        }
    finally:
        sync.close()
        loop.run_until_complete(aclient.close())
        loop.close()
    return {"times": times, "plan_cache": caches}


def _pct(values: list[float], p: float) -> float:
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summarise(times: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    """Per case and driver: the warm-up call apart, median, p95, min and max (ms)."""
    out: dict[str, Any] = {}
    for key, by_driver in times.items():
        out[key] = {}
        for driver, values in by_driver.items():
            warm = values[1:]
            out[key][driver] = {
                "first_ms": round(values[0], 2),
                "median_ms": round(statistics.median(warm), 2),
                "p95_ms": round(_pct(warm, 95), 2),
                "min_ms": round(min(warm), 2),
                "max_ms": round(max(warm), 2),
            }
    return out


# -- the machine ------------------------------------------------------------------------------


def machine(admin_dsn: str) -> dict[str, Any]:
    """What the numbers were taken on: CPU, memory, PostgreSQL and its planner settings."""
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
        with open("/proc/meminfo") as f:
            mem_kb = int(next(ln.split()[1] for ln in f if ln.startswith("MemTotal")))
    except (OSError, StopIteration):
        mem_kb = 0
    names = (
        "server_version",
        "shared_buffers",
        "work_mem",
        "effective_cache_size",
        "random_page_cost",
        "max_parallel_workers_per_gather",
        "jit",
        "plan_cache_mode",
    )
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        settings = {n: conn.execute(f"SHOW {n}").fetchone()[0] for n in names}  # type: ignore[index]
    return {
        "host": platform.node(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory_gb": round(mem_kb / 2**20, 1),
        "python": platform.python_version(),
        "postgresql": settings,
    }


# -- the report -------------------------------------------------------------------------------


def table(doc: dict[str, Any], source: str) -> str:
    """The docs/benchmarks.md section for one results file."""
    meta, s = doc["meta"], doc["summary"]
    rows = meta["rows"]["jobs_by_status"]
    pg = meta["machine"]["postgresql"]
    load = meta.get("load_average", {"before": 0.0, "after": 0.0})
    lines = [
        f"Run of {meta['date']} on {meta['machine']['cpus']} CPUs ({meta['machine']['cpu']}), "
        f"PostgreSQL {pg['server_version'].split()[0]} (shared_buffers {pg['shared_buffers']}, "
        f"work_mem {pg['work_mem']}), pgqueue {meta['versions'].get('pgqueue', '?')}; "
        f"{meta['reps']} repetitions after a warm-up, interleaved; source: `{source}`. "
        f"Jobs: {', '.join(f'{n:,} {k}' for k, n in sorted(rows.items()))} "
        f"({meta['rows']['pending_due_later']:,} of the pending due later), "
        f"{meta['rows']['total_size_with_indexes']} with indexes; built in "
        f"{meta['rows']['build_seconds']:.0f} s, whole run {meta['wall_seconds']:.0f} s; "
        f"load average {load['before']:.1f} before, {load['after']:.1f} after.",
        "",
        "| query | " + " | ".join(f"{d}: median (p95), ms" for d in DRIVERS) + " | bar |",
        "|---|" + "---|" * len(DRIVERS) + "---|",
    ]
    for case in CASES:
        cells = [
            f"{s[case.key][d]['median_ms']:.1f} ({s[case.key][d]['p95_ms']:.1f})" for d in DRIVERS
        ]
        if case.bar:
            worst = max(s[case.key][d]["p95_ms"] for d in DRIVERS)
            bar = f"< {BAR_MS:.0f} ms (p95): {'yes' if worst < BAR_MS else '**no**'}"
        else:
            bar = "informative" if case.informative else "–"
        call = f"`{case.label}`" + (f", {case.note}" if case.note else "")
        lines.append(f"| {call} | " + " | ".join(cells) + f" | {bar} |")
    return "\n".join(lines)


def write_report(doc: dict[str, Any], path: Path) -> None:
    """Rewrite the admin section of docs/benchmarks.md from ``doc`` (read from ``path``)."""
    source = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
    docs_section_write(BEGIN, END, table(doc, source), path)


# -- main -------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--dsn",
        default=os.environ.get(
            "PGQUEUE_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
        help="an admin connection: the run creates its own database and drops it at the end",
    )
    parser.add_argument(
        "--finished", type=int, default=1_000_000, help="finished jobs to write (97/2/1 %%)"
    )
    parser.add_argument(
        "--pending", type=int, default=100_000, help="pending jobs to write (a fifth due later)"
    )
    parser.add_argument("--reps", type=int, default=15, help="timed calls per query and driver")
    parser.add_argument(
        "--quick", action="store_true", help="100,000 + 10,000 jobs, 6 repetitions: a smoke test"
    )
    parser.add_argument("--keep", action="store_true", help="keep the database (to EXPLAIN)")
    parser.add_argument("--no-report", action="store_true", help="leave docs/benchmarks.md")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--report", type=Path, help="only rewrite the docs from this results file")
    args = parser.parse_args()
    if args.report:
        write_report(_load(args.report), args.report.resolve())
        return
    if args.quick:
        args.finished, args.pending, args.reps = 100_000, 10_000, 6

    started = time.monotonic()
    load_before = os.getloadavg()
    db = f"pgqueue_bench_admin_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"'.encode())
    dsn = _dsn_for(args.dsn, db)
    try:
        print(
            f"filling {db}: {args.finished:,} finished and {args.pending:,} pending jobs",
            flush=True,
        )
        rows = admin_data.fill(dsn, args.finished, args.pending)
        print(f"  built in {rows['build_seconds']} s: {rows['jobs_by_status']}", flush=True)
        measured = measure(_url(dsn), args.reps, rows["jobs_by_status"])
        plans = explain_all(dsn, QUEUE, ARGS, FAILED_ARGS)
    finally:
        if args.keep:
            print(f"kept database {db}: {_url(dsn)}")
        else:
            with psycopg.connect(args.dsn, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'.encode())
    summary = summarise(measured["times"])
    for case in CASES:
        print(
            f"{case.label:72} "
            + "  ".join(
                f"{d} {by['median_ms']:7.1f} ms (p95 {by['p95_ms']:.1f})"
                for d, by in summary[case.key].items()
            )
        )
    doc = {
        "meta": {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": machine(args.dsn),
            # other work on the machine meanwhile (1-minute load average; 2 = both cores busy)
            "load_average": {"before": load_before[0], "after": os.getloadavg()[0]},
            "versions": _versions(),
            "reps": args.reps,
            "rows": rows,
            "bar_ms": BAR_MS,
            "cases": {c.key: c.label for c in CASES},
            "wall_seconds": round(time.monotonic() - started, 1),
        },
        "summary": summary,
        "plan_cache": measured["plan_cache"],
        "times_ms": measured["times"],
        "plans": plans,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or RESULTS / f"{stamp}-admin{'-quick' if args.quick else ''}.json"
    out.write_text(_dumps(doc))
    print(f"results: {out.relative_to(ROOT) if out.resolve().is_relative_to(ROOT) else out}")
    if not (args.quick or args.no_report):
        write_report(doc, out.resolve())


def _versions() -> dict[str, str]:
    out = {}
    for dist in ("pgqueue", "asyncpg", "psycopg", "uvloop"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    return out


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def _dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, default=str) + "\n"


if __name__ == "__main__":
    main()
