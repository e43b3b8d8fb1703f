"""Keyed and bulk enqueues are atomic on every native object (issue 12, items 9-12).

A keyed insert (job id, unique lock) is one transaction, even on a connection in autocommit
mode; a failed ``add_jobs_with_tx`` leaves nothing in the caller's transaction; a unique lock
of a job due in the past counts its ttl from now; text the database cannot store is refused
before any SQL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg  # async-only
import pytest
import sqlalchemy.ext.asyncio as sa_asyncio  # async-only
from psycopg import AsyncConnection
from sqlalchemy.ext.asyncio import AsyncSession  # sync: from sqlalchemy.orm import Session

import pgqueue
from tests._async.conftest import Native, sqlalchemy_engine

pytestmark = pytest.mark.timeout(60)

HOUR = timedelta(hours=1)


@dataclass
class Digest(pgqueue.Worker):
    user: int
    poison: bool = False

    def process(self, ctx: pgqueue.JobContext) -> None: ...


AUTOCOMMIT_KINDS = [
    "psycopg",
    "sqlalchemy-connection",
    "sqlalchemy-session",
    "sqlalchemy-asyncpg-session",  # async-only
]


@asynccontextmanager
async def autocommit(kind: str, url: str) -> AsyncIterator[Any]:
    """A caller's object in autocommit mode, outside any transaction."""
    if kind == "psycopg":
        conn = await AsyncConnection.connect(url, autocommit=True)
        try:
            yield conn
        finally:
            await conn.close()
        return
    engine = sqlalchemy_engine(url, isolation_level="AUTOCOMMIT")
    # async-only: begin
    if kind == "sqlalchemy-asyncpg-session":
        await engine.dispose()
        asyncpg_url = url.replace("postgresql://", "postgresql+asyncpg://", 1)
        engine = sa_asyncio.create_async_engine(asyncpg_url, isolation_level="AUTOCOMMIT")
    # async-only: end
    try:
        if kind == "sqlalchemy-connection":
            async with engine.connect() as sa_conn:
                yield sa_conn
        else:
            async with AsyncSession(engine) as session:
                yield session
    finally:
        await engine.dispose()


@pytest.fixture
def audited(db: Any, settings: pgqueue.Settings, jobs_table: str) -> str:
    """An audit table filled by a trigger on every job insert, committed or not with it.

    A keyed insert that is refused must leave no audit row: if its job insert had committed on
    its own (and been deleted after), the row would remain.
    """
    audit = f'"{settings.schema}"."audit"'
    db.rows(f"CREATE TABLE {audit} (job_id bigint, payload jsonb)")
    db.rows(
        f'CREATE FUNCTION "{settings.schema}".audit() RETURNS trigger LANGUAGE plpgsql AS '
        f"$$BEGIN INSERT INTO {audit} VALUES (NEW.id, NEW.payload); RETURN NEW; END$$"
    )
    db.rows(
        f"CREATE TRIGGER audit AFTER INSERT ON {jobs_table} FOR EACH ROW "
        f'EXECUTE FUNCTION "{settings.schema}".audit()'
    )
    return audit


@pytest.fixture
def poisoned(db: Any, jobs_table: str) -> None:
    """Make PostgreSQL refuse any job whose arguments say ``poison``."""
    db.rows(
        f"ALTER TABLE {jobs_table} ADD CONSTRAINT no_poison "
        "CHECK (coalesce((payload->>'poison')::boolean, false) = false)"
    )


@pytest.mark.parametrize("kind", AUTOCOMMIT_KINDS)
async def test_refused_unique_job_never_commits_on_an_autocommit_connection(
    client: pgqueue.AsyncClient, database_url: str, db: Any, audited: str, kind: str
) -> None:
    first = await client.add_job(Digest(user=1), unique=HOUR)
    async with autocommit(kind, database_url) as conn:
        with pytest.raises(pgqueue.DuplicateJob) as caught:
            await client.add_job_with_tx(conn, Digest(user=1), unique=HOUR)
        assert caught.value.existing.id == first.id
        # and a new one commits at once, as anything does on such a connection
        added = await client.add_job_with_tx(conn, Digest(user=2), unique=HOUR)
    assert db.rows(f"SELECT job_id FROM {audited} ORDER BY job_id") == [(first.id,), (added.id,)]


@pytest.mark.parametrize("kind", AUTOCOMMIT_KINDS)
async def test_refused_job_id_on_an_autocommit_connection_leaves_nothing(
    client: pgqueue.AsyncClient, database_url: str, db: Any, audited: str, kind: str
) -> None:
    first = await client.add_job(Digest(user=1), job_id="digest-1")
    async with autocommit(kind, database_url) as conn:
        same = await client.add_job_with_tx(
            conn, Digest(user=9), job_id="digest-1", on_conflict="ignore"
        )
    assert (same.id, same.inserted, same.conflict) == (first.id, False, "job_id")
    assert db.rows(f"SELECT job_id FROM {audited}") == [(first.id,)]


async def test_refused_unique_job_in_a_caller_transaction_leaves_it_usable(
    client: pgqueue.AsyncClient, native_tx: Native, db: Any, jobs_table: str, audited: str
) -> None:
    first = await client.add_job(Digest(user=1), unique=HOUR)
    await native_tx.begin()
    with pytest.raises(pgqueue.DuplicateJob):
        await client.add_job_with_tx(native_tx.obj, Digest(user=1), unique=HOUR)
    kept = await client.add_job_with_tx(native_tx.obj, Digest(user=2), unique=HOUR)
    await native_tx.commit()
    assert db.rows(f"SELECT id FROM {jobs_table} ORDER BY id") == [(first.id,), (kept.id,)]
    assert db.rows(f"SELECT job_id FROM {audited} ORDER BY job_id") == [(first.id,), (kept.id,)]


async def test_failed_add_jobs_with_tx_leaves_nothing_in_the_caller_transaction(
    client: pgqueue.AsyncClient, native_tx: Native, db: Any, jobs_table: str, poisoned: None
) -> None:
    await native_tx.begin()
    before = await client.add_job_with_tx(native_tx.obj, Digest(user=0))
    with pytest.raises(pgqueue.DatabaseError) as caught:
        await client.add_jobs_with_tx(
            native_tx.obj,
            [
                Digest(user=1),  # plain: inserted first, in bulk
                (Digest(user=2), pgqueue.JobOptions(job_id="d-2")),
                (Digest(user=3, poison=True), pgqueue.JobOptions(job_id="d-3")),  # refused
            ],
        )
    assert caught.value.sqlstate == "23514"  # check_violation
    after = await client.add_job_with_tx(native_tx.obj, Digest(user=4))  # still usable
    await native_tx.commit()
    assert db.rows(f"SELECT id FROM {jobs_table} ORDER BY id") == [(before.id,), (after.id,)]


async def test_failed_add_jobs_with_tx_on_an_autocommit_connection_leaves_nothing(
    client: pgqueue.AsyncClient, database_url: str, db: Any, jobs_table: str, poisoned: None
) -> None:
    async with autocommit("psycopg", database_url) as conn:
        with pytest.raises(pgqueue.DatabaseError):
            await client.add_jobs_with_tx(
                conn,
                [
                    (Digest(user=1), pgqueue.JobOptions(job_id="d-1")),
                    (Digest(user=2, poison=True), pgqueue.JobOptions(job_id="d-2")),
                ],
            )
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == 0


async def test_unique_ttl_of_a_job_due_in_the_past_counts_from_now(
    client: pgqueue.AsyncClient, db: Any, settings: pgqueue.Settings
) -> None:
    past = datetime.now(UTC) - timedelta(hours=2)
    first = await client.add_job(Digest(user=1), unique=HOUR, run_at=past)
    with pytest.raises(pgqueue.DuplicateJob):
        await client.add_job(Digest(user=1), unique=HOUR, run_at=past)
    expires = db.value(
        f'SELECT expires_at - now() FROM "{settings.schema}"."{settings.prefix}unique_locks" '
        "WHERE job_id = $1",
        (first.id,),
    )
    assert timedelta(minutes=59) < expires <= HOUR


@pytest.mark.parametrize(
    ("job_id", "match"),
    [
        ("a\ud800b", "job_id must be valid Unicode text: it holds a lone surrogate"),
        ("a\x00b", "job_id must not contain a NUL character"),
    ],
    ids=["lone-surrogate", "nul"],
)
async def test_job_id_the_database_cannot_store_is_refused_before_any_sql(
    client: pgqueue.AsyncClient,
    native_tx: Native,
    db: Any,
    jobs_table: str,
    job_id: str,
    match: str,
) -> None:
    with pytest.raises(pgqueue.InvalidJobOptions, match=match):
        await client.add_job(Digest(user=1), job_id=job_id)
    await native_tx.begin()
    with pytest.raises(pgqueue.InvalidJobOptions, match=match):
        await client.add_jobs_with_tx(
            native_tx.obj, [Digest(user=2), (Digest(user=3), pgqueue.JobOptions(job_id=job_id))]
        )
    await native_tx.commit()
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == 0


# async-only: begin
async def test_asyncpg_connection_outside_a_transaction_is_refused(
    client: pgqueue.AsyncClient, database_url: str, db: Any, jobs_table: str
) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        with pytest.raises(pgqueue.ConfigurationError, match="no open transaction"):
            await client.add_job_with_tx(conn, Digest(user=1), unique=HOUR)
    finally:
        await conn.close()
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == 0


# async-only: end
