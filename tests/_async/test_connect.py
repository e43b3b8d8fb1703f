"""Building a client: from a URL, from the environment, from a native pool; driver selection."""

from __future__ import annotations

import psycopg_pool
import pytest
from psycopg_pool import AsyncConnectionPool

import pgqueue
from pgqueue_adapters.asyncpg import AsyncpgDriver  # async-only
from pgqueue_adapters.psycopg import AsyncPsycopgDriver
from pgqueue_adapters.sqlalchemy import AsyncSQLAlchemyDriver
from tests._async.test_enqueue import SendEmail

pytestmark = pytest.mark.timeout(60)

# A pool class of the other side: sync here, asyncio in the generated sync suite.
OTHER_POOL = psycopg_pool.ConnectionPool  # sync: OTHER_POOL = psycopg_pool.AsyncConnectionPool


@pytest.fixture(autouse=True)
def no_driver_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGQUEUE_DRIVER", raising=False)


async def enqueue_one(client: pgqueue.AsyncClient, to: str, db, jobs_table: str) -> None:
    """Migrate, enqueue, and check from outside that the job landed in the test database."""
    await client.migrate()
    await client.add_job(SendEmail(to=to))
    assert db.value(f"SELECT payload->>'to' FROM {jobs_table}") == to


@pytest.mark.parametrize(
    ("name", "driver_class"),
    [
        ("psycopg", AsyncPsycopgDriver),
        ("sqlalchemy", AsyncSQLAlchemyDriver),
        ("asyncpg", AsyncpgDriver),  # async-only
    ],
)
async def test_connect_with_url_and_driver_flag(
    database_url: str,
    settings: pgqueue.Settings,
    db,
    jobs_table: str,
    name: str,
    driver_class: type,
) -> None:
    client = await pgqueue.AsyncClient.connect(database_url, driver=name, settings=settings)
    async with client:
        assert isinstance(client.driver, driver_class)
        assert await client.migrate() != []  # a fresh schema
        await enqueue_one(client, "url", db, jobs_table)


async def test_connect_reads_the_environment(
    database_url: str,
    settings: pgqueue.Settings,
    monkeypatch: pytest.MonkeyPatch,
    db,
    jobs_table: str,
) -> None:
    monkeypatch.setenv("PGQUEUE_DSN", database_url)
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/nothing")  # loses
    monkeypatch.setenv("PGQUEUE_DRIVER", "sqlalchemy")
    async with await pgqueue.AsyncClient.connect(settings=settings) as client:
        assert isinstance(client.driver, AsyncSQLAlchemyDriver)
        await enqueue_one(client, "env", db, jobs_table)


async def test_connect_falls_back_to_database_url(
    database_url: str,
    settings: pgqueue.Settings,
    monkeypatch: pytest.MonkeyPatch,
    db,
    jobs_table: str,
) -> None:
    monkeypatch.delenv("PGQUEUE_DSN", raising=False)
    monkeypatch.setenv("DATABASE_URL", database_url)
    async with await pgqueue.AsyncClient.connect(settings=settings) as client:
        assert isinstance(client.driver, AsyncPsycopgDriver)  # the default driver
        await enqueue_one(client, "database_url", db, jobs_table)


async def test_connect_with_driver_scheme(
    database_url: str, settings: pgqueue.Settings, db, jobs_table: str
) -> None:
    url = database_url.replace("postgresql://", "postgresql+psycopg://", 1)
    async with await pgqueue.AsyncClient.connect(url, settings=settings) as client:
        assert isinstance(client.driver, AsyncPsycopgDriver)
        await enqueue_one(client, "scheme", db, jobs_table)


async def test_connect_without_a_database_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PGQUEUE_DSN", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    with pytest.raises(pgqueue.ConfigurationError, match="PGQUEUE_DSN"):
        await pgqueue.AsyncClient.connect()


async def test_connect_to_unreachable_server_fails_fast() -> None:
    with pytest.raises(pgqueue.ConnectionLost, match="cannot connect"):
        await pgqueue.AsyncClient.connect("postgresql://nobody@127.0.0.1:1/nothing")


async def test_connect_with_a_native_pool_leaves_it_open(
    database_url: str, settings: pgqueue.Settings, db, jobs_table: str
) -> None:
    pool: AsyncConnectionPool = AsyncConnectionPool(
        database_url, min_size=1, max_size=2, open=False
    )
    await pool.open()
    try:
        async with await pgqueue.AsyncClient.connect(pool, settings=settings) as client:
            await client.migrate()
            await client.add_job(SendEmail(to="pool"))
        assert not pool.closed  # the caller's pool is the caller's to close
        async with pool.connection() as conn:
            cur = await conn.execute(f"SELECT count(*) FROM {jobs_table}")
            assert (await cur.fetchone()) == (1,)
    finally:
        await pool.close()


async def test_connect_refuses_objects_of_the_other_side(database_url: str) -> None:
    other = OTHER_POOL(database_url, open=False)  # never opened: refused by its type
    with pytest.raises(
        pgqueue.ConfigurationError, match="pass a psycopg AsyncConnectionPool or AsyncConnection"
    ):
        await pgqueue.AsyncClient.connect(other)
    with pytest.raises(pgqueue.ConfigurationError, match="supported driver"):
        await pgqueue.AsyncClient.connect(object())
