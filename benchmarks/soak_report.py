"""The soak's report: the line printed per sample, the verdict, the docs/benchmarks.md sections.

Everything here reads a results document, never the server, so that ``python -m
benchmarks.soak --report FILE`` renders a section from a results file as the run did.
"""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path
from typing import Any

from .report import docs_section_write
from .soak_sample import JOBS

ROOT = Path(__file__).resolve().parent.parent
MARKERS = {
    None: ("<!-- soak:begin -->", "<!-- soak:end -->"),
    "cleanup": ("<!-- soak-overload-cleanup:begin -->", "<!-- soak-overload-cleanup:end -->"),
    "drain": ("<!-- soak-overload-drain:begin -->", "<!-- soak-overload-drain:end -->"),
}


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
        **_cost(middle[0], samples[-1]),
    }


def _cost(first: dict[str, Any], last: dict[str, Any]) -> dict[str, Any]:
    """The server's CPU and WAL per job between two samples (results older than these lack it)."""
    a, b = first.get("server"), last.get("server")
    jobs = last["completed"] - first["completed"]
    if not a or not b or jobs <= 0:
        return {}
    cost: dict[str, Any] = {
        "cost_jobs": jobs,
        "wal_bytes_per_job": (b["wal_bytes"] - a["wal_bytes"]) / jobs,
    }
    if a.get("cpu_s") is not None and b.get("cpu_s") is not None:
        cost["server_cpu_us_per_job"] = (b["cpu_s"] - a["cpu_s"]) / jobs * 1e6
    return cost


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
        f"{v['autovacuum_last_third']} autovacuums in the last third." + _cost_sentence(v)
    )


def _cost_sentence(v: dict[str, Any]) -> str:
    if "wal_bytes_per_job" not in v:
        return ""
    cpu = v.get("server_cpu_us_per_job")
    spent = f"{cpu:,.0f} µs of PostgreSQL CPU (all of its processes) and " if cpu else ""
    return (
        f" From the middle third on, each job cost {spent}"
        f"{v['wal_bytes_per_job'] / 1000:,.2f} KB of WAL ({v['cost_jobs']:,} jobs)."
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
