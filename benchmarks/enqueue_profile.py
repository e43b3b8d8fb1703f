"""Where an enqueue's time goes: ``make bench-enqueue-profile``.

The enqueue bars of SPEC §10 compare pgqueue with pgbench running pgqueue's own INSERT. When one
is missed, this says why: for each driver mode and each shape of enqueue (one ``add_job`` per
call; ``add_jobs`` in calls of 1,000; one ``add_jobs`` of 100,000) it measures, per job, the
wall time, the CPU the calling process used (pgqueue, the driver, the event loop), and the CPU
PostgreSQL used (every server process, as ``benchmarks/harness.py`` reads it). On a 2-core
machine where the client and the server share the CPUs, the client's CPU share is what pgqueue
can still win; the server's share and the commit's wait for the disk are the floor. A second
pass runs the same calls under ``cProfile`` and keeps the functions that take the most of the
client's own time.

Each mode runs in this process, one after the other, on one fresh database (truncated between
measurements), ``--reps`` times, interleaved; medians. Results:
``benchmarks/results/<time>-enqueue-profile.json`` and the "Where an enqueue's time goes"
section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import statistics
import sysconfig
import time
from datetime import UTC, datetime
from typing import Any

import psycopg

import pgqueue

from .harness import _cpu_since, _postgres_cpu
from .report import ROOT, docs_section_write
from .scratch import ADMIN_DSN, MODES, Noop, commit_stamp, mode_url, scratch_database

RESULTS = ROOT / "benchmarks" / "results"
BEGIN, END = "<!-- enqueue-profile:begin -->", "<!-- enqueue-profile:end -->"

SHAPES = ("single", "batch_1000", "bulk")
# where a profiled function's file lies, shortened in the report to what follows it
_PREFIXES = (f"{ROOT}/", f"{sysconfig.get_paths()['stdlib']}/", "site-packages/")


def _label(shape: str, sizes: dict[str, int]) -> str:
    if shape == "single":
        return "one `add_job` per call"
    if shape == "batch_1000":
        return "`add_jobs`, calls of 1,000"
    return f"one `add_jobs` of {sizes['bulk']:,}"


def _short(function: str) -> str:
    """A profiled function's ``path:line(name)``, its path relative to the tree, the standard
    library or site-packages."""
    for prefix in _PREFIXES:
        function = function.split(prefix)[-1]
    return function


def _plan(shape: str, sizes: dict[str, int]) -> list[int]:
    """The calls of one measurement: how many jobs each call adds (0: one ``add_job``)."""
    if shape == "single":
        return [0] * sizes["single"]
    if shape == "batch_1000":
        return [1000] * (sizes["batch_jobs"] // 1000)
    return [sizes["bulk"]]


class _Timer:
    """Per-job wall time, client CPU and server CPU between ``start()`` and ``stop()``."""

    def __init__(self, jobs: int, profile: bool) -> None:
        self.jobs = jobs
        self.prof = cProfile.Profile() if profile else None

    def start(self) -> None:
        self.server0, self.cpu0 = _postgres_cpu(), time.process_time()
        self.t0 = time.perf_counter()
        if self.prof is not None:
            self.prof.enable()

    def stop(self) -> dict[str, Any]:
        if self.prof is not None:
            self.prof.disable()
        wall, cpu = time.perf_counter() - self.t0, time.process_time() - self.cpu0
        server = _cpu_since(self.server0, _postgres_cpu())
        out: dict[str, Any] = {
            "wall_us": wall / self.jobs * 1e6,
            "client_cpu_us": cpu / self.jobs * 1e6,
            "server_cpu_us": server / self.jobs * 1e6,
            "jobs_per_s": self.jobs / wall,
        }
        if self.prof is not None:
            out["top"] = _top(self.prof)
        return out


def _top(prof: cProfile.Profile, n: int = 12) -> list[dict[str, Any]]:
    """The ``n`` functions with the most time of their own, as shares of the profiled total."""
    stats = pstats.Stats(prof)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for (_cc, _nc, tt, _ct, _callers) in raw.values()) or 1.0
    rows = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)[:n]
    out = []
    for (path, line, name), (_cc, calls, tt, ct, _callers) in rows:
        out.append(
            {
                "function": _short(f"{path}:{line}({name})"),
                "calls": calls,
                "own_share": tt / total,
                "with_callees_share": ct / total,
            }
        )
    return out


def _run_async(url: str, driver: str, plan: list[int], profile: bool) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        async with await pgqueue.AsyncClient.connect(url, driver=driver) as client:
            await client.add_job(Noop(i=-1))  # warm: connections, prepared statements
            await client.add_jobs([Noop(i=-2), Noop(i=-3)])
            batches = [[Noop(i=i) for i in range(n)] for n in plan if n]
            timer = _Timer(sum(n or 1 for n in plan), profile)
            timer.start()
            if batches:
                for batch in batches:
                    await client.add_jobs(batch)
            else:
                for i in range(len(plan)):
                    await client.add_job(Noop(i=i))
            return timer.stop()

    return asyncio.run(run())


def _run_sync(url: str, driver: str, plan: list[int], profile: bool) -> dict[str, Any]:
    with pgqueue.Client.connect(url, driver=driver) as client:
        client.add_job(Noop(i=-1))
        client.add_jobs([Noop(i=-2), Noop(i=-3)])
        batches = [[Noop(i=i) for i in range(n)] for n in plan if n]
        timer = _Timer(sum(n or 1 for n in plan), profile)
        timer.start()
        if batches:
            for batch in batches:
                client.add_jobs(batch)
        else:
            for i in range(len(plan)):
                client.add_job(Noop(i=i))
        return timer.stop()


def measure(
    admin_dsn: str, modes: list[str], sizes: dict[str, int], reps: int, profile: bool
) -> dict[str, Any]:
    """{mode: {shape: {"runs": [...], "profile": {...}}}} on one fresh database."""
    out: dict[str, Any] = {}
    with scratch_database(admin_dsn) as dsn:
        with pgqueue.Client.connect(dsn, driver="psycopg") as client:
            client.migrate()

        def one(mode: str, shape: str, with_profile: bool) -> dict[str, Any]:
            driver, _scheme, is_async = MODES[mode]
            runner = _run_async if is_async else _run_sync
            result = runner(mode_url(dsn, mode), driver, _plan(shape, sizes), with_profile)
            # the same table for every measurement: emptied, its dead rows and statistics
            # cleared, the setup's writes flushed before the next one starts
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("TRUNCATE pgqueue_jobs CASCADE")
                conn.execute("VACUUM ANALYZE pgqueue_jobs")
                conn.execute("CHECKPOINT")
            return result

        for rep in range(reps):
            for shape in SHAPES:
                for mode in modes if rep % 2 == 0 else modes[::-1]:
                    r = one(mode, shape, False)
                    out.setdefault(mode, {}).setdefault(shape, {"runs": []})["runs"].append(r)
                    print(
                        f"rep {rep} {mode:17} {shape:10} {r['jobs_per_s']:10,.0f} jobs/s  "
                        f"wall {r['wall_us']:7.1f} µs  client {r['client_cpu_us']:6.1f} µs  "
                        f"server {r['server_cpu_us']:6.1f} µs per job"
                    )
        if profile:
            for shape in SHAPES:
                for mode in modes:
                    out[mode][shape]["profile"] = one(mode, shape, True)
    return out


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def section(doc: dict[str, Any]) -> str:
    """The markdown of the page's section."""
    meta, data = doc["meta"], doc["results"]
    sizes = meta["sizes"]
    lines = [
        f"Run of {meta['date']} on {meta['cpus']} CPUs, commit `{meta['commit']}`, "
        f"{meta['reps']} interleaved repetitions (medians); source: `{meta['source']}`. "
        "Per job, in µs: the wall time of the calls, the CPU the calling process used, the CPU "
        "PostgreSQL used (all of its processes):",
        "",
        "| mode | enqueue | jobs/s | wall | client CPU | PostgreSQL CPU |",
        "|---|---|---|---|---|---|",
    ]
    for mode, shapes in data.items():
        for shape in SHAPES:
            if shape not in shapes:
                continue
            runs = shapes[shape]["runs"]
            lines.append(
                f"| {mode} | {_label(shape, sizes)} | {_median(runs, 'jobs_per_s'):,.0f} | "
                f"{_median(runs, 'wall_us'):,.1f} | {_median(runs, 'client_cpu_us'):,.1f} | "
                f"{_median(runs, 'server_cpu_us'):,.1f} |"
            )
    profiled = [
        (mode, shape, shapes[shape]["profile"]["top"])
        for mode, shapes in data.items()
        for shape in SHAPES
        if "profile" in shapes.get(shape, {})
    ]
    for mode, shape, top in profiled:
        if mode not in ("asyncpg", "psycopg-sync"):
            continue
        lines += [
            "",
            f"`cProfile`, {mode}, {_label(shape, sizes)}: the functions with the most time of "
            "their own (share of the profiled client time; with what they call):",
            "",
            "| function | calls | own | with callees |",
            "|---|---|---|---|",
        ]
        for row in top[:8]:
            lines.append(
                f"| `{_short(row['function'])}` | {row['calls']:,} | {row['own_share']:.0%} | "
                f"{row['with_callees_share']:.0%} |"
            )
    return "\n".join(lines)


def main() -> None:
    """Measure, write the results file and the page's section."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", default=ADMIN_DSN)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--single", type=int, default=2_000, help="add_job calls")
    parser.add_argument("--batch-jobs", type=int, default=20_000, help="jobs in calls of 1,000")
    parser.add_argument("--bulk", type=int, default=100_000, help="jobs in the one bulk call")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-profile", action="store_true", help="skip the cProfile pass")
    parser.add_argument("--no-docs", action="store_true", help="do not rewrite the page")
    args = parser.parse_args()
    modes = args.modes.split(",")
    sizes = {"single": args.single, "batch_jobs": args.batch_jobs, "bulk": args.bulk}
    data = measure(args.dsn, modes, sizes, args.reps, not args.no_profile)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}-enqueue-profile.json"
    doc = {
        "meta": {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "cpus": os.cpu_count(),
            "commit": commit_stamp(),
            "reps": args.reps,
            "sizes": sizes,
            "source": str(path.relative_to(ROOT)),
        },
        "results": data,
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"results: {path.relative_to(ROOT)}")
    if not args.no_docs:
        docs_section_write(BEGIN, END, section(doc), path)


if __name__ == "__main__":
    main()
