"""Driver and client fixtures, written for the asyncio suite in tests/_async/conftest.py.

The sync suite's, in tests/_sync/conftest.py, are generated from these.

``driver`` is parametrized over every way an adapter can be built; an adapter joins the
conformance suite and every feature test by adding its modes to ``DRIVER_MODES``. Modes of
asyncio-only libraries exist only here, not in the generated sync suite.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg  # async-only
import pytest
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine  # sync: from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio.session import AsyncSession  # sync: from sqlalchemy.orm import Session

import pgqueue
from pgqueue_adapters.asyncpg import AsyncpgDriver  # async-only
from pgqueue_adapters.asyncpg import async_connect as asyncpg_connect  # async-only
from pgqueue_adapters.psycopg import AsyncPsycopgDriver, async_connect
from pgqueue_adapters.sqlalchemy import AsyncSQLAlchemyDriver

DRIVER_MODES = [
    "psycopg-url",
    "psycopg-pool",
    "psycopg-conn",
    "sqlalchemy-engine",
    "sqlalchemy-conn",
    "sqlalchemy-asyncpg",  # async-only
    "asyncpg-url",  # async-only
    "asyncpg-pool",  # async-only
    "asyncpg-conn",  # async-only
]


def sqlalchemy_url(database_url: str, dialect: str = "psycopg") -> str:
    return database_url.replace("postgresql://", f"postgresql+{dialect}://", 1)


def sqlalchemy_engine(database_url: str, **kwargs: Any) -> Any:
    return create_async_engine(sqlalchemy_url(database_url), **kwargs)


@pytest.fixture(params=DRIVER_MODES)
async def driver(
    request: pytest.FixtureRequest, database_url: str
) -> AsyncIterator[pgqueue.AsyncDriver]:
    mode = request.param
    if mode == "psycopg-url":
        drv = await async_connect(database_url, max_size=4)
        yield drv
        await drv.close()
    elif mode == "psycopg-pool":
        pool: AsyncConnectionPool = AsyncConnectionPool(database_url, max_size=4, open=False)
        await pool.open()
        drv = AsyncPsycopgDriver(pool)
        yield drv
        await drv.close()
        await pool.close()
    elif mode == "psycopg-conn":
        # A caller's connection that is *not* in autocommit: the driver must commit its own work.
        conn = await AsyncConnection.connect(database_url)
        drv = AsyncPsycopgDriver(conn)
        yield drv
        await drv.close()
        await conn.close()
    elif mode == "sqlalchemy-engine":
        engine = create_async_engine(sqlalchemy_url(database_url), pool_size=4)
        sa_drv = AsyncSQLAlchemyDriver(engine)
        yield sa_drv
        await sa_drv.close()
        await engine.dispose()
    elif mode == "sqlalchemy-conn":
        engine = create_async_engine(sqlalchemy_url(database_url), pool_size=2)
        sa_conn = await engine.connect()
        sa_drv = AsyncSQLAlchemyDriver(sa_conn)
        yield sa_drv
        await sa_drv.close()
        await sa_conn.close()
        await engine.dispose()
    # async-only: begin
    elif mode == "sqlalchemy-asyncpg":
        engine = create_async_engine(sqlalchemy_url(database_url, "asyncpg"), pool_size=4)
        sa_drv = AsyncSQLAlchemyDriver(engine)
        yield sa_drv
        await sa_drv.close()
        await engine.dispose()
    elif mode == "asyncpg-url":
        apg_drv = await asyncpg_connect(database_url, max_size=4)
        yield apg_drv
        await apg_drv.close()
    elif mode == "asyncpg-pool":
        apg_pool = await asyncpg.create_pool(database_url, min_size=1, max_size=4)
        apg_drv = AsyncpgDriver(apg_pool)
        yield apg_drv
        await apg_drv.close()
        await apg_pool.close()
    elif mode == "asyncpg-conn":
        apg_conn = await asyncpg.connect(database_url)
        apg_drv = AsyncpgDriver(apg_conn)
        yield apg_drv
        await apg_drv.close()
        await apg_conn.close()
    # async-only: end
    else:  # pragma: no cover
        raise AssertionError(mode)


@pytest.fixture
async def client(driver: pgqueue.AsyncDriver, settings: pgqueue.Settings) -> pgqueue.AsyncClient:
    c = pgqueue.AsyncClient(driver, settings=settings)
    await c.migrate()
    return c


@pytest.fixture
async def native_conn(database_url: str) -> AsyncIterator[AsyncConnection]:
    """A caller's own psycopg connection, for the *_with_tx tests."""
    conn = await AsyncConnection.connect(database_url)
    yield conn
    await conn.close()


class Native:
    """One caller-side transaction on one library's native object, with a uniform interface.

    ``kind`` names the object: ``psycopg-connection``, ``sqlalchemy-connection``,
    ``sqlalchemy-session``, and asyncio only ``sqlalchemy-asyncpg-session`` and
    ``asyncpg-connection``.
    """

    def __init__(self, kind: str, database_url: str) -> None:
        self.kind = kind
        self.url = database_url
        self.obj: Any = None
        self._closers: list[Any] = []
        self._tx: Any = None

    def _engine(self) -> Any:
        if self.kind == "sqlalchemy-asyncpg-session":  # async-only
            return create_async_engine(sqlalchemy_url(self.url, "asyncpg"))  # async-only
        return sqlalchemy_engine(self.url)

    async def open(self) -> None:
        if self.kind == "psycopg-connection":
            self.obj = await AsyncConnection.connect(self.url)
            self._closers.append(self.obj.close)
        elif self.kind.startswith("sqlalchemy"):
            engine = self._engine()
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

    @property
    def has_implicit_transactions(self) -> bool:
        """Whether a statement outside a transaction block opens one (psycopg, SQLAlchemy 2)."""
        return not self.kind.startswith("asyncpg")

    async def begin_implicitly(self) -> None:
        """Run a statement outside any transaction block: the library begins a transaction."""
        if self.kind == "psycopg-connection":
            await self.obj.execute("SELECT 1")
        else:
            await self.obj.execute(text("SELECT 1"))

    def in_transaction(self) -> bool:
        if self.kind == "psycopg-connection":
            return bool(self.obj.info.transaction_status.name == "INTRANS")
        if self.kind == "asyncpg-connection":  # async-only
            return bool(self.obj.is_in_transaction())  # async-only
        return bool(self.obj.in_transaction())  # SQLAlchemy

    async def rollback_implicit(self) -> None:
        """Roll back the transaction :meth:`begin_implicitly` opened."""
        await self.obj.rollback()

    async def close(self) -> None:
        for close in self._closers:
            await close()


# The caller-side transaction object each driver mode's users hold: its own library's.
NATIVE_OF_MODE = {
    "psycopg-url": "psycopg-connection",
    "psycopg-pool": "psycopg-connection",
    "psycopg-conn": "psycopg-connection",
    "sqlalchemy-engine": "sqlalchemy-session",
    "sqlalchemy-conn": "sqlalchemy-connection",
    "sqlalchemy-asyncpg": "sqlalchemy-asyncpg-session",  # async-only
    "asyncpg-url": "asyncpg-connection",  # async-only
    "asyncpg-pool": "asyncpg-connection",  # async-only
    "asyncpg-conn": "asyncpg-connection",  # async-only
}


@pytest.fixture
async def native_tx(
    request: pytest.FixtureRequest, driver: pgqueue.AsyncDriver, database_url: str
) -> AsyncIterator[Native]:
    """An open (not begun) native object of the current driver mode's own library."""
    n = Native(NATIVE_OF_MODE[request.node.callspec.params["driver"]], database_url)
    await n.open()
    yield n
    await n.close()
