"""add_job_with_tx on every driver's native transaction objects (SPEC §3).

Commit makes the jobs visible, rollback leaves nothing, a rolled-back savepoint takes its jobs
with it, and pgqueue never commits for the caller.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg  # async-only
import pytest
from psycopg import AsyncConnection
from sqlalchemy.ext.asyncio import AsyncSession  # sync: from sqlalchemy.orm import Session

import pgqueue
from tests._async.conftest import sqlalchemy_engine
from tests._async.test_enqueue import SendEmail

pytestmark = pytest.mark.timeout(60)

NATIVE_KINDS = [
    "psycopg-connection",
    "sqlalchemy-connection",
    "sqlalchemy-session",
    "asyncpg-connection",  # async-only
]


class Native:
    """One caller-side transaction on one library's native object, with a uniform interface."""

    def __init__(self, kind: str, database_url: str) -> None:
        self.kind = kind
        self.url = database_url
        self.obj: Any = None
        self._closers: list[Any] = []
        self._tx: Any = None

    async def open(self) -> None:
        if self.kind == "psycopg-connection":
            self.obj = await AsyncConnection.connect(self.url)
            self._closers.append(self.obj.close)
        elif self.kind.startswith("sqlalchemy"):
            engine = sqlalchemy_engine(self.url)
            self._closers.append(engine.dispose)
            if self.kind == "sqlalchemy-connection":
                self.obj = await engine.connect()
                self._closers.insert(0, self.obj.close)
            else:
                self.obj = AsyncSession(engine)
                self._closers.insert(0, self.obj.close)
        # async-only: begin
        elif self.kind == "asyncpg-connection":
            self.obj = await asyncpg.connect(self.url)
            self._closers.append(self.obj.close)
        # async-only: end

    async def begin(self) -> None:
        if self.kind == "psycopg-connection":
            self._tx = self.obj.transaction()
            await self._tx.__aenter__()
        elif self.kind.startswith("sqlalchemy"):
            self._tx = await self.obj.begin()
        # async-only: begin
        else:
            self._tx = self.obj.transaction()
            await self._tx.start()
        # async-only: end

    async def commit(self) -> None:
        if self.kind == "psycopg-connection":
            await self._tx.__aexit__(None, None, None)
        else:
            await self._tx.commit()

    async def rollback(self) -> None:
        if self.kind == "psycopg-connection":
            await self._tx.__aexit__(RuntimeError, RuntimeError("rollback"), None)
        else:
            await self._tx.rollback()

    @asynccontextmanager
    async def savepoint(self) -> AsyncIterator[None]:
        if self.kind == "psycopg-connection":
            async with self.obj.transaction():
                yield
        elif self.kind.startswith("sqlalchemy"):
            async with self.obj.begin_nested():
                yield
        # async-only: begin
        else:
            async with self.obj.transaction():
                yield
        # async-only: end

    async def close(self) -> None:
        for close in self._closers:
            await close()


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
