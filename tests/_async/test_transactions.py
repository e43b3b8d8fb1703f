"""add_job_with_tx on every driver's native transaction objects (SPEC §3).

Commit makes the jobs visible, rollback leaves nothing, a rolled-back savepoint takes its jobs
with it, and pgqueue never commits for the caller.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import pgqueue
from tests._async.conftest import Native
from tests._async.test_enqueue import SendEmail

pytestmark = pytest.mark.timeout(60)

NATIVE_KINDS = [
    "psycopg-connection",
    "sqlalchemy-connection",
    "sqlalchemy-session",
    "asyncpg-connection",  # async-only
]


@pytest.fixture(params=NATIVE_KINDS)
async def native(request: pytest.FixtureRequest, database_url: str) -> AsyncIterator[Native]:
    n = Native(request.param, database_url)
    await n.open()
    yield n
    await n.close()


def count(db, jobs_table: str) -> int:
    return int(db.value(f"SELECT count(*) FROM {jobs_table}"))


async def test_commit_makes_jobs_visible(
    client: pgqueue.AsyncClient, native: Native, db, jobs_table: str
) -> None:
    await native.begin()
    await client.add_job_with_tx(native.obj, SendEmail(to="one"))
    await client.add_jobs_with_tx(native.obj, [SendEmail(to="two"), SendEmail(to="three")])
    assert count(db, jobs_table) == 0  # not before the caller commits
    await native.commit()
    assert count(db, jobs_table) == 3


async def test_rollback_leaves_nothing(
    client: pgqueue.AsyncClient, native: Native, db, jobs_table: str
) -> None:
    await native.begin()
    await client.add_job_with_tx(native.obj, SendEmail(to="one"))
    await client.add_jobs_with_tx(native.obj, [SendEmail(to=str(i)) for i in range(5)])
    await native.rollback()
    assert count(db, jobs_table) == 0


class Undo(Exception):
    pass


async def test_rolled_back_savepoint_takes_its_jobs(
    client: pgqueue.AsyncClient, native: Native, db, jobs_table: str
) -> None:
    await native.begin()
    await client.add_job_with_tx(native.obj, SendEmail(to="kept"))
    with pytest.raises(Undo):
        async with native.savepoint():
            await client.add_job_with_tx(native.obj, SendEmail(to="undone"))
            raise Undo
    await native.commit()
    assert db.rows(f"SELECT payload->>'to' FROM {jobs_table}") == [("kept",)]


async def test_never_commits_for_the_caller(
    client: pgqueue.AsyncClient, native: Native, db, jobs_table: str
) -> None:
    await native.begin()
    await client.add_job_with_tx(native.obj, SendEmail(to="x"))
    await client.add_jobs_with_tx(native.obj, [SendEmail(to="y")] * 6000)  # several chunks
    assert count(db, jobs_table) == 0
    await native.rollback()
    assert count(db, jobs_table) == 0
