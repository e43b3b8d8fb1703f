"""Enqueueing: add_job, add_jobs, add_job_with_tx, options and bad input, on every driver mode."""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

import pgqueue
from tests._async.conftest import Native

pytestmark = pytest.mark.timeout(120)


@dataclass
class SendEmail(pgqueue.Worker):
    to: str
    subject: str = ""
    tags: list[str] = field(default_factory=list)

    def process(self, ctx: pgqueue.JobContext) -> None:
        pass


@dataclass
class Resize(pgqueue.Worker):
    kind = "images.resize"
    job_options = pgqueue.JobOptions(queue="images", priority=5, max_attempts=3)
    path: str
    width: int = 100

    async def process(self, ctx: pgqueue.JobContext) -> None:
        pass


@dataclass
class Anything(pgqueue.Worker):
    value: Any = None

    def process(self, ctx: pgqueue.JobContext) -> None:
        pass


def job_row(db, jobs_table: str, job_id: int) -> dict[str, Any]:
    cols = [
        "kind",
        "queue",
        "payload",
        "status",
        "priority",
        "attempts",
        "max_attempts",
        "key",
        "options",
        "scheduled_for - created_at",
    ]
    row = db.rows(f"SELECT {', '.join(cols)} FROM {jobs_table} WHERE id = $1", (job_id,))[0]
    return dict(zip(cols, row, strict=True))


async def test_add_job_stores_the_job(client: pgqueue.AsyncClient, db, jobs_table: str) -> None:
    handle = await client.add_job(SendEmail(to="a@b.c", subject="Hi", tags=["x"]))
    assert isinstance(handle, pgqueue.JobHandle)
    assert (handle.kind, handle.queue) == ("send_email", "default")
    row = job_row(db, jobs_table, handle.id)
    assert row["payload"] == {"to": "a@b.c", "subject": "Hi", "tags": ["x"]}
    assert (row["status"], row["priority"], row["attempts"], row["max_attempts"]) == (
        "pending",
        0,
        0,
        25,
    )
    assert row["scheduled_for - created_at"] == timedelta(0)
    assert handle.scheduled_for == db.value(
        f"SELECT scheduled_for FROM {jobs_table} WHERE id = $1", (handle.id,)
    )


async def test_options_layers_merge_without_blanking(
    client: pgqueue.AsyncClient, db, jobs_table: str
) -> None:
    # class options apply
    h = await client.add_job(Resize(path="/a.png"))
    row = job_row(db, jobs_table, h.id)
    assert (row["kind"], row["queue"], row["priority"], row["max_attempts"]) == (
        "images.resize",
        "images",
        5,
        3,
    )
    # a partial JobOptions overrides only what it sets: the class queue survives
    h = await client.add_job(Resize(path="/b.png"), options=pgqueue.JobOptions(priority=9))
    row = job_row(db, jobs_table, h.id)
    assert (row["queue"], row["priority"], row["max_attempts"]) == ("images", 9, 3)
    # keywords beat the options object
    h = await client.add_job(
        Resize(path="/c.png"),
        options=pgqueue.JobOptions(queue="bulk", priority=1),
        queue="urgent",
    )
    row = job_row(db, jobs_table, h.id)
    assert (row["queue"], row["priority"]) == ("urgent", 1)


async def test_client_defaults_apply_under_job_options(
    driver: pgqueue.AsyncDriver, schema: str, db
) -> None:
    settings = pgqueue.Settings(
        schema=schema, job_defaults=pgqueue.JobOptions(queue="mail", max_attempts=7)
    )
    client = pgqueue.AsyncClient(driver, settings=settings)
    await client.migrate()
    table = f'"{schema}"."pgqueue_jobs"'
    h = await client.add_job(SendEmail(to="x"))
    assert job_row(db, table, h.id)["queue"] == "mail"
    assert job_row(db, table, h.id)["max_attempts"] == 7
    h = await client.add_job(SendEmail(to="x"), options=pgqueue.JobOptions(priority=2))
    assert job_row(db, table, h.id)["queue"] == "mail"
    # the job class's options beat the client's defaults
    h = await client.add_job(Resize(path="p"))
    assert job_row(db, table, h.id)["queue"] == "images"


async def test_run_in_uses_the_database_clock(
    client: pgqueue.AsyncClient, db, jobs_table: str
) -> None:
    h = await client.add_job(SendEmail(to="x"), run_in=timedelta(minutes=5))
    assert job_row(db, jobs_table, h.id)["scheduled_for - created_at"] == timedelta(minutes=5)


async def test_run_at_is_stored_as_given(client: pgqueue.AsyncClient, db, jobs_table: str) -> None:
    when = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    h = await client.add_job(SendEmail(to="x"), run_at=when)
    assert h.scheduled_for == when
    assert db.value(f"SELECT scheduled_for FROM {jobs_table} WHERE id = $1", (h.id,)) == when


async def test_job_id_is_stored_and_conflicts(
    client: pgqueue.AsyncClient, db, jobs_table: str
) -> None:
    h = await client.add_job(SendEmail(to="x"), job_id="order-42")
    assert h.job_id == "order-42"
    assert job_row(db, jobs_table, h.id)["key"] == "order-42"
    with pytest.raises(pgqueue.JobIdConflict):
        await client.add_job(SendEmail(to="y"), job_id="order-42")
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == 1


async def test_timeout_is_kept_for_the_worker(
    client: pgqueue.AsyncClient, db, jobs_table: str
) -> None:
    h = await client.add_job(SendEmail(to="x"), timeout=timedelta(seconds=30))
    assert job_row(db, jobs_table, h.id)["options"] == {"timeout": 30.0}


async def test_add_jobs_bulk_keeps_order_and_per_item_options(
    client: pgqueue.AsyncClient, db, jobs_table: str
) -> None:
    handles = await client.add_jobs(
        [
            SendEmail(to="1"),
            (SendEmail(to="2"), pgqueue.JobOptions(queue="other", priority=3)),
            Resize(path="3"),
            (SendEmail(to="4"), pgqueue.JobOptions(run_in=timedelta(hours=1))),
        ],
        options=pgqueue.JobOptions(priority=1),
    )
    assert [h.queue for h in handles] == ["default", "other", "images", "default"]
    rows = db.rows(
        f"SELECT id, payload->>'to', payload->>'path', queue, priority, "
        f"scheduled_for - created_at FROM {jobs_table} ORDER BY id"
    )
    assert [r[0] for r in rows] == [h.id for h in handles]
    assert [(r[1] or r[2], r[3], r[4]) for r in rows] == [
        ("1", "default", 1),
        ("2", "other", 3),
        ("3", "images", 1),
        ("4", "default", 1),
    ]
    assert rows[3][5] == timedelta(hours=1)


async def test_add_jobs_empty(client: pgqueue.AsyncClient) -> None:
    assert await client.add_jobs([]) == []


@pytest.mark.slow
async def test_add_jobs_100k_in_one_call(client: pgqueue.AsyncClient, db, jobs_table: str) -> None:
    n = 100_000
    handles = await client.add_jobs(SendEmail(to=str(i)) for i in range(n))
    assert len(handles) == n
    assert len({h.id for h in handles}) == n
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == n
    # handles line up with rows: spot-check the first, a middle one and the last
    for i in (0, n // 2, n - 1):
        got = db.value(f"SELECT payload->>'to' FROM {jobs_table} WHERE id = $1", (handles[i].id,))
        assert got == str(i)


async def test_add_jobs_is_all_or_nothing(client: pgqueue.AsyncClient, db, jobs_table: str) -> None:
    jobs: list[Any] = [SendEmail(to=str(i)) for i in range(10)]
    jobs.append(Anything(value={1, 2}))  # not JSON: refused before anything is sent
    with pytest.raises(pgqueue.JobSerializationError):
        await client.add_jobs(jobs)
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == 0


async def test_get_job_and_job_counts(client: pgqueue.AsyncClient, db, jobs_table: str) -> None:
    # neither needs a worker nor a registry
    assert await client.job_counts() == {}
    assert await client.get_job(10**12) is None  # no such job: None, not an error
    a = await client.add_job(SendEmail(to="a", subject="s", tags=["t"]), job_id="k-a", priority=3)
    b = await client.add_job(Resize(path="p"), run_in=timedelta(hours=1))
    c = await client.add_job(SendEmail(to="c"), queue="other")
    assert await client.cancel_job(b.id) == "pending"
    db.rows(
        f"UPDATE {jobs_table} SET status = 'completed', finished_at = now() WHERE id = $1", (c.id,)
    )
    info = await client.get_job(a.id)
    assert info is not None
    assert (info.id, info.kind, info.queue, info.payload, info.status) == (
        a.id,
        "send_email",
        "default",
        {"to": "a", "subject": "s", "tags": ["t"]},
        "pending",
    )
    assert (info.priority, info.attempts, info.max_attempts, info.job_id) == (3, 0, 25, "k-a")
    assert (info.finished_at, info.last_error, info.errors) == (None, None, [])
    assert info.scheduled_for == a.scheduled_for
    assert info.created_at == db.value(
        f"SELECT created_at FROM {jobs_table} WHERE id = $1", (a.id,)
    )
    cancelled = await client.get_job(b.id)
    assert cancelled is not None
    assert (cancelled.kind, cancelled.queue, cancelled.status) == (
        "images.resize",
        "images",
        "cancelled",
    )
    assert cancelled.last_error == "cancelled before it ran"
    assert cancelled.finished_at is not None
    # every queue and kind; only the statuses that have jobs
    assert await client.job_counts() == {"pending": 1, "cancelled": 1, "completed": 1}
    db.rows(f"DELETE FROM {jobs_table} WHERE id = $1", (a.id,))  # as retention would
    assert await client.get_job(a.id) is None
    assert await client.job_counts() == {"cancelled": 1, "completed": 1}


# -- in the caller's transaction --------------------------------------------------------------


async def test_add_job_with_tx_commit_makes_it_visible(
    client: pgqueue.AsyncClient, native_tx: Native, db, jobs_table: str
) -> None:
    # each driver mode with its own library's transaction object (test_transactions.py mixes)
    await native_tx.begin()
    h = await client.add_job_with_tx(native_tx.obj, SendEmail(to="tx"))
    hs = await client.add_jobs_with_tx(native_tx.obj, [SendEmail(to="b1"), SendEmail(to="b2")])
    # invisible to everyone else until the caller commits
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == 0
    await native_tx.commit()
    rows = db.rows(f"SELECT id, payload->>'to' FROM {jobs_table} ORDER BY id")
    assert rows == [(h.id, "tx"), (hs[0].id, "b1"), (hs[1].id, "b2")]


async def test_add_job_with_tx_rollback_leaves_nothing(
    client: pgqueue.AsyncClient, native_tx: Native, db, jobs_table: str
) -> None:
    await native_tx.begin()
    await client.add_job_with_tx(native_tx.obj, SendEmail(to="tx"))
    await client.add_jobs_with_tx(native_tx.obj, [SendEmail(to=str(i)) for i in range(3)])
    await native_tx.rollback()
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == 0


async def test_add_job_with_tx_never_commits_for_the_caller(
    client: pgqueue.AsyncClient, native_tx: Native, db, jobs_table: str
) -> None:
    if not native_tx.has_implicit_transactions:
        # asyncpg has none: outside a transaction block the insert would commit at once
        with pytest.raises(pgqueue.ConfigurationError, match="no open transaction"):
            await client.add_job_with_tx(native_tx.obj, SendEmail(to="x"))
        assert db.value(f"SELECT count(*) FROM {jobs_table}") == 0
        return
    # the implicit transaction a statement opens (psycopg with autocommit off; SQLAlchemy 2)
    await native_tx.begin_implicitly()
    await client.add_job_with_tx(native_tx.obj, SendEmail(to="x"))
    await client.add_jobs_with_tx(native_tx.obj, [SendEmail(to="y"), SendEmail(to="z")])
    assert native_tx.in_transaction()
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == 0
    await native_tx.rollback_implicit()
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == 0


async def test_add_job_with_tx_refuses_foreign_objects(client: pgqueue.AsyncClient) -> None:
    with pytest.raises(pgqueue.ConfigurationError, match="cannot use"):
        await client.add_job_with_tx(object(), SendEmail(to="x"))


# -- bad input: a clear error, and nothing inserted --------------------------------------------


BAD_JOBS: list[tuple[str, Any, dict[str, Any], type[Exception]]] = [
    ("set", Anything(value={1}), {}, pgqueue.JobSerializationError),
    ("datetime", Anything(value=datetime.now(UTC)), {}, pgqueue.JobSerializationError),
    ("object", Anything(value=object()), {}, pgqueue.JobSerializationError),
    ("uuid", Anything(value=uuid.uuid4()), {}, pgqueue.JobSerializationError),
    ("decimal", Anything(value={"price": Decimal("9.99")}), {}, pgqueue.JobSerializationError),
    ("nan", Anything(value=math.nan), {}, pgqueue.JobSerializationError),
    ("inf", Anything(value=[1.0, math.inf]), {}, pgqueue.JobSerializationError),
    ("nul", Anything(value="a\x00b"), {}, pgqueue.JobSerializationError),
    ("nul-in-key", Anything(value={"k\x00": 1}), {}, pgqueue.JobSerializationError),
    ("oversize", Anything(value="x" * 2_000_000), {}, pgqueue.PayloadTooLarge),
    ("blank-queue", SendEmail(to="x"), {"queue": ""}, pgqueue.InvalidName),
    ("bad-queue", SendEmail(to="x"), {"queue": "a b"}, pgqueue.InvalidName),
    ("sql-queue", SendEmail(to="x"), {"queue": "x'; DROP TABLE t; --"}, pgqueue.InvalidName),
    ("long-queue", SendEmail(to="x"), {"queue": "q" * 65}, pgqueue.InvalidName),
    ("priority", SendEmail(to="x"), {"priority": 40_000}, pgqueue.InvalidJobOptions),
    ("attempts", SendEmail(to="x"), {"max_attempts": 0}, pgqueue.InvalidJobOptions),
    ("naive", SendEmail(to="x"), {"run_at": datetime(2030, 1, 1)}, pgqueue.InvalidJobOptions),
    (
        "both-times",
        SendEmail(to="x"),
        {"run_at": datetime.now(UTC), "run_in": timedelta(1)},
        pgqueue.InvalidJobOptions,
    ),
    ("negative-delay", SendEmail(to="x"), {"run_in": timedelta(-1)}, pgqueue.InvalidJobOptions),
    ("not-a-job", {"to": "x"}, {}, TypeError),
]


@pytest.mark.parametrize(
    ("job", "kwargs", "error"), [b[1:] for b in BAD_JOBS], ids=[b[0] for b in BAD_JOBS]
)
async def test_bad_input_is_refused_and_nothing_inserted(
    client: pgqueue.AsyncClient,
    db,
    jobs_table: str,
    job: Any,
    kwargs: dict[str, Any],
    error: type[Exception],
) -> None:
    with pytest.raises(error) as info:
        await client.add_job(job, **kwargs)
    assert len(str(info.value)) > 20  # says what is wrong and what to do
    if error is pgqueue.JobSerializationError and "NUL" not in str(info.value):
        assert "field 'value'" in str(info.value)  # names the field
    with pytest.raises(error):
        await client.add_jobs([SendEmail(to="fine"), (job, pgqueue.JobOptions(**kwargs))])
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == 0


async def test_oversize_limit_is_configurable(driver: pgqueue.AsyncDriver, schema: str, db) -> None:
    client = pgqueue.AsyncClient(
        driver, settings=pgqueue.Settings(schema=schema, max_payload_bytes=64)
    )
    await client.migrate()
    await client.add_job(Anything(value="x" * 10))
    with pytest.raises(pgqueue.PayloadTooLarge, match="64"):
        await client.add_job(Anything(value="x" * 100))
    assert db.value(f'SELECT count(*) FROM "{schema}".pgqueue_jobs') == 1


async def test_unknown_kind_is_refused_when_client_has_a_registry(
    driver: pgqueue.AsyncDriver, settings: pgqueue.Settings, db, jobs_table: str
) -> None:
    registry = pgqueue.WorkerRegistry(SendEmail)
    client = pgqueue.AsyncClient(driver, registry=registry, settings=settings)
    await client.migrate()
    with pytest.raises(pgqueue.UnknownJobKind, match=r"images\.resize"):
        await client.add_job(Resize(path="x"))
    with pytest.raises(pgqueue.UnknownJobKind):
        await client.add_jobs([SendEmail(to="ok"), Resize(path="x")])
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == 0
    await client.add_job(SendEmail(to="known"))
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == 1


async def test_unicode_and_tricky_strings_round_trip(
    client: pgqueue.AsyncClient, db, jobs_table: str
) -> None:
    value = {"s": "naïve ☃ \\u0000 '); DROP TABLE x; --", "n": [1, 2.5, None, True]}
    h = await client.add_job(Anything(value=value))
    assert db.value(f"SELECT payload->'value' FROM {jobs_table} WHERE id = $1", (h.id,)) == value


async def test_enqueue_before_migrate_says_what_to_do(
    driver: pgqueue.AsyncDriver, settings: pgqueue.Settings
) -> None:
    client = pgqueue.AsyncClient(driver, settings=settings)
    with pytest.raises(pgqueue.SchemaNotMigrated, match="migrate"):
        await client.add_job(SendEmail(to="x"))


async def test_large_batches_keep_every_option(
    client: pgqueue.AsyncClient, db, jobs_table: str
) -> None:
    # above COPY_MIN: loaded with COPY where the driver offers it, with the same results
    when = datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC)
    items: list[Any] = [SendEmail(to=str(i)) for i in range(2500)]
    items[10] = (SendEmail(to="delayed"), pgqueue.JobOptions(run_in=timedelta(hours=2)))
    items[20] = (SendEmail(to="dated"), pgqueue.JobOptions(run_at=when, priority=9))
    items[30] = Resize(path="p")
    handles = await client.add_jobs(items)
    assert [h.id for h in handles] == sorted(h.id for h in handles)
    rows = dict(
        (r[0], r[1:])
        for r in db.rows(
            f"SELECT id, payload->>'to', queue, priority, key, scheduled_for, "
            f"scheduled_for - created_at FROM {jobs_table}"
        )
    )
    assert len(rows) == 2500
    assert rows[handles[0].id][0] == "0"
    assert rows[handles[2499].id][0] == "2499"
    delay = rows[handles[10].id][5]
    assert timedelta(hours=2) - timedelta(seconds=5) < delay <= timedelta(hours=2)
    assert rows[handles[20].id][2:5] == (9, None, when)
    assert handles[20].scheduled_for == when
    assert rows[handles[30].id][1:3] == ("images", 5)


async def test_large_batch_reports_a_taken_job_id_and_inserts_the_rest(
    client: pgqueue.AsyncClient, db, jobs_table: str
) -> None:
    first = await client.add_job(SendEmail(to="first"), job_id="taken")
    items: list[Any] = [SendEmail(to=str(i)) for i in range(2500)]
    items[1234] = (SendEmail(to="dup"), pgqueue.JobOptions(job_id="taken"))
    handles = await client.add_jobs(items)
    assert [i for i, h in enumerate(handles) if not h.inserted] == [1234]
    assert handles[1234].id == first.id
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == 2500
    assert db.value(f"SELECT count(*) FROM {jobs_table} WHERE payload->>'to' = 'dup'") == 0
