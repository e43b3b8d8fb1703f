"""SPEC §10's bars, checked against one results file of ``benchmarks/run.py``.

Each bar is a ratio to a reference measured in the same run: PGQueuer at its best (the better of
``pgqueuer``, one direct connection, and ``pgqueuer-pool``, an asyncpg pool, in that very
measurement, named in the row), or pgbench running pgqueue's own INSERT on pgqueue's own table
(``benchmarks/pgbench.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MODES = ("asyncpg", "psycopg-async", "psycopg-sync", "sqlalchemy-async", "sqlalchemy-sync")
PGQUEUERS = ("pgqueuer", "pgqueuer-pool")


@dataclass(frozen=True)
class Bar:
    """One row of the bars table; ``met`` is None when the run lacks a figure (or the row is
    informative)."""

    bar: str
    measured: str
    reference: str
    ratio: str
    met: bool | None


def median(summary: dict[str, Any], measurement: str, subject: str, key: str) -> float | None:
    try:
        return float(summary[measurement][subject][key]["median"])
    except KeyError:
        return None


def pgqueuer_best(
    summary: dict[str, Any], measurement: str, key: str = "jobs_per_s", lower: bool = False
) -> tuple[float, str] | None:
    """PGQueuer's best figure in ``measurement`` over its two setups, and which setup it was
    (``lower``: the smaller figure is the better, as for latencies)."""
    found = [(v, s) for s in PGQUEUERS if (v := median(summary, measurement, s, key)) is not None]
    if not found:
        return None
    return min(found) if lower else max(found)


def _rate(v: float) -> str:
    return f"{v:,.0f}/s"


def bars(doc: dict[str, Any]) -> list[Bar]:
    """Every bar of SPEC §10 that ``benchmarks/run.py`` measures, against ``doc``'s figures."""
    s = doc["summary"]
    sizes = doc["meta"].get("sizes", {})
    modes = [m for m in MODES if any(f"pgqueue/{m}" in by for by in s.values())]
    out: list[Bar] = []

    def versus(
        label: str,
        measurement: str,
        mode: str,
        reference: tuple[float, str] | None,
        need: float,
        ref_measurement: str | None = None,
    ) -> None:
        ours = median(s, measurement, f"pgqueue/{mode}", "jobs_per_s")
        if ours is None:
            return
        if reference is None:
            out.append(Bar(label, _rate(ours), "–", "–", None))
            return
        theirs, name = reference
        r = ours / theirs
        out.append(Bar(label, _rate(ours), f"{name} {_rate(theirs)}", f"{r:.2f}×", r >= need))

    def pgbench(measurement: str, variant: str = "pgbench") -> tuple[float, str] | None:
        v = median(s, measurement, variant, "jobs_per_s")
        return None if v is None else (v, variant)

    def best(measurement: str) -> tuple[float, str] | None:
        return pgqueuer_best(s, measurement)

    producers = sizes.get("producers", 10)
    batch = sizes.get("batch", 1000)
    bulk = sizes.get("bulk", 100_000)
    for mode in modes:
        versus(
            f"single add_job, {mode} ≥ 0.8× pgbench (1 client)",
            "enqueue_single",
            mode,
            pgbench("enqueue_single"),
            0.8,
        )
    for mode in modes:
        versus(
            f"single add_job, {mode} ≥ 1.5× PGQueuer",
            "enqueue_single",
            mode,
            best("enqueue_single"),
            1.5,
        )
    for mode in modes:
        versus(
            f"{producers} producers, {mode} ≥ 0.7× pgbench ({producers} clients)",
            "enqueue_concurrent",
            mode,
            pgbench("enqueue_concurrent"),
            0.7,
        )
    for mode in modes:
        versus(
            f"calls of {batch:,}, {mode} ≥ 2× PGQueuer",
            "enqueue_bulk_1000",
            mode,
            best("enqueue_bulk_1000"),
            2.0,
        )
    for mode in modes:
        versus(
            f"one call of {bulk:,}, {mode} ≥ 3× PGQueuer",
            "enqueue_bulk",
            mode,
            best("enqueue_bulk"),
            3.0,
        )
    rows_ref = pgbench("enqueue_bulk_1000")
    for mode in modes:
        ref = None if rows_ref is None else (rows_ref[0], "pgbench 1,000-row INSERT")
        versus(
            f"one call of {bulk:,}, {mode} ≥ 0.5× pgbench 1,000-row INSERT",
            "enqueue_bulk",
            mode,
            ref,
            0.5,
        )
    for mode, need in (("asyncpg", 2.0), ("psycopg-async", 1.5), ("psycopg-sync", 1.0)):
        if mode in modes:
            versus(
                f"drain at best concurrency, {mode} ≥ {need:g}× PGQueuer",
                "drain_best",
                mode,
                best("drain_best"),
                need,
            )
    for mode in modes:
        c1 = median(s, "drain_c1", f"pgqueue/{mode}", "jobs_per_s")
        if c1 is not None:
            out.append(
                Bar(
                    f"drain, concurrency 1, {mode} ≥ 1,000/s",
                    _rate(c1),
                    "1,000/s",
                    f"{c1 / 1000:.2f}×",
                    c1 >= 1000,
                )
            )
    for sa, under in (("sqlalchemy-async", "asyncpg"), ("sqlalchemy-sync", "psycopg-sync")):
        ours = median(s, "drain_best", f"pgqueue/{sa}", "jobs_per_s")
        driver = median(s, "drain_best", f"pgqueue/{under}", "jobs_per_s")
        if ours is not None and driver is not None:
            r = driver / ours
            out.append(
                Bar(
                    f"drain at best concurrency, {sa} within 1.5× of {under}",
                    _rate(ours),
                    f"{under} {_rate(driver)}",
                    f"{r:.2f}× slower",
                    r <= 1.5,
                )
            )
    for mode in modes:
        one = median(s, "drain_best", f"pgqueue/{mode}", "jobs_per_s")
        two = median(s, "drain_2proc", f"pgqueue/{mode}", "jobs_per_s")
        if one is not None and two is not None:
            out.append(
                Bar(
                    f"drain, {mode}: 2 processes > 1",
                    _rate(two),
                    f"1 process {_rate(one)}",
                    f"{two / one:.2f}×",
                    two > one,
                )
            )
    long_ref = best("drain_long")
    for mode in modes:
        ours = median(s, "drain_long", f"pgqueue/{mode}", "jobs_per_s")
        if ours is None:
            continue
        short = median(s, "drain_best", f"pgqueue/{mode}", "jobs_per_s")
        vs = f"{ours / long_ref[0]:.2f}× {long_ref[1]}" if long_ref else "–"
        kept = f", {ours / short:.0%} of its short drain" if short else ""
        out.append(
            Bar(
                f"long drain ({sizes.get('long', 0):,} jobs), {mode} (informative)",
                _rate(ours),
                f"{long_ref[1]} {_rate(long_ref[0])}" if long_ref else "–",
                vs + kept,
                None,
            )
        )
    for mode in modes:
        empty = median(s, "claim_empty", f"pgqueue/{mode}", "jobs_per_s")
        full = median(s, "claim_1m_finished", f"pgqueue/{mode}", "jobs_per_s")
        if empty is not None and full is not None:
            r = empty / full
            out.append(
                Bar(
                    f"claim cost, {sizes.get('finished', 0):,} finished rows, {mode} within 1.2×",
                    _rate(full),
                    f"empty history {_rate(empty)}",
                    f"{r:.2f}× slower",
                    r <= 1.2,
                )
            )
    for run in doc["runs"]:
        if run["measurement"] == "memory" and run["subject"].startswith("pgqueue/"):
            out.append(
                Bar(
                    f"worker memory flat (±10 %), {run['subject'][8:]}",
                    f"{run['rss_start_mb']:.0f} → {run['rss_max_mb']:.0f} MB",
                    f"over {sizes.get('memory', 0):,} jobs",
                    f"{run['rss_growth_pct']:+.1f} %",
                    abs(run["rss_growth_pct"]) <= 10,
                )
            )
    for q in ("p50", "p99"):
        theirs = pgqueuer_best(s, "latency", f"{q}_ms", lower=True)
        for mode in modes:
            ours = median(s, "latency", f"pgqueue/{mode}", f"{q}_ms")
            if ours is None:
                continue
            if theirs is None:
                out.append(
                    Bar(
                        f"pickup latency {q}, {mode} ≤ 0.6× PGQueuer",
                        f"{ours:.1f} ms",
                        "–",
                        "–",
                        None,
                    )
                )
                continue
            r = ours / theirs[0]
            out.append(
                Bar(
                    f"pickup latency {q}, {mode} ≤ 0.6× PGQueuer",
                    f"{ours:.1f} ms",
                    f"{theirs[1]} {theirs[0]:.1f} ms",
                    f"{r:.2f}×",
                    r <= 0.6,
                )
            )
    return out


def index_costs(summary: dict[str, Any]) -> list[tuple[str, float, float | None]]:
    """pgbench's single INSERT at 1 client on pgqueue's table as migrated and in each variant:
    (variant, jobs/s, change against the table as migrated)."""
    base = median(summary, "enqueue_single", "pgbench", "jobs_per_s")
    rows: list[tuple[str, float, float | None]] = []
    first = {"pgbench": 0, "pgbench/no-notify": 1, "pgbench/pkey-only": 2}
    for subject in sorted(summary.get("enqueue_single", {}), key=lambda x: (first.get(x, 3), x)):
        if not subject.startswith("pgbench"):
            continue
        v = median(summary, "enqueue_single", subject, "jobs_per_s")
        assert v is not None
        rows.append((subject, v, None if base is None else v / base - 1))
    return rows
