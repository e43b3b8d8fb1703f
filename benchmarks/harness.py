"""The measurements of ``benchmarks/run.py``: databases, role processes, drains, enqueues, pgbench.

Every measurement runs in a database created for it alone, with each library in processes of
its own (``benchmarks/role.py``). Every job of every measurement is checked to have run (or, for
enqueues, to be in the queue) exactly once.
"""

from __future__ import annotations

import json
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

from . import pgbench
from .subjects.registry import make_subject

ROOT = Path(__file__).resolve().parent.parent

#: The subject whose migrations make the pgbench references' databases.
PGBENCH_INSTALLER = "pgqueue/psycopg-sync"

Workers = list[tuple[subprocess.Popen[str], Path]]


def drain_timeout(n: int) -> float:
    """Seconds a drain of ``n`` jobs may take: generous for the slowest subject (~100/s at
    concurrency 1), so that only a stuck drain times out."""
    return max(120.0, n / 50)


class Harness:
    def __init__(self, admin_dsn: str, verbose: bool, *, until_empty: bool = True) -> None:
        self.admin_dsn = admin_dsn
        self.verbose = verbose
        #: take a drain's end from workers that end by themselves (``ends_when_empty``)
        self.until_empty = until_empty
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
        until_empty: bool = False,
    ) -> Workers:
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
            if until_empty:
                cmd.append("--until-empty")
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
            workers.append((proc, out))
        for proc, _ in workers:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"{subject} worker did not start (got {line!r})")
        return workers

    def stop_workers(self, workers: Workers) -> list[dict[str, Any]]:
        for proc, _ in workers:
            proc.send_signal(signal.SIGTERM)
        results = []
        for proc, out in workers:
            try:
                rc = proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise RuntimeError("a worker did not stop within 120 s of SIGTERM") from None
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
    def wait_emptied(subject: str, workers: Workers, timeout: float) -> float:
        """Wait until every worker says it found no job left (``empty <time>`` on its stdout,
        printed once its run returned, before it closes its connections); return the latest
        of those times."""
        deadline = time.monotonic() + timeout
        ends = []
        for proc, _ in workers:
            assert proc.stdout is not None
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"{subject}: a worker was not done after {timeout}s")
                ready, _, _ = select.select([proc.stdout], [], [], min(left, 1.0))
                if ready:
                    break
            line = proc.stdout.readline()
            if not line.startswith("empty "):
                raise RuntimeError(f"{subject} worker: expected 'empty <time>', got {line!r}")
            ends.append(float(line.split()[1]))
        return max(ends)

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

    def _check_count(self, subject: str, dsn: str, n: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            (left,) = conn.execute(make_subject(subject, dsn).remaining_sql).fetchone()  # type: ignore[misc]
        if left != n:
            raise RuntimeError(f"{subject}: expected {n} jobs waiting or running, found {left}")

    # -- measurements ----------------------------------------------------------------------

    def enqueue(self, subject: str, action: str, n: int, *args: str) -> dict[str, float]:
        """One enqueue measurement: ``action`` is a role's enqueue-* action (n jobs)."""
        db, dsn = self.fresh_db()
        try:
            self.role(subject, "install", dsn)
            seconds = self.role(subject, action, dsn, "-n", str(n), *args)["seconds"]
            self._check_count(subject, dsn, n)
            return {"jobs_per_s": n / seconds}
        finally:
            self.drop_db(db)

    def enqueue_single(self, subject: str, n: int) -> dict[str, float]:
        return self.enqueue(subject, "enqueue-single", n)

    def enqueue_bulk(self, subject: str, n: int) -> dict[str, float]:
        return self.enqueue(subject, "enqueue-bulk", n)

    def enqueue_batches(self, subject: str, n: int, batch: int) -> dict[str, float]:
        return self.enqueue(subject, "enqueue-batches", n, "--batch", str(batch))

    def enqueue_concurrent(self, subject: str, n: int, producers: int) -> dict[str, float]:
        return self.enqueue(subject, "enqueue-concurrent", n, "--producers", str(producers))

    def pgbench(
        self, variant: str, measurement: str, seconds: float, clients: int = 1
    ) -> dict[str, float]:
        """A pgbench reference (``benchmarks/pgbench.py``) in a fresh database migrated by
        pgqueue. ``variant``: ``pgbench`` (pgqueue's table as migrated), ``pgbench/no-notify``
        (its INSERT without the pg_notify), ``pgbench/pkey-only`` (every secondary index of
        the jobs table dropped), ``pgbench/drop-<index>`` (that one dropped, named without
        the ``pgqueue_`` prefix). ``measurement`` ``enqueue_bulk_1000`` runs the 1,000-row
        INSERT, any other pgqueue's single-job INSERT."""
        db, dsn = self.fresh_db()
        try:
            self.role(PGBENCH_INSTALLER, "install", dsn)
            if variant == "pgbench/pkey-only":
                pgbench.drop_indexes(dsn, pgbench.secondary_indexes(dsn))
            elif variant.startswith("pgbench/drop-"):
                pgbench.drop_indexes(dsn, ["pgqueue_" + variant.removeprefix("pgbench/drop-")])
            elif variant not in ("pgbench", "pgbench/no-notify"):
                raise SystemExit(f"unknown pgbench variant {variant!r}")
            if measurement == "enqueue_bulk_1000":
                script = pgbench.bulk_insert_script()
            else:
                script = pgbench.job_insert_script(notify=variant != "pgbench/no-notify")
            threads = min(clients, 2)
            return pgbench.run(
                dsn, script, clients=clients, threads=threads, seconds=seconds, tmp=self.tmp
            )
        finally:
            self.drop_db(db)

    def pgbench_indexes(self) -> list[str]:
        """The secondary indexes of pgqueue's jobs table (without the ``pgqueue_`` prefix), as
        this tree's migrations make them."""
        db, dsn = self.fresh_db()
        try:
            self.role(PGBENCH_INSTALLER, "install", dsn)
            return [i.removeprefix("pgqueue_") for i in pgbench.secondary_indexes(dsn)]
        finally:
            self.drop_db(db)

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
                # Every drain starts with no dirty pages: else the checkpoint that writes out
                # the setup (a million rows, for the claim cost) runs during the drain, and its
                # I/O and the full-page images it causes are charged to the subject.
                conn.execute("CHECKPOINT")
            # Following memory, the worker counts jobs in a preallocated array: a record per job
            # would grow by ~120 bytes a job and be measured as the library's.
            compact = n if sample_rss else 0
            # A worker that ends by itself once no job is left tells the drain's end; the
            # others' end is seen by polling their tables.
            until_empty = self.until_empty and make_subject(subject, dsn).ends_when_empty
            workers = self.start_workers(
                subject, dsn, processes, concurrency, sample_rss, compact, until_empty
            )
            # CPU used while draining, by the worker processes and by PostgreSQL (all of its
            # processes: the backends of the workers, and the rest, which idle meanwhile)
            cpu_before = sum(_proc_cpu(p.pid) for p, _ in workers), _postgres_cpu()
            try:
                if until_empty:
                    end = self.wait_emptied(subject, workers, drain_timeout(n))
                else:
                    end = self.wait_drained(subject, dsn, drain_timeout(n))
                cpu_after = sum(_proc_cpu(p.pid) for p, _ in workers), _postgres_cpu()
            finally:
                results = self.stop_workers(workers)
            records = self.check_once(results, range(n))
            if until_empty:
                self._check_count(subject, dsn, 0)
            start = min(t for _, t in records)
            result: dict[str, Any] = {
                "jobs_per_s": n / (end - start),
                "seconds": end - start,
                "worker_cpu_us_per_job": (cpu_after[0] - cpu_before[0]) / n * 1e6,
                "postgres_cpu_us_per_job": _cpu_since(cpu_before[1], cpu_after[1]) / n * 1e6,
                "end_from": "worker" if until_empty else "poll",
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
