"""The plans of the admin benchmark's statements, for the results file and docs/schema.md.

Each statement is the shipped one (``queries_for``), PREPAREd on a session of its own and run
with the parameters the API sends for the benchmark's calls, as ``EXPLAIN (ANALYZE, BUFFERS)``:
once as PostgreSQL plans it for those values (a custom plan, what the first five executions of
a prepared statement get) and once as a generic plan (what a prepared statement may switch to
after five; ``plan_cache`` says which the clients' statements used). Each runs twice and the
second, warm, run is kept. purge's DELETE runs in a transaction that is rolled back.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg

import pgqueue
from pgqueue.job_filter import JobFilter
from pgqueue.queries import queries_for

PLAN_CACHE_SQL = (
    "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements "
    "WHERE generic_plans + custom_plans > 0"
)
PAGE = 51  # list_jobs asks for one row more than the limit, to know whether a next page exists
DAY = 86400.0


def _filter(**kwargs: Any) -> tuple[Any, ...]:
    return JobFilter.build(None, **kwargs).params()


def statements(
    conn: psycopg.Connection[Any], queue: str, args: dict[str, Any], failed_args: dict[str, Any]
) -> dict[str, tuple[str, tuple[Any, ...]]]:
    """Benchmark case (and docs-only extras) -> (statement name, its parameters)."""
    jobs = pgqueue.Settings().schema + "." + pgqueue.Settings().prefix + "jobs"
    row = conn.execute(
        f"SELECT id FROM {jobs} WHERE status = 'failed' ORDER BY id DESC OFFSET 49 LIMIT 1".encode()
    ).fetchone()
    cursor_id = row[0] if row else None
    finished = ["completed", "failed", "cancelled"]
    return {
        "failed_page": ("job_list_id_desc", (*_filter(status="failed"), None, None, PAGE)),
        "failed_next_page": (
            "job_list_id_desc",
            (*_filter(status="failed"), cursor_id, None, PAGE),
        ),
        "queue_stats": ("job_stats", (None, False)),
        "pending_by_due": (
            "job_list_due_asc",
            (*_filter(status="pending", queue=queue), None, None, PAGE),
        ),
        "pending_by_due_all": (
            "job_list_due_asc",
            (*_filter(status="pending"), None, None, PAGE),
        ),
        "args_in_queue": ("job_list_id_desc", (*_filter(queue=queue, args=args), None, None, PAGE)),
        "args_failed": (
            "job_list_id_desc",
            (*_filter(status="failed", queue=queue, args=failed_args), None, None, PAGE),
        ),
        "queue_stats_completed": ("job_stats", (None, True)),
        # not timed: what purge_jobs(older_than=timedelta(days=1)) runs, its dry run's count
        # and one batch of its DELETE
        "purge_count": ("job_purge_count", (DAY, None, finished)),
        "purge_batch": ("job_purge", (DAY, None, finished, 1000)),
    }


def _explain(conn: psycopg.Connection[Any], name: str, sql: str, params: tuple[Any, ...]) -> str:
    conn.execute(f"PREPARE {name} AS {sql}".encode())
    marks = ", ".join(["%s"] * len(params))
    plan = ""
    for _ in range(2):  # the second run, warm, is kept
        with conn.transaction(force_rollback=True):
            rows = conn.execute(
                f"EXPLAIN (ANALYZE, BUFFERS) EXECUTE {name}({marks})".encode(), params
            ).fetchall()
        plan = "\n".join(r[0] for r in rows)
    conn.execute(f"DEALLOCATE {name}".encode())
    return plan


def explain_all(
    dsn: str, queue: str, args: dict[str, Any], failed_args: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """Case -> statement name, parameters, custom plan and generic plan (EXPLAIN text)."""
    q = queries_for(pgqueue.Settings())
    out: dict[str, dict[str, Any]] = {}
    with psycopg.connect(dsn, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
        for case, (name, params) in statements(conn, queue, args, failed_args).items():
            sql = getattr(q, name)
            entry: dict[str, Any] = {
                "statement": name,
                "params": json.loads(json.dumps(params, default=str)),
            }
            for mode in ("force_custom_plan", "force_generic_plan"):
                conn.execute(f"SET plan_cache_mode = {mode}".encode())
                entry[mode.split("_")[1]] = _explain(conn, f"bench_{case}", sql, params)
            conn.execute(b"RESET plan_cache_mode")
            out[case] = entry
    return out


def plan_cache(rows: list[Any]) -> dict[str, dict[str, int]]:
    """Statement name -> how many generic and custom plans a session's prepared copy used.

    ``rows``: the result of ``PLAN_CACHE_SQL`` on the session; statements that are not
    pgqueue's admin statements are left out.
    """
    q = queries_for(pgqueue.Settings())
    by_text = {
        getattr(q, name).strip(): name
        for name in (
            "job_list_id_desc",
            "job_list_id_asc",
            "job_list_due_asc",
            "job_list_due_desc",
            "job_stats",
            "queue_list",
            "instance_list",
            "job_running_list",
        )
    }
    out: dict[str, dict[str, int]] = {}
    for statement, generic, custom in rows:
        name = by_text.get(str(statement).strip())
        if name is not None:
            entry = out.setdefault(name, {"generic": 0, "custom": 0})
            entry["generic"] += int(generic)
            entry["custom"] += int(custom)
    return out
