"""Driver and client fixtures for the asyncio suite (the sync suite's are generated from these).

``driver`` is parametrized over every way an adapter can be built; an adapter joins the
conformance suite and every feature test by adding its modes to ``DRIVER_MODES``. Modes of
asyncio-only libraries exist only here, not in the generated sync suite.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg  # async-only
import pytest
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from sqlalchemy.ext.asyncio import create_async_engine  # sync: from sqlalchemy import create_engine

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
