"""The soak's samples: the jobs table's state every ``--sample`` seconds.

A :class:`Sampler` reads, on a connection and a pgqueue client of its own, the rows by status,
the sizes, ``pg_stat_user_tables``, the window's claim latency, ``pgqueue stats``' view and the
cost of one cleanup statement. It only reads (the cleanup it times is rolled back); the printed
line and the report are ``soak_report.py``'s.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from datetime import datetime
from typing import Any

import psycopg

import pgqueue

from .soak_load import QUEUE, Producer

JOBS = "pgqueue_jobs"  # the jobs table, in schema public (pgqueue's defaults)

TABLE_STATS = """
SELECT n_live_tup, n_dead_tup, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del,
    autovacuum_count, autoanalyze_count, vacuum_count, last_autovacuum, last_autoanalyze
FROM pg_stat_user_tables WHERE relid = %(t)s::regclass
"""
SIZES = """
SELECT pg_relation_size(%(t)s::regclass), pg_total_relation_size(%(t)s::regclass),
    pg_database_size(current_database()),
    (SELECT json_object_agg(indexrelname, pg_relation_size(indexrelid))
     FROM pg_stat_user_indexes WHERE relid = %(t)s::regclass)
"""
# Claim latency (enqueue to claim) and end-to-end time (enqueue to finish) of the jobs that
# finished in the window: retention keeps them longer than a sample's window.
LATENCY = """
SELECT count(*),
    percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY
        extract(epoch FROM locked_at - created_at)),
    max(extract(epoch FROM locked_at - created_at))::float8,
    percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY
        extract(epoch FROM finished_at - created_at))
FROM pgqueue_jobs
WHERE status = 'completed' AND finished_at > %(since)s AND finished_at <= %(until)s
"""


def _server_cpu(backend_pid: int) -> float | None:
    """CPU seconds of the whole local server so far: its postmaster and every child process
    (backends, WAL writer, checkpointer, autovacuum), from /proc; None when not local."""
    tick = os.sysconf("SC_CLK_TCK")

    def stat(pid: int | str) -> list[str] | None:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()
        except OSError:
            return None

    mine = stat(backend_pid)
    if mine is None:
        return None
    postmaster = int(mine[1])  # a backend's parent
    total = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat(entry)
            if fields and (int(entry) == postmaster or int(fields[1]) == postmaster):
                total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / tick


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


class Sampler:
    """Reads the table's state every sample, on a connection and a pgqueue client of its own."""

    def __init__(self, url: str, producer: Producer, config: pgqueue.RuntimeConfig) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.client = pgqueue.Client.connect(url, driver="psycopg")
        self.producer = producer
        self.config = config
        # the leader's cleanup statement as pgqueue renders it, timed once per sample
        self.conn.execute(f"PREPARE soak_cleanup AS {self.client._store._q.job_cleanup}")
        row = self.conn.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None
        self.server_t0: datetime = row[0]
        self.bound = self.server_t0
        self.last_enqueued = 0
        self.last_elapsed = 0.0

    def close(self) -> None:
        self.client.close()
        self.conn.close()

    def cleanup_probe(self) -> dict[str, Any]:
        """How many completed jobs are past retention, and what one cleanup statement costs.

        The leader's ``job_cleanup`` (a ``DELETE`` of up to ``cleanup_batch`` rows) runs under
        ``EXPLAIN ANALYZE`` in a transaction rolled back: its rows stay for the leader.
        """
        c = self.config
        row = self.conn.execute(
            f"SELECT count(*) FROM {JOBS} WHERE status = 'completed' "
            "AND finished_at < now() - %s * interval '1 second'",
            (c.completed_retention,),
        ).fetchone()
        plan: dict[str, Any] = {}
        with contextlib.suppress(psycopg.Rollback), self.conn.transaction():
            found = self.conn.execute(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE soak_cleanup("
                f"{float(c.completed_retention)}, {float(c.failed_retention)}, "
                f"{int(c.cleanup_batch)})"
            ).fetchone()
            plan = found[0][0] if found else {}
            raise psycopg.Rollback
        return {
            "past_retention": row[0] if row else 0,
            "ms": round(plan.get("Execution Time", 0.0), 2),
            "removed": plan.get("Plan", {}).get("Actual Rows"),
            "plan": _plan_shape(plan.get("Plan", {})),
        }

    def _since(self, at: datetime | None) -> float | None:
        return None if at is None else round((at - self.server_t0).total_seconds(), 1)

    def sample(self, elapsed: float) -> dict[str, Any]:
        """One sample: counts, sizes, table statistics, the window's latency, pgqueue stats."""
        t0 = time.perf_counter()
        enqueued = self.producer.enqueued
        calls = self.producer.take_calls()
        conn, t = self.conn, {"t": JOBS}
        now_row = conn.execute("SELECT clock_timestamp()").fetchone()
        assert now_row is not None
        until = now_row[0]
        rows: dict[str, int] = dict(
            conn.execute(f"SELECT status, count(*) FROM {JOBS} GROUP BY status").fetchall()
        )
        heap, total, db, indexes = conn.execute(SIZES, t).fetchone() or (0, 0, 0, {})
        # what the server spent so far: the run's cost per job is the difference of two samples
        wal_row = conn.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint, pg_backend_pid()"
        ).fetchone()
        assert wal_row is not None
        stats = conn.execute(TABLE_STATS, t).fetchone()
        assert stats is not None
        n, claim, claim_max, finish = conn.execute(
            LATENCY, {"since": self.bound, "until": until}
        ).fetchone() or (0, None, None, None)
        self.bound = until
        queue = next((q for q in self.client.queue_stats(QUEUE)), None)
        cleanup = self.cleanup_probe()
        unfinished = sum(rows.get(s, 0) for s in ("pending", "processing"))
        window = elapsed - self.last_elapsed
        sample = {
            "elapsed": round(elapsed, 1),
            "enqueued": enqueued,
            "completed": max(0, enqueued - unfinished - rows.get("failed", 0)),
            "rate": round((enqueued - self.last_enqueued) / window, 1) if window else None,
            "rows": {s: rows.get(s, 0) for s in ("pending", "processing", "completed", "failed")},
            "sizes": {"heap": heap, "total": total, "indexes": indexes or {}, "database": db},
            "table": {
                "n_live_tup": stats[0],
                "n_dead_tup": stats[1],
                "n_tup_ins": stats[2],
                "n_tup_upd": stats[3],
                "n_tup_hot_upd": stats[4],
                "n_tup_del": stats[5],
                "autovacuum_count": stats[6],
                "autoanalyze_count": stats[7],
                "vacuum_count": stats[8],
                "last_autovacuum": self._since(stats[9]),
                "last_autoanalyze": self._since(stats[10]),
            },
            "latency": {
                "jobs": n,
                "claim_ms": {
                    "p50": _ms(claim[0]) if claim else None,
                    "p95": _ms(claim[1]) if claim else None,
                    "p99": _ms(claim[2]) if claim else None,
                    "max": _ms(claim_max),
                },
                "finish_ms": {
                    "p50": _ms(finish[0]) if finish else None,
                    "p99": _ms(finish[1]) if finish else None,
                },
            },
            "stats": {
                "available": queue.counts.available if queue else 0,
                "processing": queue.counts.processing if queue else 0,
                "oldest_available_age": queue.oldest_available_age if queue else None,
            },
            "enqueue_ms": {
                "calls": len(calls),
                "median": _ms(statistics.median(calls)) if calls else None,
                "max": _ms(max(calls)) if calls else None,
            },
            "cleanup": cleanup,
            "server": {"wal_bytes": wal_row[0], "cpu_s": _server_cpu(wal_row[1])},
            "sample_ms": 0.0,
        }
        sample["sample_ms"] = _ms(time.perf_counter() - t0)
        self.last_enqueued, self.last_elapsed = enqueued, elapsed
        return sample


def _plan_shape(node: dict[str, Any]) -> str:
    """A plan as one line: each node's type (and relation or index), children in brackets."""
    if not node:
        return ""
    name = node.get("Node Type", "?")
    on = node.get("Index Name") or node.get("Relation Name")
    if node.get("Sort Method"):
        on = node["Sort Method"]
    head = f"{name} ({on})" if on else name
    children = [_plan_shape(c) for c in node.get("Plans", [])]
    return head + (f" [{', '.join(children)}]" if children else "")
