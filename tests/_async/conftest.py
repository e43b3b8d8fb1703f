"""Driver and client fixtures for the asyncio suite (the sync suite's are generated from these).

``driver`` is parametrized over every way an adapter can be built; a new adapter joins the
conformance suite and every feature test by adding its modes to ``DRIVER_MODES``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

import pgqueue
from pgqueue_adapters.psycopg import AsyncPsycopgDriver, async_connect

DRIVER_MODES = ["psycopg-url", "psycopg-pool", "psycopg-conn"]


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
    else:  # pragma: no cover
        raise AssertionError(mode)


@pytest.fixture
async def client(driver: pgqueue.AsyncDriver, settings: pgqueue.Settings) -> pgqueue.AsyncClient:
    c = pgqueue.AsyncClient(driver, settings=settings)
    await c.migrate()
    return c


@pytest.fixture
async def native_conn(database_url: str) -> AsyncIterator[AsyncConnection]:
    """A caller's own connection, for the *_with_tx tests."""
    conn = await AsyncConnection.connect(database_url)
    yield conn
    await conn.close()
