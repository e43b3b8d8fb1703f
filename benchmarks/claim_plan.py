"""The claim with and without a history: ``python -m benchmarks.claim_plan`` (about a minute).

SPEC §10 holds a claim on a table with 1,000,000 finished jobs within 1.2 times of one on an empty
history. This looks at the claim statement alone, outside any worker: for each history size it
creates a database, writes the finished jobs and 20,000 pending ones with ``INSERT ... SELECT``,
runs ``VACUUM ANALYZE`` and a ``CHECKPOINT``, registers an instance, prepares ``job_claim`` as
pgqueue renders it, runs it 300 times (10 jobs a claim; the first 50 not counted, so that the
plan has settled on its generic form) and keeps the median round trip, then one more under
``EXPLAIN (ANALYZE, BUFFERS)``. Results, plans included:
``benchmarks/results/<time>-claim-plan.json``.
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import psycopg

import pgqueue

from .report import ROOT
from .scratch import ADMIN_DSN, commit_stamp, scratch_database

RESULTS = ROOT / "benchmarks" / "results"
HISTORIES = (0, 1_000_000)
PENDING = 20_000


def measure(admin_dsn: str, history: int) -> dict[str, Any]:
    """Claim timings and the plan on a fresh database with ``history`` finished jobs."""
    with scratch_database(admin_dsn) as dsn:
        with pgqueue.Client.connect(dsn, driver="psycopg") as client:
            client.migrate()
            claim_sql = client._store._q.job_claim
        with psycopg.connect(dsn, autocommit=True) as conn:
            if history:
                conn.execute(
                    "INSERT INTO pgqueue_jobs (kind, queue, payload, status, attempts, "
                    "finished_at) SELECT 'bench.noop', 'default', jsonb_build_object('i', g), "
                    "'completed', 1, now() - interval '1 minute' FROM generate_series(1, %s) g",
                    (history,),
                )
            conn.execute(
                "INSERT INTO pgqueue_jobs (kind, queue, payload) SELECT 'bench.noop', 'default', "
                "jsonb_build_object('i', g) FROM generate_series(1, %s) g",
                (PENDING,),
            )
            conn.execute("VACUUM ANALYZE pgqueue_jobs")
            conn.execute("CHECKPOINT")
            instance = uuid.uuid4()
            conn.execute(
                "INSERT INTO pgqueue_instances (instance_id, hostname, pid, queues, kinds) "
                "VALUES (%s, 'bench', 1, '{\"default\": 10}', ARRAY['bench.noop'])",
                (instance,),
            )
            conn.execute(f"PREPARE claim AS {claim_sql}")

            def claim(explain: bool = False) -> Any:
                # EXECUTE takes no bind parameters: the values are literals of ours
                prefix = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " if explain else ""
                return conn.execute(
                    f"{prefix}EXECUTE claim('default', 'bench.noop', 10, '{instance}', "
                    f"'{uuid.uuid4()}', 'bench')"
                ).fetchall()

            times = []
            for _ in range(300):
                t0 = time.perf_counter()
                claim()
                times.append((time.perf_counter() - t0) * 1e6)
            plan = claim(explain=True)[0][0][0]
            size = conn.execute("SELECT pg_total_relation_size('pgqueue_jobs')").fetchone()
        top = plan["Plan"]
        return {
            "history": history,
            "claim_round_trip_us_median": statistics.median(times[50:]),
            "execution_ms": plan["Execution Time"],
            "planning_ms": plan.get("Planning Time"),
            "shared_hit_blocks": top.get("Shared Hit Blocks"),
            "shared_read_blocks": top.get("Shared Read Blocks"),
            "table_mb": size[0] / 1e6 if size else None,
            "plan": plan,
        }


def main() -> None:
    """Measure each history size, print the comparison, write the results file."""
    runs = [measure(ADMIN_DSN, h) for h in HISTORIES]
    for r in runs:
        print(
            f"{r['history']:>9,} finished rows ({r['table_mb']:.0f} MB): claim of 10 "
            f"{r['claim_round_trip_us_median']:.0f} µs median round trip, executed in "
            f"{r['execution_ms']:.3f} ms, {r['shared_hit_blocks']} buffers hit, "
            f"{r['shared_read_blocks']} read"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}-claim-plan.json"
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": commit_stamp(),
        "pending": PENDING,
    }
    path.write_text(json.dumps({"meta": meta, "runs": runs}, indent=1) + "\n")
    print(f"results: {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
