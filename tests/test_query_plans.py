"""Query plans of the hot statements, as pgqueue really runs them: prepared, on a busy table.

Drivers prepare ``job_claim``, ``job_finish_many`` and the leader's ``job_cleanup`` server-side
(asyncpg always, psycopg after a few executions), and PostgreSQL then plans them either with the
parameter values (a custom plan) or once for all values (a generic plan, which guesses: ``LIMIT
$3`` is taken to mean 10 % of the matching rows, an array parameter 10 elements). Either way each
statement must find its rows through an index (the claim index, the finished index, the primary
key), never by reading the whole jobs table: a generic plan that hashed the whole table once made
every claim cost as much as the table. The cleanup must also read its index in order and stop at
its limit: sorting every row past retention made each call cost as much as the backlog.

The statements are the shipped ones (``queries_for(settings)``), PREPAREd on a connection of the
test's own; the plan does not depend on the driver. The checker is itself tested: it rejects
the statements' earlier forms, which had those plans.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql

import pgqueue
from pgqueue.execution import ClaimedJob, Outcome
from pgqueue.queries import queries_for
from pgqueue.store_codec import claim_kinds
from pgqueue.store_codec import finish_params as store_finish_params

pytestmark = pytest.mark.timeout(120)

# A busy queue table: a day of finished jobs, a backlog, and the jobs running now.
FINISHED = 20_000
PENDING = 5_000
PROCESSING = 1_000
CLAIM_SLOTS = 10  # the runtime asks for its free slots
BATCH = 200  # outcomes one job_finish_many records (the runtime flushes up to 1,000)
# Past retention: completed jobs a day old and more, failed ones a week old and more (the default
# retentions), and failed jobs in between, which the cleanup passes over.
EXPIRED = 10_000
FAILED_KEPT = 1_000
FAILED_EXPIRED = 500
DAY = 86_400.0
CLEANUP_BATCH = 1_000  # RuntimeConfig.cleanup_batch's default

PLAN_MODES = ["force_generic_plan", "force_custom_plan"]


@pytest.fixture
def busy(database_url: str, settings: pgqueue.Settings) -> Iterator[psycopg.Connection[Any]]:
    """A session on a migrated schema whose jobs table holds a realistic mix (ANALYZEd)."""
    with pgqueue.Client.connect(database_url, driver="psycopg", settings=settings) as client:
        client.migrate()
    q = queries_for(settings)
    jobs = q.table("jobs")
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {jobs} (kind, queue, payload, status, attempts, finished_at) "
            f"SELECT 'k' || (i % 3), 'default', '{{}}', 'completed', 1, now() "
            f"FROM generate_series(1, {FINISHED}) AS i"
        )
        conn.execute(
            f"INSERT INTO {jobs} (kind, queue, payload) "
            f"SELECT 'k' || (i % 3), CASE WHEN i % 5 = 0 THEN 'other' ELSE 'default' END, '{{}}' "
            f"FROM generate_series(1, {PENDING}) AS i"
        )
        conn.execute(
            f"INSERT INTO {jobs} (kind, queue, payload, status, attempts, lease_token, "
            "instance_id, worker_id, locked_at) "
            "SELECT 'k0', 'default', '{}', 'processing', 1, gen_random_uuid(), "
            f"gen_random_uuid(), 'w', now() FROM generate_series(1, {PROCESSING})"
        )
        conn.execute(f"ANALYZE {jobs}")
        yield conn


@pytest.fixture
def expired(busy: psycopg.Connection[Any], settings: pgqueue.Settings) -> psycopg.Connection[Any]:
    """The busy table with a backlog of finished jobs past retention (ANALYZEd)."""
    jobs = queries_for(settings).table("jobs")
    for status, count, oldest, newest in (
        ("completed", EXPIRED, 2 * DAY, DAY),
        ("failed", FAILED_KEPT, 3 * DAY, 2 * DAY),
        ("failed", FAILED_EXPIRED, 9 * DAY, 8 * DAY),
    ):
        busy.execute(
            f"INSERT INTO {jobs} (kind, queue, payload, status, attempts, finished_at) "
            f"SELECT 'k0', 'default', '{{}}', '{status}', 1, now() - make_interval(secs => "
            f"{newest} + ({oldest} - {newest}) * i / {count}) FROM generate_series(1, {count}) i"
        )
    busy.execute(f"ANALYZE {jobs}")
    return busy


def distinct_parameters(statement: str) -> int:
    """How many parameters ($1 .. $n) the statement takes."""
    return len(set(re.findall(r"\$(\d+)", statement)))


def prepare(conn: psycopg.Connection[Any], name: str, statement: str) -> list[str]:
    """PREPARE ``statement`` server-side; return its parameter types as PostgreSQL infers them."""
    conn.execute(f"PREPARE {name} AS {statement}")
    types = conn.execute(
        "SELECT parameter_types::text[] FROM pg_prepared_statements WHERE name = %s", (name,)
    ).fetchone()
    assert types is not None
    assert len(types[0]) == distinct_parameters(statement), types
    return list(types[0])


def explain(conn: psycopg.Connection[Any], name: str, params: list[Any]) -> dict[str, Any]:
    """``EXPLAIN EXECUTE name(params)`` as a JSON plan (values as literals, or SQL as given)."""
    args = sql.SQL(", ").join(
        p if isinstance(p, sql.Composable) else sql.Literal(p) for p in params
    )
    query = sql.SQL("EXPLAIN (FORMAT JSON) EXECUTE {}({})").format(sql.Identifier(name), args)
    row = conn.execute(query).fetchone()
    assert row is not None
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    # and PostgreSQL made the kind of plan that plan_cache_mode asks for
    mode = conn.execute("SHOW plan_cache_mode").fetchone()
    counts = conn.execute(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = %s", (name,)
    ).fetchone()
    assert mode is not None
    assert counts is not None
    assert counts == ((1, 0) if mode[0] == "force_generic_plan" else (0, 1)), (mode, counts)
    return plan[0]["Plan"]  # type: ignore[no-any-return]


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def jobs_scans(plan: dict[str, Any], settings: pgqueue.Settings) -> list[dict[str, Any]]:
    """Every node of the plan that reads the jobs table (the UPDATE's own node aside)."""
    return [
        n
        for n in nodes(plan)
        if n.get("Relation Name") == f"{settings.prefix}jobs" and n["Node Type"] != "ModifyTable"
    ]


def check_index_access(
    plan: dict[str, Any], settings: pgqueue.Settings, allowed: set[str]
) -> list[dict[str, Any]]:
    """Fail unless every read of the jobs table is an index scan with a condition on one of the
    ``allowed`` indexes (no Seq Scan, no bitmap over a whole partial index, nothing hashed or
    sorted whole); return those scans."""
    scans = jobs_scans(plan, settings)
    assert scans, "the plan never reads the jobs table"
    for scan in scans:
        described = (scan["Node Type"], scan.get("Index Name"), scan.get("Index Cond"))
        assert scan["Node Type"] in ("Index Scan", "Index Only Scan"), (
            f"the jobs table is read by {described}, not by an index lookup:\n"
            + json.dumps(plan, indent=1)
        )
        assert scan.get("Index Name") in {settings.prefix + i for i in allowed}, described
        assert scan.get("Index Cond"), described
    return scans


def claim_params(conn: psycopg.Connection[Any], settings: pgqueue.Settings) -> list[Any]:
    """What the runtime sends: queue, kinds, free slots, instance, lease, worker id."""
    instance = uuid.uuid4()
    conn.execute(
        f"INSERT INTO {queries_for(settings).table('instances')} (instance_id) VALUES (%s)",
        (instance,),
    )
    kinds = claim_kinds(["k0", "k1"])
    return ["default", kinds, CLAIM_SLOTS, instance, uuid.uuid4(), "host:1:default"]


def finish_params(conn: psycopg.Connection[Any], settings: pgqueue.Settings) -> list[Any]:
    """A batch of BATCH 'complete' outcomes for running jobs, encoded as the store encodes it.

    The job ids and their leases are real. A plan depends only on the parameter's type and,
    for a custom plan, on the ids.
    """
    rows = conn.execute(
        f"SELECT id, lease_token FROM {queries_for(settings).table('jobs')} "
        f"WHERE status = 'processing' ORDER BY id LIMIT {BATCH}"
    ).fetchall()
    batch = [
        (
            ClaimedJob(
                id=job_id,
                kind="k0",
                queue="default",
                payload_text="{}",
                attempt=1,
                max_attempts=25,
                scheduled_for=datetime.now(UTC),
                priority=0,
                lease=lease,
                duration=0.0,
            ),
            Outcome("complete"),
        )
        for job_id, lease in rows
    ]
    return list(store_finish_params(batch))


def claim_plan(
    conn: psycopg.Connection[Any], settings: pgqueue.Settings, statement: str, mode: str
) -> dict[str, Any]:
    conn.execute(f"SET plan_cache_mode = {mode}")
    types = prepare(conn, "claim", statement)
    assert types[:3] == ["text", "text", "bigint"], types
    return explain(conn, "claim", claim_params(conn, settings))


def finish_plan(
    conn: psycopg.Connection[Any], settings: pgqueue.Settings, statement: str, mode: str
) -> dict[str, Any]:
    conn.execute(f"SET plan_cache_mode = {mode}")
    assert prepare(conn, "finish", statement) == ["json"]
    return explain(conn, "finish", finish_params(conn, settings))


def cleanup_plan(
    conn: psycopg.Connection[Any], statement: str, mode: str, name: str = "cleanup"
) -> dict[str, Any]:
    conn.execute(f"SET plan_cache_mode = {mode}")
    types = prepare(conn, name, statement)
    assert types == ["double precision", "double precision", "bigint"], types
    return explain(conn, name, [DAY, 7 * DAY, CLEANUP_BATCH])


def check_claim_plan(plan: dict[str, Any], settings: pgqueue.Settings, mode: str) -> None:
    scans = check_index_access(plan, settings, {"jobs_claim_idx", "jobs_pending_idx", "jobs_pkey"})
    by_index = {s["Index Name"].removeprefix(settings.prefix): s for s in scans}
    # the due jobs in claim order, straight from the claim index; the claimed rows by id
    claim = by_index.get("jobs_claim_idx")
    assert claim is not None, [s.get("Index Name") for s in scans]
    assert "jobs_pkey" in by_index, [s.get("Index Name") for s in scans]
    assert "(id = " in by_index["jobs_pkey"]["Index Cond"], by_index["jobs_pkey"]
    # a generic plan knows no values, a custom one does
    literal = "'default'" in claim["Index Cond"]
    assert literal == (mode == "force_custom_plan"), claim["Index Cond"]


def check_finish_plan(plan: dict[str, Any], settings: pgqueue.Settings) -> None:
    for scan in check_index_access(plan, settings, {"jobs_pkey"}):
        assert "(id = " in scan["Index Cond"], scan


def check_cleanup_plan(plan: dict[str, Any], settings: pgqueue.Settings) -> None:
    scans = check_index_access(plan, settings, {"jobs_finished_idx", "jobs_pkey"})
    by_index = {s["Index Name"].removeprefix(settings.prefix): s for s in scans}
    # the rows past retention oldest first, straight from the finished index, up to the limit,
    # never all of them sorted; then the rows to delete by id
    finished = by_index.get("jobs_finished_idx")
    assert finished is not None, [s.get("Index Name") for s in scans]
    assert finished["Scan Direction"] == "Forward", finished
    assert "finished_at <" in finished["Index Cond"], finished
    sorts = [n["Node Type"] for n in nodes(plan) if "Sort" in n["Node Type"]]
    assert not sorts, f"the plan sorts ({sorts}):\n" + json.dumps(plan, indent=1)
    assert "jobs_pkey" in by_index, [s.get("Index Name") for s in scans]
    assert "(id = " in by_index["jobs_pkey"]["Index Cond"], by_index["jobs_pkey"]


@pytest.mark.parametrize("mode", PLAN_MODES)
def test_claim_finds_rows_by_the_claim_index_and_primary_key(
    busy: psycopg.Connection[Any], settings: pgqueue.Settings, mode: str
) -> None:
    statement = queries_for(settings).job_claim
    check_claim_plan(claim_plan(busy, settings, statement, mode), settings, mode)


@pytest.mark.parametrize("mode", PLAN_MODES)
def test_finish_many_finds_rows_by_primary_key(
    busy: psycopg.Connection[Any], settings: pgqueue.Settings, mode: str
) -> None:
    statement = queries_for(settings).job_finish_many
    check_finish_plan(finish_plan(busy, settings, statement, mode), settings)


@pytest.mark.parametrize("mode", PLAN_MODES)
def test_cleanup_reads_the_finished_index_in_order_and_deletes_by_primary_key(
    expired: psycopg.Connection[Any], settings: pgqueue.Settings, mode: str
) -> None:
    statement = queries_for(settings).job_cleanup
    check_cleanup_plan(cleanup_plan(expired, statement, mode), settings)


# -- the checks can fail: the statements' earlier forms, whose plans read the whole table ------

OLD_CLAIM_UPDATE = "FROM next\n    WHERE j.id = next.id"
OLD_FINISH_WHERE = "WHERE j.id = o.id AND j.lease_token = o.lease AND j.status = 'processing'"


def earlier_form(statement: str, pattern: str, old: str) -> str:
    """``statement`` with the part matching ``pattern`` put back as it was."""
    changed, count = re.subn(pattern, lambda _: old, statement)
    if count != 1:
        pytest.fail(
            "the statement no longer has the form this self-test rewrites "
            f"(/{pattern}/): update the pattern to the statement's new row lookup"
        )
    return changed


def test_claim_check_rejects_the_join_that_hashed_the_whole_table(
    busy: psycopg.Connection[Any], settings: pgqueue.Settings
) -> None:
    # The claim's update joined the locked ids ("FROM next WHERE j.id = next.id"); a generic
    # plan took LIMIT $3 for 10 % of the backlog and hash-joined the whole jobs table.
    old = earlier_form(
        queries_for(settings).job_claim,
        r"WHERE j\.id = ANY\(ARRAY\(SELECT id FROM next\)\)",
        OLD_CLAIM_UPDATE,
    )
    plan = claim_plan(busy, settings, old, "force_generic_plan")
    with pytest.raises(AssertionError, match="not by an index lookup"):
        check_claim_plan(plan, settings, "force_generic_plan")
    assert any(n["Node Type"] == "Hash Join" for n in nodes(plan))


def test_finish_check_rejects_the_status_test_that_read_every_running_job(
    busy: psycopg.Connection[Any], settings: pgqueue.Settings
) -> None:
    # The outcome write found rows by "j.id = o.id ... AND j.status = 'processing'": a custom
    # plan for a batch read every running job through the processing index, and hashed them.
    old = earlier_form(
        queries_for(settings).job_finish_many,
        r"WHERE j\.id = ANY\(ARRAY\(SELECT id FROM o\)\) "
        r"AND j\.id = o\.id AND j\.lease_token = o\.lease",
        OLD_FINISH_WHERE,
    )
    plan = finish_plan(busy, settings, old, "force_custom_plan")
    with pytest.raises(AssertionError, match="not by an index lookup"):
        check_finish_plan(plan, settings)


OLD_CLEANUP_FILTER = (
    "WHERE (status = 'completed' AND finished_at < now() - $1::float8 * interval '1 second')\n"
    "       OR (status IN ('failed', 'cancelled')\n"
    "           AND finished_at < now() - $2::float8 * interval '1 second')\n"
    "    ORDER BY"
)
OLD_CLEANUP_DELETE = "WHERE id IN (\n    SELECT id FROM"


@pytest.mark.parametrize("mode", PLAN_MODES)
def test_cleanup_check_rejects_the_or_that_sorted_every_row_past_retention(
    expired: psycopg.Connection[Any], settings: pgqueue.Settings, mode: str
) -> None:
    # The cleanup OR-ed the two retentions: PostgreSQL read every row past retention (through
    # two index ranges, or the whole table) and sorted them, on every call.
    or_ed = earlier_form(
        queries_for(settings).job_cleanup,
        r"(?s)WHERE status IN \('completed', 'failed', 'cancelled'\)\n.*?END\n    ORDER BY",
        OLD_CLEANUP_FILTER,
    )
    plan = cleanup_plan(expired, or_ed, mode)
    with pytest.raises(AssertionError):
        check_cleanup_plan(plan, settings)
    assert any("Sort" in n["Node Type"] for n in nodes(plan))
    # And it found the rows to delete by "id IN (subquery)": a generic plan took LIMIT $3 for a
    # tenth of the table, and hash-joined the whole table to the ids.
    old = earlier_form(or_ed, r"WHERE id = ANY\(ARRAY\(\n    SELECT id FROM", OLD_CLEANUP_DELETE)
    old = earlier_form(old, r"\)\)\nRETURNING", ")\nRETURNING")
    plan = cleanup_plan(expired, old, "force_generic_plan", name="old_cleanup")
    with pytest.raises(AssertionError, match="not by an index lookup"):
        check_cleanup_plan(plan, settings)
    assert any(n["Node Type"] == "Hash Join" for n in nodes(plan))
