"""The docs/benchmarks.md section of ``benchmarks/observability.py``'s results: costs, tables.

``python -m benchmarks.observability --report FILE`` rewrites the section from a results file.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from .harness import _summary
from .report import docs_section_write

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- observability:begin -->", "<!-- observability:end -->"

# (variant, reference, target: largest cost allowed in %, or None, what it measures)
COMPARISONS = (
    ("default", "bare", 3.0, "the events seam, nothing enabled"),
    ("prometheus", "default", 15.0, "Prometheus collector"),
    ("otel", "default", None, "OpenTelemetry SDK, nothing exported"),
    ("otel+export", "default", None, "OpenTelemetry SDK, in-memory export"),
)


def costs(
    runs: list[dict[str, Any]], runtimes: list[str], seam: dict[str, float]
) -> list[dict[str, Any]]:
    """Each comparison's cost per runtime: within each round, then the median over rounds."""
    by = {(r["runtime"], r["variant"], r["round"]): r for r in runs}
    out = []
    for runtime in runtimes:
        for variant, reference, target, what in COMPARISONS:
            rounds = sorted({r for (rt, v, r) in by if rt == runtime and v == variant})
            pairs = [
                (by[runtime, variant, r], by[runtime, reference, r])
                for r in rounds
                if (runtime, reference, r) in by
            ]
            if not pairs:
                continue
            pct = [(1 - v["jobs_per_s"] / ref["jobs_per_s"]) * 100 for v, ref in pairs]
            cpu = [v["worker_cpu_us_per_job"] - ref["worker_cpu_us_per_job"] for v, ref in pairs]
            cost = statistics.median(pct)
            out.append(
                {
                    "runtime": runtime,
                    "variant": variant,
                    "reference": reference,
                    "what": what,
                    "cost_pct": _summary(pct),
                    "worker_cpu_us_per_job_added": _summary(cpu),
                    "seam_us_added": seam[variant] - seam[reference]
                    if variant in seam and reference in seam
                    else None,
                    "target_pct": target,
                    "met": None if target is None else cost <= target,
                }
            )
    return out


def table(doc: dict[str, Any], source: str) -> str:
    """The docs/benchmarks.md section for one results file."""
    meta, s = doc["meta"], doc["summary"]
    m, pg = meta["machine"], meta["machine"]["postgresql"]
    load = meta["load_average"]
    seam = doc.get("seam_us_per_job", {})
    lines = [
        f"Run of {meta['date']} on {m['cpus']} CPUs ({m['cpu']}), {m['memory_gb']} GB, "
        f"PostgreSQL {pg['server_version'].split()[0]}, Python {m['python']}, pgqueue "
        f"{meta['versions'].get('pgqueue', '?')}, prometheus-client "
        f"{meta['versions'].get('prometheus-client', '?')}, opentelemetry-sdk "
        f"{meta['versions'].get('opentelemetry-sdk', '?')}; drains of {meta['jobs']:,} jobs at "
        f"concurrency {meta['concurrency']}, {meta['rounds']} interleaved rounds (median, with "
        f"min–max); whole run {meta['wall_seconds']:.0f} s; load average "
        f"{load['before']:.1f} before, {load['after']:.1f} after; source: `{source}`.",
        "",
        "| runtime | variant | jobs/s | worker CPU, µs/job | PostgreSQL CPU, µs/job | "
        "seam alone, µs/job |",
        "|---|---|---|---|---|---|",
    ]
    for runtime, label in meta["runtimes"].items():
        for variant in meta["variants"]:
            cell = s.get(runtime, {}).get(variant)
            if cell is None:
                continue
            lines.append(
                f"| {label} | `{variant}` | {_cell(cell['jobs_per_s'], ',.0f')} | "
                f"{_cell(cell['worker_cpu_us_per_job'], ',.0f')} | "
                f"{_cell(cell['postgres_cpu_us_per_job'], ',.0f')} | "
                + (f"{seam[variant]:.2f} |" if variant in seam else "– |")
            )
    lines += [
        "",
        "| runtime | cost of | vs | throughput cost, % | worker CPU added, µs/job | "
        "seam alone, µs/job | target |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in doc["costs"]:
        target = (
            "informative"
            if c["target_pct"] is None
            else f"≤ {c['target_pct']:g} %: {'yes' if c['met'] else '**no**'}"
        )
        lines.append(
            f"| {meta['runtimes'][c['runtime']]} | `{c['variant']}` ({c['what']}) | "
            f"`{c['reference']}` | {_cell(c['cost_pct'], '+.1f')} | "
            f"{_cell(c['worker_cpu_us_per_job_added'], '+.1f')} | "
            + ("–" if c["seam_us_added"] is None else f"{c['seam_us_added']:+.2f}")
            + f" | {target} |"
        )
    return "\n".join(lines)


def _cell(s: dict[str, float], fmt: str) -> str:
    return f"{format(s['median'], fmt)} ({format(s['min'], fmt)} – {format(s['max'], fmt)})"


def write_report(doc: dict[str, Any], path: Path) -> None:
    """Rewrite the observability section of docs/benchmarks.md from ``doc`` (read from ``path``)."""
    source = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
    docs_section_write(BEGIN, END, table(doc, source), path)
