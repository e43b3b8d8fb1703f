"""The dashboard's jobs page on a large table: ``make bench-web`` (``--help`` for the options).

A database of its own gets 1,000,000 finished jobs and 100,000 pending ones (the data of
``make bench-admin``: ``benchmarks/admin_data.py``), then ``pgqueue dashboard`` (the standalone
server: Starlette on uvicorn) runs on it as a separate process, once per driver, and this
process times whole HTTP requests to it over loopback on one keep-alive connection: from
sending the request to having read the last byte of the page. Each page is requested once to
warm up, then ``--reps`` times, interleaved; every answer is checked (status 200, the rows the
page must show). The results (median, p95, min, max in ms per page and driver, the machine, the
row counts) go to ``benchmarks/results/<UTC time>-web.json``, and the table between the
``web`` markers of docs/benchmarks.md is rewritten from it. The issue's bar: the jobs page
renders in under 200 ms (median).
"""

from __future__ import annotations

import argparse
import contextlib
import html
import http.client
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg

from . import admin_data
from .admin_queries import _dsn_for, _pct, _url, machine
from .report import docs_section_write

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- web:begin -->", "<!-- web:end -->"
BAR_MS = 200.0
DRIVERS = ("psycopg", "asyncpg")
DEEP = 20  # "a page further on": this many pages in, by following the next-page links

# The dashboard's HTML hooks: its job rows (with their status) and the next-page link.
ROW = re.compile(r'<tr\b[^>]*\bdata-testid="job-row-\d+"[^>]*>', re.S)
STATUS = re.compile(r'\bdata-status="([a-z]+)"')
NEXT = re.compile(r'<a\b[^>]*\bdata-testid="page-next"[^>]*>', re.S)
HREF = re.compile(r'\bhref="([^"]*)"')


@dataclass(frozen=True)
class Page:
    """One page to time: its key, what it shows, its path, and the status every row must have."""

    key: str
    label: str
    path: str = ""  # filled in for the deep pages once their cursor is known
    status: str | None = None
    bar: bool = False
    informative: bool = False


PAGES = (
    Page("jobs", "/jobs: every job, newest first, first page", "/jobs", bar=True),
    Page(
        "jobs_failed",
        "/jobs?status=failed: first page",
        "/jobs?status=failed",
        status="failed",
        bar=True,
    ),
    Page("jobs_deep", f"/jobs, page {DEEP + 1} (by the next-page cursor)", bar=True),
    Page(
        "jobs_failed_deep",
        f"/jobs?status=failed, page {DEEP + 1} (by the next-page cursor)",
        status="failed",
        bar=True,
    ),
    Page(
        "jobs_pending_queue",
        "/jobs?status=pending&queue=emails: first page",
        "/jobs?status=pending&queue=emails",
        status="pending",
    ),
    Page("overview", "/: the overview (counts, charts of the last hour)", "/", informative=True),
)


# -- the server ---------------------------------------------------------------------------


@contextlib.contextmanager
def dashboard(url: str, driver: str) -> Iterator[tuple[int, Path]]:
    """``pgqueue dashboard`` on a free port of 127.0.0.1, on ``driver``; yield (port, log)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
    log = Path(tempfile.mkstemp(prefix="pgqueue-bench-web-", suffix=".log")[1])
    with open(log, "wb") as out:
        command = [sys.executable, "-m", "pgqueue", "dashboard", "--dsn", url]
        command += ["--driver", driver, "--host", "127.0.0.1", "--port", str(port)]
        proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"pgqueue dashboard exited:\n{log.read_text()}")
            try:
                status, _ = get(http.client.HTTPConnection("127.0.0.1", port, timeout=10), "/")
                if status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"pgqueue dashboard did not start:\n{log.read_text()}")
            time.sleep(0.1)
        yield port, log
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.unlink(missing_ok=True)


def get(conn: http.client.HTTPConnection, path: str) -> tuple[int, str]:
    """GET ``path`` on the keep-alive connection ``conn``; return the status and the body."""
    conn.request("GET", path, headers={"Accept": "text/html"})
    response = conn.getresponse()
    return response.status, response.read().decode()


# -- timing -------------------------------------------------------------------------------


def next_path(body: str) -> str:
    """The path of the page's next-page link (the jobs page's keyset cursor)."""
    link = NEXT.search(body)
    href = HREF.search(link.group(0)) if link else None
    if href is None:
        raise RuntimeError("the page has no next-page link")
    parts = urlsplit(html.unescape(href.group(1)))
    return parts.path + (f"?{parts.query}" if parts.query else "")


def check(page: Page, status: int, body: str) -> None:
    """Fail the run if a page is not what it should be (a fast wrong answer)."""
    if status != 200:
        raise RuntimeError(f"{page.label}: HTTP {status}: {body[:500]}")
    if page.key == "overview":
        return
    rows = ROW.findall(body)
    if len(rows) != 50:
        raise RuntimeError(f"{page.label}: {len(rows)} rows, not 50")
    statuses = {m.group(1) if (m := STATUS.search(row)) else None for row in rows}
    if page.status and statuses != {page.status}:
        raise RuntimeError(f"{page.label}: a row is not {page.status}")


def deep_paths(conn: http.client.HTTPConnection) -> dict[str, str]:
    """Follow the next-page links ``DEEP`` times from the first page, unfiltered and failed."""
    out = {}
    for key, start in (("jobs_deep", "/jobs"), ("jobs_failed_deep", "/jobs?status=failed")):
        path = start
        for _ in range(DEEP):
            status, body = get(conn, path)
            if status != 200:
                raise RuntimeError(f"{path}: HTTP {status}")
            path = next_path(body)
        out[key] = path
    return out


def measure(url: str, reps: int) -> dict[str, Any]:
    """Time every page on a dashboard per driver, interleaved; return the times in ms."""
    times: dict[str, dict[str, list[float]]] = {p.key: {d: [] for d in DRIVERS} for p in PAGES}
    paths: dict[str, str] = {}
    sizes: dict[str, int] = {}
    with contextlib.ExitStack() as stack:
        conns = {}
        for driver in DRIVERS:
            port, _ = stack.enter_context(dashboard(url, driver))
            conns[driver] = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            stack.callback(conns[driver].close)
        paths = deep_paths(conns[DRIVERS[0]])
        timed: list[tuple[Page, str]] = [(p, p.path or paths[p.key]) for p in PAGES]
        for _ in range(reps + 1):
            for page, path in timed:
                for driver in DRIVERS:
                    t0 = time.perf_counter()
                    status, body = get(conns[driver], path)
                    times[page.key][driver].append((time.perf_counter() - t0) * 1000)
                    check(page, status, body)
                    sizes[page.key] = len(body.encode())
    return {"times": times, "paths": {p.key: p.path or paths[p.key] for p in PAGES}, "bytes": sizes}


def summarise(times: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    """Per page and driver: the warm-up request apart, median, p95, min and max (ms)."""
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


# -- the report -------------------------------------------------------------------------------


def table(doc: dict[str, Any], source: str) -> str:
    """The docs/benchmarks.md section for one results file."""
    meta, s = doc["meta"], doc["summary"]
    rows = meta["rows"]["jobs_by_status"]
    pg = meta["machine"]["postgresql"]
    load = meta["load_average"]
    lines = [
        f"Run of {meta['date']} on {meta['machine']['cpus']} CPUs ({meta['machine']['cpu']}), "
        f"PostgreSQL {pg['server_version'].split()[0]}, pgqueue "
        f"{meta['versions'].get('pgqueue', '?')}, uvicorn {meta['versions'].get('uvicorn', '?')}, "
        f"Starlette {meta['versions'].get('starlette', '?')}; {meta['reps']} requests per page "
        f"and driver after a warm-up, interleaved; source: `{source}`. Jobs: "
        f"{', '.join(f'{n:,} {k}' for k, n in sorted(rows.items()))} "
        f"({sum(rows.values()):,} rows, {meta['rows']['total_size_with_indexes']} with "
        f"indexes); whole run {meta['wall_seconds']:.0f} s; load average {load['before']:.1f} "
        f"before, {load['after']:.1f} after.",
        "",
        "| page | " + " | ".join(f"{d}: median (p95), ms" for d in DRIVERS) + " | bar |",
        "|---|" + "---|" * len(DRIVERS) + "---|",
    ]
    for page in PAGES:
        cells = [
            f"{s[page.key][d]['median_ms']:.1f} ({s[page.key][d]['p95_ms']:.1f})" for d in DRIVERS
        ]
        if page.bar:
            worst = max(s[page.key][d]["median_ms"] for d in DRIVERS)
            bar = f"< {BAR_MS:.0f} ms (median): {'yes' if worst < BAR_MS else '**no**'}"
        else:
            bar = "informative" if page.informative else "–"
        size = doc["bytes"].get(page.key, 0)
        lines.append(
            f"| `{page.label}` ({size / 1024:.0f} kB) | " + " | ".join(cells) + f" | {bar} |"
        )
    return "\n".join(lines)


def write_report(doc: dict[str, Any], path: Path) -> None:
    """Rewrite the web section of docs/benchmarks.md from ``doc`` (read from ``path``)."""
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
    parser.add_argument("--reps", type=int, default=15, help="timed requests per page and driver")
    parser.add_argument(
        "--quick", action="store_true", help="100,000 + 10,000 jobs, 6 requests: a smoke test"
    )
    parser.add_argument("--keep", action="store_true", help="keep the database")
    parser.add_argument("--no-report", action="store_true", help="leave docs/benchmarks.md")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--report", type=Path, help="only rewrite the docs from this results file")
    args = parser.parse_args()
    if args.report:
        write_report(json.loads(args.report.read_text()), args.report.resolve())
        return
    if args.quick:
        args.finished, args.pending, args.reps = 100_000, 10_000, 6

    started = time.monotonic()
    load_before = os.getloadavg()
    db = f"pgqueue_bench_web_{uuid.uuid4().hex[:8]}"
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
        measured = measure(_url(dsn), args.reps)
    finally:
        if args.keep:
            print(f"kept database {db}: {_url(dsn)}")
        else:
            with psycopg.connect(args.dsn, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'.encode())
    summary = summarise(measured["times"])
    for page in PAGES:
        print(
            f"{page.label:66} "
            + "  ".join(
                f"{d} {by['median_ms']:7.1f} ms (p95 {by['p95_ms']:.1f})"
                for d, by in summary[page.key].items()
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
            "pages": {p.key: p.label for p in PAGES},
            "wall_seconds": round(time.monotonic() - started, 1),
        },
        "summary": summary,
        "paths": measured["paths"],
        "bytes": measured["bytes"],
        "times_ms": measured["times"],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or RESULTS / f"{stamp}-web{'-quick' if args.quick else ''}.json"
    out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(f"results: {out.relative_to(ROOT) if out.resolve().is_relative_to(ROOT) else out}")
    if not (args.quick or args.no_report):
        write_report(doc, out.resolve())


def _versions() -> dict[str, str]:
    out = {}
    for dist in ("pgqueue", "asyncpg", "psycopg", "starlette", "jinja2", "uvicorn", "uvloop"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    return out


if __name__ == "__main__":
    main()
