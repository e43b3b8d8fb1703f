"""The benchmark harness: ``make bench`` (or ``python -m benchmarks.run --help``).

Every measurement runs in a database created for it alone, with each library in processes of
its own (``benchmarks/role.py``). Repetitions interleave the libraries (A B C A B C ...), so
that drift in the machine's state hits all of them alike. Every job of every measurement is
checked to have run exactly once. Results go to ``benchmarks/results/<stamp>.json``;
``benchmarks/report.py`` turns a results file into the table in docs/benchmarks.md and a chart.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import psycopg

from .subjects.registry import ALL, make_subject

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

# Each library's best drain concurrency in one process, found by sweeping 10..200 on this
# machine (docs/benchmarks.md, "How the numbers were taken").
BEST_CONCURRENCY = {"pgqueuer": 500, "procrastinate": 50}
PGQUEUE_BEST = 100


def best_concurrency(subject: str) -> int:
    return BEST_CONCURRENCY.get(subject, PGQUEUE_BEST)


class Harness:
    def __init__(self, admin_dsn: str, verbose: bool) -> None:
        self.admin_dsn = admin_dsn
        self.verbose = verbose
        self.tmp = Path(tempfile.mkdtemp(prefix="pgqueue-bench-"))

    # -- databases ----------------------------------------------------------------------

    def dsn_for(self, db: str) -> str:
        info = psycopg.conninfo.conninfo_to_dict(self.admin_dsn)
        info["dbname"] = db
        host, port, user = info.get("host", "127.0.0.1"), info.get("port", 5432), info.get("user")
        return f"postgresql://{user + '@' if user else ''}{host}:{port}/{db}"

    def fresh_db(self) -> tuple[str, str]:
        name = f"pgqueue_bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name, self.dsn_for(name)

    def drop_db(self, name: str) -> None:
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    # -- roles ---------------------------------------------------------------------------

    def role(self, subject: str, action: str, dsn: str, *args: str) -> dict[str, Any]:
        cmd = [sys.executable, "-m", "benchmarks.role", subject, action, "--dsn", dsn, *args]
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    def start_workers(
        self,
        subject: str,
        dsn: str,
        processes: int,
        concurrency: int,
        sample_rss: float = 0.0,
        compact: int = 0,
    ) -> list[tuple[subprocess.Popen[str], Path]]:
        workers = []
        for _ in range(processes):
            out = self.tmp / f"worker-{uuid.uuid4().hex[:8]}.json"
            cmd = [
                sys.executable,
                "-m",
                "benchmarks.role",
                subject,
                "worker",
                "--dsn",
                dsn,
                "--concurrency",
                str(concurrency),
                "--out",
                str(out),
                "--sample-rss",
                str(sample_rss),
                "--compact",
                str(compact),
            ]
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
            workers.append((proc, out))
        for proc, _ in workers:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"{subject} worker did not start (got {line!r})")
        return workers

    def stop_workers(
        self, workers: list[tuple[subprocess.Popen[str], Path]]
    ) -> list[dict[str, Any]]:
        for proc, _ in workers:
            proc.send_signal(signal.SIGTERM)
        results = []
        for proc, out in workers:
            rc = proc.wait(timeout=120)
            if rc != 0 or not out.exists():
                raise RuntimeError(f"a worker exited with {rc} and no results")
            results.append(json.loads(out.read_text()))
            out.unlink()
        return results

    def wait_drained(self, subject: str, dsn: str, timeout: float) -> float:
        """Poll until no job is left; return the wall-clock time it was first seen so."""
        sql = make_subject(subject, dsn).remaining_sql
        deadline = time.monotonic() + timeout
        with psycopg.connect(dsn, autocommit=True) as conn:
            while True:
                (left,) = conn.execute(sql).fetchone()  # type: ignore[misc]
                now = time.time()
                if left == 0:
                    return now
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{subject}: {left} jobs still not done after {timeout}s")
                # The count scans the library's table, and on 2 cores a tight poll would take
                # CPU from the drain it measures: poll often only near the end.
                time.sleep(0.005 if left < 50 else 0.05 if left < 2000 else 0.2)

    @staticmethod
    def check_once(results: list[dict[str, Any]], expected: range) -> list[tuple[int, float]]:
        records = [(int(i), float(t)) for r in results for i, t in r["records"]]
        counts = Counter(i for i, _ in records)
        for r in results:  # compact workers: per-job counts, and the time of their first job
            for i, c in enumerate(bytes.fromhex(r.get("counts", ""))):
                if c:
                    counts[i] += c
            records += [(-1, float(t)) for t in r.get("first", [])]
        missing = [i for i in expected if counts[i] == 0]
        repeated = [i for i, c in counts.items() if c > 1]
        extra = [i for i in counts if i not in expected and i != -1]
        if missing or repeated or extra:
            raise RuntimeError(
                f"exactly-once violated: {len(missing)} missing (e.g. {missing[:5]}), "
                f"{len(repeated)} repeated (e.g. {repeated[:5]}), {len(extra)} unexpected"
            )
        return records

    # -- measurements ----------------------------------------------------------------------

    def enqueue_single(self, subject: str, n: int) -> dict[str, float]:
        db, dsn = self.fresh_db()
        try:
            self.role(subject, "install", dsn)
            seconds = self.role(subject, "enqueue-single", dsn, "-n", str(n))["seconds"]
            self._check_count(subject, dsn, n)
            return {"jobs_per_s": n / seconds}
        finally:
            self.drop_db(db)

    def enqueue_bulk(self, subject: str, n: int) -> dict[str, float]:
        db, dsn = self.fresh_db()
        try:
            self.role(subject, "install", dsn)
            seconds = self.role(subject, "enqueue-bulk", dsn, "-n", str(n))["seconds"]
            self._check_count(subject, dsn, n)
            return {"jobs_per_s": n / seconds}
        finally:
            self.drop_db(db)

    def _check_count(self, subject: str, dsn: str, n: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            (left,) = conn.execute(make_subject(subject, dsn).remaining_sql).fetchone()  # type: ignore[misc]
        if left != n:
            raise RuntimeError(f"{subject}: enqueued {n} jobs but {left} are in the queue")

    def drain(
        self,
        subject: str,
        n: int,
        concurrency: int,
        processes: int = 1,
        finished: int = 0,
        sample_rss: float = 0.0,
    ) -> dict[str, Any]:
        db, dsn = self.fresh_db()
        try:
            self.role(subject, "install", dsn)
            if finished:
                self.role(subject, "fill-finished", dsn, "-n", str(finished))
            self.role(subject, "enqueue-bulk", dsn, "-n", str(n))
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE")
            # Following memory, the worker counts jobs in a preallocated array: a record per job
            # would grow by ~120 bytes a job and be measured as the library's.
            compact = n if sample_rss else 0
            workers = self.start_workers(subject, dsn, processes, concurrency, sample_rss, compact)
            # CPU used while draining, by the worker processes and by PostgreSQL (all of its
            # processes: the backends of the workers, and the rest, which idle meanwhile)
            cpu_before = sum(_proc_cpu(p.pid) for p, _ in workers), _postgres_cpu()
            try:
                end = self.wait_drained(subject, dsn, timeout=max(120.0, n / 50))
                cpu_after = sum(_proc_cpu(p.pid) for p, _ in workers), _postgres_cpu()
            finally:
                results = self.stop_workers(workers)
            records = self.check_once(results, range(n))
            start = min(t for _, t in records)
            result: dict[str, Any] = {
                "jobs_per_s": n / (end - start),
                "seconds": end - start,
                "worker_cpu_us_per_job": (cpu_after[0] - cpu_before[0]) / n * 1e6,
                "postgres_cpu_us_per_job": _cpu_since(cpu_before[1], cpu_after[1]) / n * 1e6,
            }
            if sample_rss:
                result["rss"] = results[0]["rss"]
            return result
        finally:
            self.drop_db(db)

    def latency(self, subject: str, n: int, spacing: float, concurrency: int) -> dict[str, Any]:
        db, dsn = self.fresh_db()
        try:
            self.role(subject, "install", dsn)
            workers = self.start_workers(subject, dsn, 1, concurrency)
            try:
                # one job first, so that the worker is warm and idle when the clock runs
                self.role(subject, "enqueue-spaced", dsn, "--start", str(n), "-n", "1")
                self.wait_drained(subject, dsn, timeout=60)
                time.sleep(0.5)
                commits = self.role(
                    subject, "enqueue-spaced", dsn, "-n", str(n), "--spacing", str(spacing)
                )["commits"]
                self.wait_drained(subject, dsn, timeout=60)
            finally:
                results = self.stop_workers(workers)
            records = self.check_once(results, range(n + 1))
            started = {i: t for i, t in records}
            ms = sorted((started[i] - commits[i]) * 1000 for i in range(n))
            return {
                "p50_ms": _pct(ms, 50),
                "p95_ms": _pct(ms, 95),
                "p99_ms": _pct(ms, 99),
                "max_ms": ms[-1],
            }
        finally:
            self.drop_db(db)


_TICK = os.sysconf("SC_CLK_TCK")


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid``, 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _postgres_cpu() -> dict[int, float]:
    """CPU seconds used so far by each running PostgreSQL process on this machine."""
    total: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as f:
                if f.read().strip() != "postgres":
                    continue
        except OSError:
            continue
        total[int(entry)] = _proc_cpu(int(entry))
    return total


def _cpu_since(before: dict[int, float], after: dict[int, float]) -> float:
    # processes that ended in between are not counted (their CPU time is gone with them)
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


def _pct(sorted_values: list[float], p: float) -> float:
    k = (len(sorted_values) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in (
        "pgqueue",
        "pgqueuer",
        "procrastinate",
        "asyncpg",
        "psycopg",
        "sqlalchemy",
        "uvloop",
    ):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--dsn",
        default=os.environ.get(
            "PGQUEUE_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
        help="an admin connection: each measurement creates and drops its own database",
    )
    parser.add_argument("--subjects", default=",".join(ALL))
    parser.add_argument(
        "--scenarios",
        default="enqueue_single,enqueue_bulk,drain,drain_2proc,latency,claim_cost,memory,admin",
        help="admin: the admin API's reads on 1M finished + 100k pending jobs, pgqueue only "
        "(benchmarks/admin_queries.py, results of its own: results/<time>-admin.json)",
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, one repetition: a smoke test"
    )
    parser.add_argument("--memory-jobs", type=int, default=1_000_000)
    parser.add_argument(
        "--memory-subjects",
        default="pgqueue/asyncpg,pgqueue/psycopg-sync,pgqueuer",
        help="whose worker memory to follow over --memory-jobs jobs (one run each)",
    )
    parser.add_argument("--drain-jobs", type=int, default=20_000, help="jobs per drain")
    parser.add_argument(
        "--claim-subjects",
        default=",".join(ALL),
        help="who runs the claim-cost measurement (filling 1M rows takes up to a minute each)",
    )
    parser.add_argument(
        "--drain-c1-jobs",
        type=int,
        default=20_000,
        help="jobs in the concurrency-1 drain (the slowest measurement: ~100 jobs/s for a peer)",
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()

    subjects = [s for s in args.subjects.split(",") if s]
    scenarios = [s for s in args.scenarios.split(",") if s]
    reps = 1 if args.quick else args.reps
    sizes = {
        "single": 300 if args.quick else 3000,
        "bulk": 10_000 if args.quick else 100_000,
        "drain": 2_000 if args.quick else args.drain_jobs,
        "drain_c1": 500 if args.quick else args.drain_c1_jobs,
        "claim_jobs": 2_000 if args.quick else 10_000,
        "finished": 50_000 if args.quick else 1_000_000,
        "latency": 50 if args.quick else 200,
        "memory": 20_000 if args.quick else args.memory_jobs,
    }
    harness = Harness(args.dsn, args.verbose)
    with psycopg.connect(args.dsn) as conn:
        server = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
    runs: list[dict[str, Any]] = []

    # measurement name -> (scenarios key, fn(subject) -> dict)
    plan: list[tuple[str, Any]] = []
    if "enqueue_single" in scenarios:
        plan.append(("enqueue_single", lambda s: harness.enqueue_single(s, sizes["single"])))
    if "enqueue_bulk" in scenarios:
        plan.append(("enqueue_bulk", lambda s: harness.enqueue_bulk(s, sizes["bulk"])))
    if "drain" in scenarios:
        plan.append(("drain_c1", lambda s: harness.drain(s, sizes["drain_c1"], 1)))
        plan.append(("drain_c10", lambda s: harness.drain(s, sizes["drain"], 10)))
        plan.append(("drain_best", lambda s: harness.drain(s, sizes["drain"], best_concurrency(s))))
    if "drain_2proc" in scenarios:
        plan.append(
            (
                "drain_2proc",
                lambda s: harness.drain(s, sizes["drain"], best_concurrency(s), processes=2),
            )
        )
    if "latency" in scenarios:
        plan.append(("latency", lambda s: harness.latency(s, sizes["latency"], 0.02, 10)))
    if "claim_cost" in scenarios:
        plan.append(("claim_empty", lambda s: harness.drain(s, sizes["claim_jobs"], 10)))
        plan.append(
            (
                "claim_1m_finished",
                lambda s: harness.drain(s, sizes["claim_jobs"], 10, finished=sizes["finished"]),
            )
        )

    started = time.monotonic()
    claimers = [s for s in args.claim_subjects.split(",") if s in subjects]
    for name, fn in plan:
        for rep in range(reps):
            for subject in claimers if name.startswith("claim_") else subjects:
                t = time.monotonic()
                result = fn(subject)
                runs.append({"measurement": name, "subject": subject, "rep": rep, **result})
                print(
                    f"[{time.monotonic() - started:7.1f}s] {name:18} {subject:26} rep {rep}: "
                    + ", ".join(f"{k}={v:,.1f}" for k, v in result.items() if isinstance(v, float))
                    + f"  ({time.monotonic() - t:.1f}s)",
                    flush=True,
                )
    if "memory" in scenarios:
        for subject in [s for s in args.memory_subjects.split(",") if s in subjects]:
            result = harness.drain(
                subject, sizes["memory"], best_concurrency(subject), sample_rss=0.5
            )
            rss = result.pop("rss")
            warm = [b for _, done, b in rss if done >= sizes["memory"] * 0.1]
            result.update(
                {
                    "rss_start_mb": warm[0] / 2**20 if warm else 0.0,
                    "rss_end_mb": warm[-1] / 2**20 if warm else 0.0,
                    "rss_max_mb": max(warm) / 2**20 if warm else 0.0,
                    "rss_growth_pct": (max(warm) / warm[0] - 1) * 100 if warm else 0.0,
                    "samples": [[done, b] for _, done, b in rss],
                }
            )
            runs.append({"measurement": "memory", "subject": subject, "rep": 0, **result})
            print(
                f"memory {subject}: {result['rss_start_mb']:.1f} -> {result['rss_max_mb']:.1f} MB "
                f"({result['rss_growth_pct']:+.1f}%) over {sizes['memory']:,} jobs",
                flush=True,
            )

    summary: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for run in runs:
        for key, value in run.items():
            if key in ("measurement", "subject", "rep", "samples", "seconds") or not isinstance(
                value, float
            ):
                continue
            summary.setdefault(run["measurement"], {}).setdefault(run["subject"], {}).setdefault(
                key, []
            )  # type: ignore[arg-type]
            summary[run["measurement"]][run["subject"]][key].append(value)  # type: ignore[attr-defined]
    summary = {
        m: {s: {k: _summary(v) for k, v in d.items()} for s, d in by.items()}
        for m, by in summary.items()
    }  # type: ignore[arg-type]
    doc = {
        "meta": {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "postgresql": server,
            "versions": _versions(),
            "reps": reps,
            "sizes": sizes,
            "best_concurrency": {s: best_concurrency(s) for s in subjects},
            "wall_seconds": round(time.monotonic() - started, 1),
        },
        "summary": summary,
        "runs": runs,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = (
        args.out
        or RESULTS
        / f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}{'-quick' if args.quick else ''}.json"
    )
    if runs:  # not for "--scenarios admin" alone, which writes a results file of its own
        out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"results: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    if "admin" in scenarios:
        cmd = [sys.executable, "-m", "benchmarks.admin_queries", "--dsn", args.dsn]
        subprocess.run(cmd + (["--quick"] if args.quick else []), cwd=ROOT, check=True)


if __name__ == "__main__":
    main()
