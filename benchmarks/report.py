"""Turn a results file into the tables of docs/benchmarks.md and a chart.

``python -m benchmarks.report [results.json]`` (default: the newest file in
benchmarks/results/) rewrites the part of docs/benchmarks.md between the ``results`` markers
and writes docs/benchmarks.png. ``make bench`` runs it after the measurements.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
CHART = ROOT / "docs" / "benchmarks.png"
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


def docs_section_write(begin: str, end: str, body: str, path: Path) -> None:
    """Replace the text between ``begin`` and ``end`` in docs/benchmarks.md with ``body``.

    ``path`` is the results file the section was made from (named in the message). Every
    benchmark that owns a section of the page writes it through here.
    """
    source = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
    text = DOC.read_text()
    if begin not in text or end not in text:
        raise SystemExit(f"{DOC} lacks the {begin} / {end} markers")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    DOC.write_text(f"{head}{begin}\n{body}\n{end}{tail}")
    print(f"updated {DOC.relative_to(ROOT)} from {source}")


THROUGHPUT = [
    ("enqueue_single", "single add_job ({single:,} calls), jobs/s"),
    ("enqueue_bulk", "bulk add of {bulk:,}, jobs/s"),
    ("drain_c1", "drain {drain_c1:,}, concurrency 1, jobs/s"),
    ("drain_c10", "drain {drain:,}, concurrency 10, jobs/s"),
    ("drain_best", "drain {drain:,}, best concurrency, jobs/s"),
    ("drain_2proc", "drain {drain:,}, 2 processes, jobs/s"),
    ("claim_empty", "drain {claim_jobs:,} (c10), empty history, jobs/s"),
    ("claim_1m_finished", "drain {claim_jobs:,} (c10), {finished:,} finished rows, jobs/s"),
]


def _median(summary: dict[str, Any], measurement: str, subject: str, key: str) -> float | None:
    try:
        return float(summary[measurement][subject][key]["median"])
    except KeyError:
        return None


def _cell(summary: dict[str, Any], measurement: str, subject: str, key: str, fmt: str) -> str:
    try:
        s = summary[measurement][subject][key]
    except KeyError:
        return "–"
    if s["min"] == s["max"]:
        return format(s["median"], fmt)
    return f"{format(s['median'], fmt)} ({format(s['min'], fmt)}–{format(s['max'], fmt)})"


def bars(doc: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    """Check SPEC section 10's bars: (bar, what was measured, passed?)."""
    s = doc["summary"]
    out: list[tuple[str, str, bool | None]] = []

    def ratio(measurement: str, subject: str, key: str = "jobs_per_s") -> float | None:
        ours, theirs = (
            _median(s, measurement, subject, key),
            _median(s, measurement, "pgqueuer", key),
        )
        return ours / theirs if ours is not None and theirs else None

    def add_ratio(label: str, measurement: str, subject: str, need: float) -> None:
        r = ratio(measurement, subject)
        out.append((label, "–" if r is None else f"{r:.2f}×", None if r is None else r >= need))

    add_ratio("drain, asyncpg ≥ 2× PGQueuer", "drain_best", "pgqueue/asyncpg", 2.0)
    add_ratio("drain, psycopg async ≥ 1.5× PGQueuer", "drain_best", "pgqueue/psycopg-async", 1.5)
    add_ratio("drain, psycopg sync ≥ 1× PGQueuer", "drain_best", "pgqueue/psycopg-sync", 1.0)
    for mode in ("asyncpg", "psycopg-sync"):
        one = _median(s, "drain_best", f"pgqueue/{mode}", "jobs_per_s")
        two = _median(s, "drain_2proc", f"pgqueue/{mode}", "jobs_per_s")
        out.append(
            (
                f"drain, {mode}: 2 processes > 1",
                "–" if one is None or two is None else f"{two:,.0f} vs {one:,.0f}",
                None if one is None or two is None else two > one,
            )
        )
    for mode in ("asyncpg", "psycopg-sync"):
        c1 = _median(s, "drain_c1", f"pgqueue/{mode}", "jobs_per_s")
        out.append(
            (
                f"drain, {mode}, concurrency 1 ≥ 1,000/s",
                "–" if c1 is None else f"{c1:,.0f}/s",
                None if c1 is None else c1 >= 1000,
            )
        )
    add_ratio("single add_job, asyncpg ≥ 3× PGQueuer", "enqueue_single", "pgqueue/asyncpg", 3.0)
    for mode in ("psycopg-sync", "psycopg-async"):
        add_ratio(f"single add_job, {mode} ≥ 2× PGQueuer", "enqueue_single", f"pgqueue/{mode}", 2.0)
    for mode in ("asyncpg", "psycopg-sync"):
        add_ratio(f"bulk add_jobs, {mode} ≥ 3× PGQueuer", "enqueue_bulk", f"pgqueue/{mode}", 3.0)
    theirs = _median(s, "latency", "pgqueuer", "p50_ms")
    for mode in ("asyncpg", "psycopg-async", "psycopg-sync"):
        p50 = _median(s, "latency", f"pgqueue/{mode}", "p50_ms")
        p99 = _median(s, "latency", f"pgqueue/{mode}", "p99_ms")
        if p50 is None or p99 is None:
            continue
        out.append(
            (
                f"pickup latency, {mode}: p50 ≤ PGQueuer's, p99 ≤ 5 ms",
                f"p50 {p50:.1f} ms (PGQueuer {theirs or 0:.1f}), p99 {p99:.1f} ms",
                (theirs is None or p50 <= theirs) and p99 <= 5.0,
            )
        )
    for mode in ("asyncpg", "psycopg-sync"):
        empty = _median(s, "claim_empty", f"pgqueue/{mode}", "jobs_per_s")
        full = _median(s, "claim_1m_finished", f"pgqueue/{mode}", "jobs_per_s")
        if empty is None or full is None:
            continue
        out.append(
            (
                f"claim cost flat with 1M finished rows, {mode} (within 1.5×)",
                f"{empty / full:.2f}× slower",
                empty / full <= 1.5,
            )
        )
    for run in doc["runs"]:
        if run["measurement"] == "memory" and run["subject"].startswith("pgqueue/"):
            out.append(
                (
                    f"memory flat (±10 %), {run['subject'][8:]}",
                    f"{run['rss_start_mb']:.0f} → {run['rss_max_mb']:.0f} MB "
                    f"({run['rss_growth_pct']:+.1f} %) over "
                    f"{doc['meta']['sizes']['memory']:,} jobs",
                    abs(run["rss_growth_pct"]) <= 10,
                )
            )
    return out


def tables(doc: dict[str, Any], source: str) -> str:
    s = doc["summary"]
    meta = doc["meta"]
    subjects = sorted({sub for by in s.values() for sub in by}, key=_order)
    lines = [
        f"Run of {meta['date']} on {meta['cpus']} CPUs, PostgreSQL {meta['postgresql']}, "
        f"{meta['reps']} interleaved repetitions (median, with min–max); source: "
        f"`{source}`. Versions: "
        + ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
        + ".",
        "",
        "| measurement | " + " | ".join(subjects) + " |",
        "|---|" + "---|" * len(subjects),
    ]
    for key, label in THROUGHPUT:
        if key in s:
            lines.append(
                f"| {label.format(**_sizes(meta))} | "
                + " | ".join(_cell(s, key, sub, "jobs_per_s", ",.0f") for sub in subjects)
                + " |"
            )
    if "latency" in s:
        for q in ("p50", "p95", "p99"):
            lines.append(
                f"| pickup latency {q}, ms | "
                + " | ".join(_cell(s, "latency", sub, f"{q}_ms", ".1f") for sub in subjects)
                + " |"
            )
    mem = {r["subject"]: r for r in doc["runs"] if r["measurement"] == "memory"}
    if mem:
        lines.append(
            f"| worker RSS over {meta['sizes']['memory']:,} jobs, MB | "
            + " | ".join(
                f"{mem[sub]['rss_start_mb']:.0f} → {mem[sub]['rss_max_mb']:.0f}"
                if sub in mem
                else "–"
                for sub in subjects
            )
            + " |"
        )
    if "drain_c10" in s:
        lines += [
            "",
            "CPU per job while draining at concurrency 10 (µs; the worker process, and "
            "PostgreSQL, all of its processes):",
            "",
            "| | " + " | ".join(subjects) + " |",
            "|---|" + "---|" * len(subjects),
        ]
        for key, label in (
            ("worker_cpu_us_per_job", "worker"),
            ("postgres_cpu_us_per_job", "PostgreSQL"),
        ):
            lines.append(
                f"| {label} | "
                + " | ".join(_cell(s, "drain_c10", sub, key, ",.0f") for sub in subjects)
                + " |"
            )
    lines += [
        "",
        "Best concurrency used: "
        + ", ".join(
            f"{k} {v}"
            for k, v in sorted(meta["best_concurrency"].items(), key=lambda kv: _order(kv[0]))
        )
        + ".",
        "",
        "SPEC §10 bars, checked against this run:",
        "",
        "| bar | measured | met |",
        "|---|---|---|",
    ]
    for label, measured, ok in bars(doc):
        lines.append(
            f"| {label} | {measured} | {'–' if ok is None else ('yes' if ok else '**no**')} |"
        )
    return "\n".join(lines)


def _sizes(meta: dict[str, Any]) -> dict[str, Any]:
    # results written before the concurrency-1 drain had a size of its own
    return {"drain_c1": meta["sizes"].get("drain", 0), **meta["sizes"]}


def _order(subject: str) -> tuple[int, str]:
    return (0 if subject == "pgqueuer" else 1 if subject == "procrastinate" else 2, subject)


def chart(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = doc["summary"]
    subjects = sorted({sub for by in s.values() for sub in by}, key=_order)
    panels = [(k, label.format(**_sizes(doc["meta"]))) for k, label in THROUGHPUT if k in s]
    if "latency" in s:
        panels.append(("latency", "pickup latency p50 / p99, ms (lower is better)"))
    cols = 3
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.4 * rows), squeeze=False)
    colors = {sub: plt.cm.tab10(i) for i, sub in enumerate(subjects)}
    for ax, (key, label) in zip(axes.flat, panels, strict=False):
        names = [sub for sub in subjects if sub in s.get(key, {})]
        if key == "latency":
            p50 = [s[key][n]["p50_ms"]["median"] for n in names]
            p99 = [s[key][n]["p99_ms"]["median"] for n in names]
            x = range(len(names))
            ax.bar([i - 0.2 for i in x], p50, 0.4, color=[colors[n] for n in names], label="p50")
            ax.bar(
                [i + 0.2 for i in x],
                p99,
                0.4,
                color=[colors[n] for n in names],
                alpha=0.45,
                label="p99",
            )
            ax.legend(fontsize=7)
        else:
            med = [s[key][n]["jobs_per_s"]["median"] for n in names]
            lo = [m - s[key][n]["jobs_per_s"]["min"] for m, n in zip(med, names, strict=True)]
            hi = [s[key][n]["jobs_per_s"]["max"] - m for m, n in zip(med, names, strict=True)]
            ax.bar(
                range(len(names)), med, color=[colors[n] for n in names], yerr=[lo, hi], capsize=3
            )
        ax.set_title(label, fontsize=9)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(
            [n.replace("pgqueue/", "pgq/") for n in names], rotation=35, ha="right", fontsize=7
        )
        ax.tick_params(axis="y", labelsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle(
        f"pgqueue vs PGQueuer and procrastinate — {doc['meta']['date'][:10]}, "
        f"{doc['meta']['cpus']} CPUs, PostgreSQL {doc['meta']['postgresql']}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    if len(sys.argv) > 1:
        path = Path(sys.argv[1])
    else:
        files = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
        # the admin queries' and the observability runs' results (admin_queries.py,
        # observability.py) have sections of their own
        files = [f for f in files if "-admin" not in f.name and "-observability" not in f.name]
        files = [f for f in files if "quick" not in f.name] or files
        # a before/after comparison (pgqueue-base/ subjects, docs/benchmarks.md's "Before and
        # after a change") measures one change, not pgqueue against its peers
        files = [f for f in files if "pgqueue-base/" not in f.read_text()]
        if not files:
            raise SystemExit("no results in benchmarks/results/: run `make bench` first")
        path = files[-1]
    doc = json.loads(path.read_text())
    source = (
        str(path.resolve().relative_to(ROOT)) if path.resolve().is_relative_to(ROOT) else str(path)
    )
    text = DOC.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{DOC} lacks the {BEGIN} / {END} markers")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{BEGIN}\n{tables(doc, source)}\n{END}{tail}")
    chart(doc, CHART)
    print(f"updated {DOC.relative_to(ROOT)} and {CHART.relative_to(ROOT)} from {source}")


if __name__ == "__main__":
    main()
