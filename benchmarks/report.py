"""Turn a results file into the tables of docs/benchmarks.md and a chart.

``python -m benchmarks.report [results.json]`` (default: the newest full run in
benchmarks/results/) rewrites the part of docs/benchmarks.md between the ``results`` markers
and writes docs/benchmarks.png; ``--doc`` and ``--chart`` write elsewhere (a copy of the page).
``make bench`` runs it after the measurements. The bars are checked in ``benchmarks/bars.py``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .bars import bars, index_costs, median
from .sweep import best_of, sweep_table

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
    ("enqueue_single", "single add_job ({single:,} calls, 1 producer), jobs/s"),
    ("enqueue_concurrent", "add_job from {producers} producers ({concurrent:,} calls), jobs/s"),
    ("enqueue_bulk_1000", "add_jobs in calls of {batch:,} ({batch_jobs:,} jobs), jobs/s"),
    ("enqueue_bulk", "add_jobs, one call of {bulk:,}, jobs/s"),
    ("drain_c1", "drain {drain_c1:,}, concurrency 1, jobs/s"),
    ("drain_c10", "drain {drain:,}, concurrency 10, jobs/s"),
    ("drain_best", "drain {drain:,}, best concurrency, jobs/s"),
    ("drain_2proc", "drain {drain:,}, 2 processes, jobs/s"),
    ("drain_long", "drain {long:,}, best concurrency, jobs/s"),
    ("claim_empty", "drain {claim_jobs:,} (c10), empty history, jobs/s"),
    ("claim_1m_finished", "drain {claim_jobs:,} (c10), {finished:,} finished rows, jobs/s"),
]

#: What each library stores as the benchmark job's arguments.
PAYLOADS = (
    'Payloads: pgqueue stores `{"i": N}` as `jsonb`; PGQueuer `b"N"` (the ASCII decimal, as '
    "its own benchmark does) in a `bytea` column, which it never parses; procrastinate "
    '`{"i": N}` as `jsonb`. The pgbench references write pgqueue\'s `jsonb`.'
)
DURABILITY = (
    "Durability: every enqueue, by every library and by pgbench, commits durably "
    "(`synchronous_commit` on, the server's default); so do pgqueue's outcome writes. "
    "pgqueue's claim sets `synchronous_commit = off` for its own transaction (a claim lost in "
    "a crash puts its job back to pending; a later durable commit flushes it), which the drain "
    "and latency figures include. PGQueuer runs `durable` (its default), procrastinate as "
    "shipped."
)


class _Sizes(dict):  # type: ignore[type-arg]
    """A results file's sizes, "?" for those an older file lacks."""

    def __missing__(self, key: str) -> str:
        return "?"


def _sizes(meta: dict[str, Any]) -> _Sizes:
    sizes = _Sizes(meta.get("sizes", {}))
    # results written before the concurrency-1 drain had a size of its own
    sizes.setdefault("drain_c1", sizes.get("drain", 0))
    return sizes


def _label(label: str, meta: dict[str, Any]) -> str:
    sizes = _sizes(meta)
    try:
        return label.format_map(sizes)
    except (ValueError, TypeError):  # a "?" under a numeric format
        return label.format_map(_Sizes({k: str(v) for k, v in sizes.items()}))


def _cell(summary: dict[str, Any], measurement: str, subject: str, key: str, fmt: str) -> str:
    try:
        s = summary[measurement][subject][key]
    except KeyError:
        return "–"
    if s["min"] == s["max"]:
        return format(s["median"], fmt)
    return f"{format(s['median'], fmt)} ({format(s['min'], fmt)}–{format(s['max'], fmt)})"


def _libraries(summary: dict[str, Any]) -> list[str]:
    found = {sub for by in summary.values() for sub in by if not sub.startswith("pgbench")}
    return sorted(found, key=_order)


def _provenance(meta: dict[str, Any], source: str) -> str:
    git = meta.get("git") or {}
    commit = git.get("commit")
    if commit:
        tree = f"commit `{commit[:12]}`" + (
            f" with uncommitted changes to {len(git.get('dirty_files', []))} files"
            if git.get("dirty")
            else ""
        )
    else:
        tree = "commit not recorded"
    long_reps = f", long drains {meta['long_reps']}" if "long_reps" in meta else ""
    return (
        f"Run of {meta['date']} on {meta['cpus']} CPUs, PostgreSQL {meta['postgresql']}, "
        f"{meta['reps']} interleaved repetition(s){long_reps} (median, with min–max); from "
        f"{tree}; source: `{source}`. Versions: "
        + ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
        + "."
    )


def tables(doc: dict[str, Any], source: str) -> str:
    s = doc["summary"]
    meta = doc["meta"]
    subjects = _libraries(s)
    lines = [
        _provenance(meta, source),
        "",
        "| measurement | " + " | ".join(subjects) + " |",
        "|---|" + "---|" * len(subjects),
    ]
    for key, label in THROUGHPUT:
        if key in s:
            lines.append(
                f"| {_label(label, meta)} | "
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
    lines += _pgbench_table(doc)
    lines += _sweep_table(doc)
    origin = meta.get("best_concurrency_from", {})
    lines += [
        "",
        "Best concurrency used: "
        + ", ".join(
            f"{k} {v}" + (f" ({origin[k]})" if k in origin else "")
            for k, v in sorted(meta["best_concurrency"].items(), key=lambda kv: _order(kv[0]))
        )
        + ".",
        "",
        "SPEC §10 bars, checked against this run (PGQueuer: the better of its two setups in "
        "each measurement, named):",
        "",
        "| bar | pgqueue | reference | ratio | met |",
        "|---|---|---|---|---|",
    ]
    for bar in bars(doc):
        met = "–" if bar.met is None else ("yes" if bar.met else "**no**")
        lines.append(f"| {bar.bar} | {bar.measured} | {bar.reference} | {bar.ratio} | {met} |")
    lines += ["", PAYLOADS, "", DURABILITY]
    if "drain_end" in meta:
        lines += ["", f"End of a drain: {meta['drain_end']}."]
    return "\n".join(lines)


def _pgbench_table(doc: dict[str, Any]) -> list[str]:
    s = doc["summary"]
    rows = index_costs(s)
    c10 = {
        sub: v for sub, v in s.get("enqueue_concurrent", {}).items() if sub.startswith("pgbench")
    }
    bulk = median(s, "enqueue_bulk_1000", "pgbench", "jobs_per_s")
    if not rows and not c10 and bulk is None:
        return []
    secs = _sizes(doc["meta"]).get("pgbench_seconds", "?")
    out = [
        "",
        "pgbench references: pgqueue's own `job_insert` (its `pg_notify` included) on pgqueue's "
        f"table, prepared, one transaction per job, {secs} s per run "
        "(`benchmarks/pgbench.py`; the scripts are in the results file); and what the table's "
        "secondary indexes cost that INSERT:",
        "",
        "| reference | jobs/s | against the table as migrated |",
        "|---|---|---|",
    ]
    for subject, _, change in rows:
        what = {
            "pgbench": "job_insert, 1 client",
            "pgbench/no-notify": "job_insert without its pg_notify, 1 client",
            "pgbench/pkey-only": "job_insert, 1 client, only the primary key (every secondary "
            "index dropped)",
        }.get(subject, f"job_insert, 1 client, `{subject.removeprefix('pgbench/drop-')}` dropped")
        cell = _cell(s, "enqueue_single", subject, "jobs_per_s", ",.0f")
        vs = "–" if change is None or subject == "pgbench" else f"{change:+.1%}"
        out.append(f"| {what} | {cell} | {vs} |")
    base10 = median(s, "enqueue_concurrent", "pgbench", "jobs_per_s")
    for subject in sorted(c10):
        what = "job_insert" + (" without its pg_notify" if subject.endswith("no-notify") else "")
        producers = _sizes(doc["meta"]).get("producers", 10)
        cell = _cell(s, "enqueue_concurrent", subject, "jobs_per_s", ",.0f")
        v = median(s, "enqueue_concurrent", subject, "jobs_per_s")
        vs = "–" if subject == "pgbench" or not base10 or v is None else f"{v / base10 - 1:+.1%}"
        out.append(f"| {what}, {producers} clients | {cell} | {vs} |")
    if bulk is not None:
        cell = _cell(s, "enqueue_bulk_1000", "pgbench", "jobs_per_s", ",.0f")
        out.append(f"| 1,000-row INSERT per transaction, 1 client (rows/s) | {cell} | |")
    return out


def _sweep_table(doc: dict[str, Any]) -> list[str]:
    table = sweep_table(doc["summary"])
    if not table:
        return []
    subjects = sorted(table, key=_order)
    levels = sorted({c for by in table.values() for c in by})
    best = best_of(table)
    meta = doc["meta"]
    sizes = _sizes(meta)
    out = [
        "",
        f"Concurrency sweep (drains of {sizes['sweep']:,} jobs, {sizes['sweep_slow']:,} for "
        f"procrastinate; {meta.get('sweep_reps', 1)} repetition(s); jobs/s, best in bold):",
        "",
        "| concurrency | " + " | ".join(subjects) + " |",
        "|---|" + "---|" * len(subjects),
    ]
    for c in levels:
        cells = []
        for sub in subjects:
            v = table[sub].get(c)
            cell = "–" if v is None else f"{v:,.0f}"
            cells.append(f"**{cell}**" if best.get(sub) == c else cell)
        out.append(f"| {c} | " + " | ".join(cells) + " |")
    return out


def _order(subject: str) -> tuple[int, str]:
    family = (
        0
        if subject.startswith("pgqueuer")
        else 1
        if subject == "procrastinate"
        else 3
        if subject.startswith("pgbench")
        else 2
    )
    return (family, subject)


def chart(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = doc["summary"]
    subjects = _libraries(s)
    panels = [(k, _label(label, doc["meta"])) for k, label in THROUGHPUT if k in s]
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
            # the pgbench reference of an enqueue measurement, as a line
            ref_key = "enqueue_bulk_1000" if key == "enqueue_bulk" else key  # its 1,000-row INSERT
            ref = median(s, ref_key, "pgbench", "jobs_per_s")
            if ref is not None:
                ax.axhline(ref, color="black", linestyle="--", linewidth=0.8)
                ax.annotate(
                    f"pgbench {ref:,.0f}/s",
                    (0, ref),
                    xytext=(0, 2),
                    textcoords="offset points",
                    fontsize=6,
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


def newest_results() -> Path:
    """The newest results file of a run that compared the libraries (``make bench``)."""
    files = sorted((ROOT / "benchmarks" / "results").glob("*.json"), reverse=True)
    # the admin queries', the dashboard's and the observability runs' results have sections of
    # their own; quick runs check the harness, not speed
    files = [f for f in files if not any(x in f.name for x in ("-admin", "-observability", "-web"))]
    for f in [f for f in files if "quick" not in f.name] or files:
        text = f.read_text()
        # a before/after comparison (pgqueue-base/ subjects, docs/benchmarks.md's "Before and
        # after a change") measures one change, not pgqueue against its peers; a sweep alone
        # has no table
        if "pgqueue-base/" in text:
            continue
        if '"enqueue_single"' in text or '"drain_best"' in text:
            return f
    raise SystemExit("no results in benchmarks/results/: run `make bench` first")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("results", nargs="?", type=Path, help="default: the newest full run")
    parser.add_argument("--doc", type=Path, default=DOC, help="the page to rewrite")
    parser.add_argument("--chart", type=Path, default=CHART, help="the chart to write")
    args = parser.parse_args()
    path = args.results or newest_results()
    doc = json.loads(path.read_text())
    source = (
        str(path.resolve().relative_to(ROOT)) if path.resolve().is_relative_to(ROOT) else str(path)
    )
    text = args.doc.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{args.doc} lacks the {BEGIN} / {END} markers")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    args.doc.write_text(f"{head}{BEGIN}\n{tables(doc, source)}\n{END}{tail}")
    chart(doc, args.chart)
    print(f"updated {args.doc} and {args.chart} from {source}")


if __name__ == "__main__":
    main()
