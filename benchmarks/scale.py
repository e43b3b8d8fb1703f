"""Many worker processes on one queue: ``make bench-scale`` (``python -m benchmarks.scale --help``).

Drains ``--jobs`` jobs (200,000) with 1, 2, 4, 8 and 16 worker processes (``--processes``) of
pgqueue in one driver mode (``--mode``; default psycopg-sync, what ``pgqueue worker`` runs
without flags), every process at the same concurrency (``--concurrency``; default 10, the
worker's own default and ``drain_c10``'s), each point ``--repeat`` times, interleaved (1 2 4 8
16, then 16 8 4 2 1, ...), so that drift in the machine's state hits every point alike.

Each drain is ``benchmarks/harness.py``'s: a database of its own, the jobs pre-inserted by a
role process with ``add_jobs`` (``COPY``), ``VACUUM ANALYZE`` and a ``CHECKPOINT``, worker
processes of ``benchmarks/role.py``, every job checked to have run exactly once, the drain timed
from its first job's start. One step is added: the queue is paused while the workers start and
resumed once every one of them has registered, so that 16 processes drain together instead of
one after the other as each finishes importing (16 interpreters starting take seconds of the
two cores). The end is therefore polled (the jobs table says none is left): a worker that runs
until empty would stop at once on the paused queue.

Per drain: jobs/s; the workers' CPU per job; PostgreSQL's CPU per job, from ``/proc``, of the
drain database's backends and the server's background processes only (``benchmarks/harness.py``
counts every PostgreSQL process; the server here is shared with other databases' sessions);
the claims that took jobs (a claim stamps its jobs with its instance and its transaction's
start, so ``count(DISTINCT (instance_id, locked_at))`` counts them), jobs per claim and
PostgreSQL CPU per claim (all of the drain's server CPU over its claims: outcome writes
included, an upper bound); transactions per job (``pg_stat_database``); each process's share of
the runs; and, when the server loads ``pg_stat_statements`` (``shared_preload_libraries``), the
claim statement's calls and mean execution time (else the results say it was skipped). Results:
``benchmarks/results/<UTC time>-scale.json`` and the section between the ``scale`` markers of
docs/benchmarks.md; speedups are medians over 1 process's median.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import psycopg

import pgqueue

from .admin_queries import machine
from .harness import Harness, _cpu_since, _proc_cpu, _summary, drain_timeout
from .report import docs_section_write
from .scratch import ADMIN_DSN, commit_stamp
from .subjects.pgqueue_subject import MODES

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
BEGIN, END = "<!-- scale:begin -->", "<!-- scale:end -->"

PROCESSES = (1, 2, 4, 8, 16)
QUEUE = "default"  # the queue the benchmark subject's workers run
# A doubling of the processes that gains less than this is where the curve has flattened.
FLAT = 0.10
# The claim statement, as pg_stat_statements shows it (normalised): its one distinctive clause.
CLAIM_MARK = "FOR UPDATE OF j SKIP LOCKED"


# -- measuring ---------------------------------------------------------------------------------


def _server_cpu(conn: psycopg.Connection[Any]) -> dict[int, float]:
    """CPU seconds so far of this database's backends (but ``conn``'s own) and of the server's
    background processes (checkpointer, WAL writer...): not other databases' sessions."""
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE (datname = current_database() OR datname IS NULL) "
        "AND pid <> pg_backend_pid()"
    ).fetchall()
    return {pid: _proc_cpu(pid) for (pid,) in rows}


def _transactions(conn: psycopg.Connection[Any]) -> int:
    (n,) = conn.execute(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database "
        "WHERE datname = current_database()"
    ).fetchone()  # type: ignore[misc]
    return int(n)


def statements_available(admin_dsn: str) -> bool:
    """Whether the server loads pg_stat_statements (it must be in shared_preload_libraries)."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        (libs,) = conn.execute("SHOW shared_preload_libraries").fetchone()  # type: ignore[misc]
    return "pg_stat_statements" in libs


def _claim_statements(conn: psycopg.Connection[Any]) -> dict[str, float]:
    """The claim statement's calls, rows and times in this database, from pg_stat_statements."""
    (calls, rows, total_ms) = conn.execute(
        "SELECT coalesce(sum(calls), 0), coalesce(sum(rows), 0), coalesce(sum(total_exec_time), 0) "
        "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database "
        "WHERE datname = current_database()) AND query LIKE %s",
        (f"%{CLAIM_MARK}%",),
    ).fetchone()  # type: ignore[misc]
    calls = int(calls)
    return {
        "claim_calls": float(calls),
        "claim_rows_per_call": float(rows) / calls if calls else 0.0,
        "claim_mean_ms": float(total_ms) / calls if calls else 0.0,
        "claim_total_ms": float(total_ms),
    }


def drain(
    harness: Harness,
    mode: str,
    n: int,
    processes: int,
    concurrency: int,
    statements: bool,
) -> dict[str, Any]:
    """One drain of ``n`` jobs by ``processes`` worker processes (see the module's docstring)."""
    subject = f"pgqueue/{mode}"
    db, dsn = harness.fresh_db()
    try:
        harness.role(subject, "install", dsn)
        harness.role(subject, "enqueue-bulk", dsn, "-n", str(n))
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
            conn.execute("CHECKPOINT")
            if statements:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        with pgqueue.Client.connect(dsn, driver="psycopg") as client:
            client.pause_queue(QUEUE)
        workers = harness.start_workers(subject, dsn, processes, concurrency)
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                deadline = time.monotonic() + 120
                while conn.execute("SELECT count(*) FROM pgqueue_instances").fetchone() != (
                    processes,
                ):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{processes} workers not registered within 120 s")
                    time.sleep(0.05)
                if statements:
                    conn.execute(
                        "SELECT pg_stat_statements_reset(0, "
                        "(SELECT oid FROM pg_database WHERE datname = current_database()), 0)"
                    )
                xacts_before = _transactions(conn)
                cpu_before = sum(_proc_cpu(p.pid) for p, _ in workers), _server_cpu(conn)
                with pgqueue.Client.connect(dsn, driver="psycopg") as client:
                    client.resume_queue(QUEUE)
                end = harness.wait_drained(subject, dsn, drain_timeout(n))
                cpu_after = sum(_proc_cpu(p.pid) for p, _ in workers), _server_cpu(conn)
        finally:
            results = harness.stop_workers(workers)
        records = harness.check_once(results, range(n))
        start = min(t for _, t in records)
        shares = sorted(len(r["records"]) / n * processes for r in results)
        with psycopg.connect(dsn, autocommit=True) as conn:
            (claims,) = conn.execute(
                "SELECT count(*) FROM (SELECT DISTINCT instance_id, locked_at FROM pgqueue_jobs) c"
            ).fetchone()  # type: ignore[misc]
            (attempts,) = conn.execute(
                "SELECT count(*) FROM pgqueue_jobs WHERE status <> 'completed' OR attempts <> 1"
            ).fetchone()  # type: ignore[misc]
            if attempts:
                raise RuntimeError(f"{attempts} jobs not completed at their first attempt")
            xacts = _transactions(conn) - xacts_before
            pgss = _claim_statements(conn) if statements else {}
        server = _cpu_since(cpu_before[1], cpu_after[1])
        return {
            "jobs_per_s": n / (end - start),
            "seconds": end - start,
            "worker_cpu_us_per_job": (cpu_after[0] - cpu_before[0]) / n * 1e6,
            "postgres_cpu_us_per_job": server / n * 1e6,
            "claims": float(claims),
            "jobs_per_claim": n / claims,
            "postgres_cpu_us_per_claim": server / claims * 1e6,
            "transactions_per_job": xacts / n,
            # each process's runs over an even split (1.0): the least and the most
            "share_min": shares[0],
            "share_max": shares[-1],
            **pgss,
        }
    finally:
        harness.drop_db(db)


# -- the report --------------------------------------------------------------------------------


def summarize(runs: list[dict[str, Any]], processes: list[int]) -> dict[str, Any]:
    """processes -> key -> {median, min, max}, with the speedup over 1 process's median."""
    out: dict[str, Any] = {}
    for p in processes:
        mine = [r for r in runs if r["processes"] == p]
        keys = [k for k, v in mine[0].items() if isinstance(v, float) and k != "seconds"]
        out[str(p)] = {k: _summary([r[k] for r in mine]) for k in keys}
    base = out.get("1", {}).get("jobs_per_s", {}).get("median")
    for p in processes:
        rates = [r["jobs_per_s"] for r in runs if r["processes"] == p]
        if base:
            out[str(p)]["speedup"] = _summary([rate / base for rate in rates])
    return out


def flattens(summary: dict[str, Any], processes: list[int]) -> int | None:
    """The first process count whose doubling (the next count) gains less than ``FLAT``."""
    for p, q in itertools.pairwise(processes):
        a, b = summary[str(p)]["jobs_per_s"]["median"], summary[str(q)]["jobs_per_s"]["median"]
        if b < a * (1 + FLAT):
            return p
    return None


def _cell(s: dict[str, float], fmt: str) -> str:
    return f"{format(s['median'], fmt)} ({format(s['min'], fmt)} – {format(s['max'], fmt)})"


def section(doc: dict[str, Any], source: str) -> str:
    """The docs/benchmarks.md section for one results file."""
    meta, s = doc["meta"], doc["summary"]
    m, pg = meta["machine"], meta["machine"]["postgresql"]
    load = meta["load_average"]
    processes = meta["processes"]
    lines = [
        f"Run of {meta['date']} on {m['cpus']} CPUs ({m['cpu']}), {m['memory_gb']} GB, "
        f"PostgreSQL {pg['server_version'].split()[0]}, Python {m['python']}, pgqueue "
        f"{meta['versions'].get('pgqueue', '?')}, commit `{meta['commit']}`: drains of "
        f"{meta['jobs']:,} jobs, `pgqueue/{meta['mode']}` at concurrency {meta['concurrency']} "
        f"per process, {meta['repeat']} interleaved repetition(s) (median, with min–max); whole "
        f"run {meta['wall_seconds']:.0f} s; load average {load['before']:.1f} before, "
        f"{load['after']:.1f} after; source: `{source}`.",
        "",
        "| processes | jobs/s | speedup vs 1 | worker CPU, µs/job | PostgreSQL CPU, µs/job | "
        "jobs per claim | PostgreSQL CPU per claim, µs | transactions per job | "
        "runs per process, least / most of an even share |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in processes:
        c = s[str(p)]
        speedup = (
            f"{c['speedup']['median']:.2f}× ({c['speedup']['min']:.2f} – {c['speedup']['max']:.2f})"
            if "speedup" in c
            else "–"
        )
        lines.append(
            f"| {p} | {_cell(c['jobs_per_s'], ',.0f')} | {speedup} | "
            f"{_cell(c['worker_cpu_us_per_job'], ',.0f')} | "
            f"{_cell(c['postgres_cpu_us_per_job'], ',.0f')} | "
            f"{_cell(c['jobs_per_claim'], ',.1f')} | "
            f"{_cell(c['postgres_cpu_us_per_claim'], ',.0f')} | "
            f"{_cell(c['transactions_per_job'], '.2f')} | "
            f"{c['share_min']['min']:.2f} / {c['share_max']['max']:.2f} |"
        )
    flat = doc.get("flattens_at")
    top, first = str(processes[-1]), str(processes[0])
    if flat is not None:
        after = processes[processes.index(flat) + 1]
        lines += [
            "",
            f"Throughput stops growing from {flat} process(es): {after} drained less than "
            f"{FLAT:.0%} more (medians).",
        ]
    else:
        lines += ["", f"Each doubling up to {top} processes gained at least {FLAT:.0%}."]
    c, one = s[top], s[first]
    lines.append(
        f"At {top} processes a claim took {c['jobs_per_claim']['median']:.1f} jobs and cost "
        f"{c['postgres_cpu_us_per_claim']['median']:,.0f} µs of PostgreSQL CPU "
        f"({c['postgres_cpu_us_per_job']['median']:,.0f} µs a job), against "
        f"{one['jobs_per_claim']['median']:.1f} jobs and "
        f"{one['postgres_cpu_us_per_claim']['median']:,.0f} µs "
        f"({one['postgres_cpu_us_per_job']['median']:,.0f} µs a job) at {first}."
    )
    if meta["pg_stat_statements"]:
        lines.append(
            f"The claim statement at {top} processes (`pg_stat_statements`): "
            f"{_cell(c['claim_mean_ms'], '.3f')} ms per call, "
            f"{_cell(c['claim_rows_per_call'], '.1f')} jobs per call, "
            f"{_cell(c['claim_calls'], ',.0f')} calls."
        )
    else:
        lines.append(
            "The claim statement's own time was not measured: the server does not load "
            "`pg_stat_statements` (`shared_preload_libraries`)."
        )
    return "\n".join(lines)


def write_report(doc: dict[str, Any], path: Path) -> None:
    """Rewrite the scale section of docs/benchmarks.md from ``doc`` (read from ``path``)."""
    source = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
    docs_section_write(BEGIN, END, section(doc, source), path)


def _versions() -> dict[str, str]:
    out = {}
    for dist in ("pgqueue", "psycopg", "asyncpg", "sqlalchemy", "uvloop"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--dsn", default=ADMIN_DSN, help="an admin connection (any database)")
    parser.add_argument("--jobs", type=int, default=200_000, help="jobs per drain")
    parser.add_argument(
        "--processes", default=",".join(map(str, PROCESSES)), help="worker process counts"
    )
    parser.add_argument("--concurrency", type=int, default=10, help="per worker process")
    parser.add_argument("--mode", default="psycopg-sync", choices=sorted(MODES))
    parser.add_argument("--repeat", type=int, default=2, help="drains per process count")
    parser.add_argument(
        "--quick", action="store_true", help="20,000 jobs, 1 repetition: a smoke test (no docs)"
    )
    parser.add_argument("--no-report", action="store_true", help="leave docs/benchmarks.md")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--report", type=Path, help="only rewrite the docs from this results file")
    args = parser.parse_args()
    if args.report:
        write_report(json.loads(args.report.read_text()), args.report.resolve())
        return
    if args.quick:
        args.jobs, args.repeat = 20_000, 1
    processes = [int(p) for p in args.processes.split(",") if p]
    statements = statements_available(args.dsn)
    if not statements:
        print("pg_stat_statements is not loaded (shared_preload_libraries): no claim timings")

    harness = Harness(args.dsn, verbose=False, until_empty=False)
    started, load_before = time.monotonic(), os.getloadavg()
    runs: list[dict[str, Any]] = []
    try:
        for rep in range(args.repeat):
            for p in processes if rep % 2 == 0 else processes[::-1]:
                t = time.monotonic()
                result = drain(harness, args.mode, args.jobs, p, args.concurrency, statements)
                runs.append({"processes": p, "rep": rep, **result})
                print(
                    f"[{time.monotonic() - started:6.1f}s] rep {rep} {p:3} processes: "
                    f"{result['jobs_per_s']:8,.0f} jobs/s, worker "
                    f"{result['worker_cpu_us_per_job']:5.0f} µs/job, PostgreSQL "
                    f"{result['postgres_cpu_us_per_job']:5.0f} µs/job, "
                    f"{result['jobs_per_claim']:5.1f} jobs/claim, PostgreSQL "
                    f"{result['postgres_cpu_us_per_claim']:6.0f} µs/claim, shares "
                    f"{result['share_min']:.2f}-{result['share_max']:.2f}"
                    + (
                        f", claim {result['claim_mean_ms']:.3f} ms"
                        if "claim_mean_ms" in result
                        else ""
                    )
                    + f"  ({time.monotonic() - t:.0f}s)",
                    flush=True,
                )
    finally:
        shutil.rmtree(harness.tmp, ignore_errors=True)

    summary = summarize(runs, processes)
    doc: dict[str, Any] = {
        "meta": {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": machine(args.dsn),
            "load_average": {"before": load_before[0], "after": os.getloadavg()[0]},
            "versions": _versions(),
            "commit": commit_stamp(),
            "jobs": args.jobs,
            "processes": processes,
            "concurrency": args.concurrency,
            "mode": args.mode,
            "repeat": args.repeat,
            "pg_stat_statements": statements,
            "wall_seconds": round(time.monotonic() - started, 1),
        },
        "summary": summary,
        "flattens_at": flattens(summary, processes),
        "runs": runs,
    }
    for p in processes:
        c = summary[str(p)]
        print(
            f"{p:3} processes: {c['jobs_per_s']['median']:8,.0f} jobs/s"
            + (f", {c['speedup']['median']:.2f}× 1 process" if "speedup" in c else "")
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or RESULTS / f"{stamp}-scale{'-quick' if args.quick else ''}.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"results: {out.relative_to(ROOT) if out.resolve().is_relative_to(ROOT) else out}")
    if not (args.quick or args.no_report):
        write_report(doc, out.resolve())


if __name__ == "__main__":
    main()
