"""Where COPY starts to beat one INSERT of arrays: ``make bench-copy-threshold``.

``add_jobs`` sends a batch of plain jobs either as one ``job_insert_many`` statement (the
columns as array parameters: one round trip) or, from ``pgqueue._async.client.COPY_MIN`` jobs
on, by ``COPY`` (ids reserved first, the rows streamed, then the wake-up: more round trips, but
less work per row). This times both paths through the store, for each driver mode and batch
size, interleaved (sizes and paths alternate, ``--reps`` times, medians), on a fresh database,
and reports the smallest size from which COPY is faster in every mode: the value COPY_MIN should
have. Preparing the jobs (validation, JSON) is the same on both paths and is not timed.

Results: ``benchmarks/results/<time>-copy-threshold.json`` and the "COPY threshold" section of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from datetime import UTC, datetime
from typing import Any

import psycopg

import pgqueue
from pgqueue._async.client import COPY_MIN

from .report import ROOT, docs_section_write
from .scratch import ADMIN_DSN, MODES, Noop, commit_stamp, mode_url, scratch_database

RESULTS = ROOT / "benchmarks" / "results"
BEGIN, END = "<!-- copy-threshold:begin -->", "<!-- copy-threshold:end -->"

PATHS = ("insert", "copy")


def _time_async(url: str, driver: str, size: int, jobs: int, path: str) -> float:
    async def run() -> float:
        async with await pgqueue.AsyncClient.connect(url, driver=driver) as client:
            store = client._store
            batches = [
                client._prepare_many([Noop(i=i) for i in range(size)], None)
                for _ in range(max(1, jobs // size))
            ]
            await store.job_insert_many(batches[0][:10])  # warm: connection, prepared statement
            t0 = time.perf_counter()
            for batch in batches:
                await (store.job_insert_many(batch) if path == "insert" else store.job_copy(batch))
            return len(batches) * size / (time.perf_counter() - t0)

    return asyncio.run(run())


def _time_sync(url: str, driver: str, size: int, jobs: int, path: str) -> float:
    with pgqueue.Client.connect(url, driver=driver) as client:
        store = client._store
        batches = [
            client._prepare_many([Noop(i=i) for i in range(size)], None)
            for _ in range(max(1, jobs // size))
        ]
        store.job_insert_many(batches[0][:10])
        t0 = time.perf_counter()
        for batch in batches:
            store.job_insert_many(batch) if path == "insert" else store.job_copy(batch)
        return len(batches) * size / (time.perf_counter() - t0)


def measure(admin_dsn: str, modes: list[str], sizes: list[int], jobs: int, reps: int) -> Any:
    """Return {mode: {size: {path: [jobs/s per rep]}}}, on one fresh database."""
    out: dict[str, dict[int, dict[str, list[float]]]] = {}
    with scratch_database(admin_dsn) as dsn:
        with pgqueue.Client.connect(dsn, driver="psycopg") as client:
            client.migrate()
        for rep in range(reps):
            for mode in modes:
                driver, _scheme, is_async = MODES[mode]
                for size in sizes:
                    for path in PATHS if rep % 2 == 0 else PATHS[::-1]:
                        timer = _time_async if is_async else _time_sync
                        rate = timer(mode_url(dsn, mode), driver, size, jobs, path)
                        out.setdefault(mode, {}).setdefault(size, {}).setdefault(path, [])
                        out[mode][size][path].append(rate)
                        print(f"rep {rep} {mode:17} {size:6,} {path:6} {rate:10,.0f} jobs/s")
                # keep the table the same size for every rep
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("TRUNCATE pgqueue_jobs CASCADE")
                    conn.execute("VACUUM ANALYZE pgqueue_jobs")
    return out


def crossover(by_size: dict[int, dict[str, list[float]]]) -> int | None:
    """The smallest size from which COPY's median is faster at that size and every larger one."""
    best = None
    for size in sorted(by_size, reverse=True):
        paths = by_size[size]
        if statistics.median(paths["copy"]) > statistics.median(paths["insert"]):
            best = size
        else:
            break
    return best


def section(doc: dict[str, Any]) -> str:
    """The markdown of the page's section."""
    meta, data = doc["meta"], doc["results"]
    sizes = meta["sizes"]
    lines = [
        f"Run of {meta['date']} on {meta['cpus']} CPUs, commit `{meta['commit']}`, "
        f"{meta['reps']} interleaved repetitions (medians), {meta['jobs']:,} jobs per "
        f"measurement; `COPY_MIN` was {meta['copy_min']:,}. Jobs/s through the store, "
        "one `INSERT` of arrays vs `COPY`:",
        "",
        "| mode | " + " | ".join(f"{s:,}" for s in sizes) + " | COPY faster from |",
        "|---|" + "---|" * (len(sizes) + 1),
    ]
    for mode, by_size in data.items():
        cells = []
        for size in sizes:
            ins = statistics.median(by_size[str(size)]["insert"])
            cop = statistics.median(by_size[str(size)]["copy"])
            cells.append(
                f"{ins:,.0f} / **{cop:,.0f}**" if cop > ins else f"**{ins:,.0f}** / {cop:,.0f}"
            )
        cross = crossover({int(k): v for k, v in by_size.items()})
        lines.append(f"| {mode} | " + " | ".join(cells) + f" | {cross or '–'} |")
    lines += ["", f"Each cell: INSERT / COPY, the faster in bold. {doc['verdict']}"]
    return "\n".join(lines)


def main() -> None:
    """Measure, write the results file and the page's section."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", default=ADMIN_DSN)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--sizes", default="100,250,500,1000,2000,5000")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per measurement")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-docs", action="store_true", help="do not rewrite the page")
    args = parser.parse_args()
    modes = args.modes.split(",")
    sizes = [int(s) for s in args.sizes.split(",")]
    data = measure(args.dsn, modes, sizes, args.jobs, args.reps)
    crossings = {m: crossover(by) for m, by in data.items()}
    known = [c for c in crossings.values() if c is not None]
    verdict = (
        f"COPY is faster in every mode from {max(known):,} jobs."
        if len(known) == len(crossings)
        else "COPY is not faster in every mode at these sizes."
    )
    doc = {
        "meta": {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "cpus": os.cpu_count(),
            "commit": commit_stamp(),
            "reps": args.reps,
            "jobs": args.jobs,
            "sizes": sizes,
            "copy_min": COPY_MIN,
        },
        "results": {m: {str(s): v for s, v in by.items()} for m, by in data.items()},
        "crossover": crossings,
        "verdict": verdict,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}-copy-threshold.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(verdict)
    print(f"results: {path.relative_to(ROOT)}")
    if not args.no_docs:
        docs_section_write(BEGIN, END, section(doc), path)


if __name__ == "__main__":
    main()
