"""Building a client: from a URL, from the environment, from a native pool; driver selection."""

from __future__ import annotations

import pytest
from psycopg_pool import AsyncConnectionPool

import pgqueue
from tests._async.test_enqueue import SendEmail

pytestmark = pytest.mark.timeout(60)


async def test_connect_with_url_and_driver_flag(
    database_url: str, settings: pgqueue.Settings, db, jobs_table: str
) -> None:
    client = await pgqueue.AsyncClient.connect(database_url, driver="psycopg", settings=settings)
    async with client:
        assert await client.migrate() != []
        await client.add_job(SendEmail(to="url"))
    assert db.value(f"SELECT payload->>'to' FROM {jobs_table}") == "url"


async def test_connect_reads_the_environment(
    database_url: str, settings: pgqueue.Settings, monkeypatch: pytest.MonkeyPatch, db
) -> None:
    monkeypatch.setenv("PGQUEUE_DSN", database_url)
    monkeypatch.setenv("PGQUEUE_DRIVER", "psycopg")
    async with await pgqueue.AsyncClient.connect(settings=settings) as client:
        await client.migrate()
        assert await client.schema_version() is not None


async def test_connect_with_driver_scheme(database_url: str, settings: pgqueue.Settings) -> None:
    url = (
        "postgresql+psycopg://" + database_url.split("://", 1)[1] if "://" in database_url else None
    )
    if url is None:
        pytest.skip("the test DSN is not a URL")
    async with await pgqueue.AsyncClient.connect(url, settings=settings) as client:
        await client.migrate()


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
    with pytest.raises(pgqueue.ConfigurationError):
        await pgqueue.AsyncClient.connect(object())
