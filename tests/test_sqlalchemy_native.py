"""The SQLAlchemy adapter's single statements on the library's own connection (_native.py).

On an engine on the psycopg or asyncpg dialect, a statement outside a transaction runs in
autocommit on the library's connection under a pooled one, and a driver that owns its engine
keeps one such connection out of the pool between statements (pgqueue_adapters/_hot.py).
What must hold: the pool gets its connections back as they came (no autocommit, no open
transaction); an engine with event listeners still sees every statement; a caller waiting for
the pool is never left waiting while a connection sits kept; a failed, cancelled or killed
statement's connection goes back to the pool (a dead one is replaced); close() gives it back.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from sqlalchemy import create_engine, event
from sqlalchemy.ext.asyncio import create_async_engine

import pgqueue
from pgqueue_adapters.sqlalchemy import (
    AsyncSQLAlchemyDriver,
    SQLAlchemyDriver,
    async_connect,
    sync_connect,
)
from tests._async.helpers import wait_until
from tests._sync.helpers import wait_until as sync_wait_until

pytestmark = pytest.mark.timeout(60)

ASYNC_DIALECTS = ["asyncpg", "psycopg"]
# The server's view of a session: "idle", or "idle in transaction" if a statement left one open.
STATE = "SELECT state FROM pg_stat_activity WHERE pid = $1"
SLEEP = "SELECT pg_sleep(5)"


def sa_url(database_url: str, dialect: str) -> str:
    return database_url.replace("postgresql://", f"postgresql+{dialect}://", 1)


def _pid(rows: list[Any]) -> int:
    return int(rows[0][0])


# -- the kept connection of an engine of our own -----------------------------------------------


@pytest.mark.parametrize("dialect", ASYNC_DIALECTS)
async def test_single_statements_reuse_the_kept_connection(
    database_url: str, dialect: str, db: Any
) -> None:
    driver = await async_connect(sa_url(database_url, dialect), pool_size=3)
    pool: Any = driver._engine.pool  # type: ignore[union-attr]
    try:
        pids = {_pid(await driver.query("SELECT pg_backend_pid()")) for _ in range(5)}
        assert len(pids) == 1
        assert pool.checkedout() == 1  # kept out of the pool between statements
        assert db.value(STATE, (next(iter(pids)),)) == "idle"  # each statement committed
        async with driver.with_tx() as tx:  # a transaction checks out another
            pid = _pid(await tx.query("SELECT pg_backend_pid()"))
            assert pid not in pids
            assert db.value(STATE, (pid,)) == "idle in transaction"
    finally:
        await asyncio.wait_for(driver.close(), 10)
    assert pool.checkedout() == 0  # close() gave the kept connection back


def test_sync_single_statements_reuse_the_kept_connection(database_url: str, db: Any) -> None:
    driver = sync_connect(sa_url(database_url, "psycopg"), pool_size=3)
    pool: Any = driver._engine.pool  # type: ignore[union-attr]
    try:
        pids = {_pid(driver.query("SELECT pg_backend_pid()")) for _ in range(5)}
        assert len(pids) == 1
        assert pool.checkedout() == 1
        assert db.value(STATE, (next(iter(pids)),)) == "idle"
        with driver.with_tx() as tx:
            assert _pid(tx.query("SELECT pg_backend_pid()")) not in pids
    finally:
        driver.close()
    assert pool.checkedout() == 0


@pytest.mark.parametrize("dialect", ASYNC_DIALECTS)
async def test_a_caller_waiting_for_the_pool_gets_the_connection(
    database_url: str, dialect: str
) -> None:
    # Pool of 2. A holds one connection in a transaction until W has run; B's statement holds
    # the other while W starts to wait for the pool. When B ends, its connection must go to W
    # (not be kept): else W waits until the pool's timeout, and A with it.
    driver = await async_connect(sa_url(database_url, dialect), pool_size=2)
    pool: Any = driver._engine.pool  # type: ignore[union-attr]
    w_ran = asyncio.Event()

    async def a() -> None:
        async with driver.with_tx() as tx:
            await tx.query("SELECT 1")
            await w_ran.wait()

    async def w() -> None:
        async with driver.with_tx() as tx:
            await tx.query("SELECT 1")
        w_ran.set()

    try:
        task_a = asyncio.create_task(a())
        b = asyncio.create_task(driver.query("SELECT pg_sleep(0.3)"))
        await wait_until(lambda: pool.checkedout() == 2, what="A and B hold both connections")
        await asyncio.wait_for(asyncio.gather(w(), b, task_a), 20)
        assert w_ran.is_set()
    finally:
        await asyncio.wait_for(driver.close(), 10)


def test_sync_threads_share_the_pool_and_the_kept_connection(database_url: str) -> None:
    driver = sync_connect(sa_url(database_url, "psycopg"), pool_size=2)
    pool: Any = driver._engine.pool  # type: ignore[union-attr]
    errors: list[BaseException] = []
    w_ran = threading.Event()

    def hold_until_w_ran() -> None:
        try:
            with driver.with_tx() as tx:
                tx.query("SELECT 1")
                assert w_ran.wait(20)
        except BaseException as exc:
            errors.append(exc)

    def w() -> None:
        try:
            with driver.with_tx() as tx:
                tx.query("SELECT 1")
            w_ran.set()
        except BaseException as exc:
            errors.append(exc)

    try:
        a = threading.Thread(target=hold_until_w_ran)
        a.start()
        b = threading.Thread(target=lambda: driver.query("SELECT pg_sleep(0.3)"))
        b.start()
        sync_wait_until(lambda: pool.checkedout() == 2, what="A and B hold both connections")
        w_thread = threading.Thread(target=w)
        w_thread.start()
        for thread in (a, b, w_thread):
            thread.join(30)
            assert not thread.is_alive()
        assert not errors
        # more threads at once than the pool holds, then one by one again
        threads = [
            threading.Thread(target=lambda: driver.query("SELECT pg_sleep(0.01)")) for _ in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
            assert not thread.is_alive()
        assert _pid(driver.query("SELECT pg_backend_pid()"))
    finally:
        driver.close()


@pytest.mark.parametrize("dialect", ASYNC_DIALECTS)
async def test_failed_cancelled_and_killed_statements_give_their_connection_back(
    database_url: str, dialect: str, db: Any
) -> None:
    driver = await async_connect(sa_url(database_url, dialect), pool_size=2)
    try:
        for _ in range(10):  # more failures than the pool has connections: none is leaked
            with pytest.raises(pgqueue.DatabaseError) as info:
                await driver.query("SELECT 1 / 0")
            assert info.value.sqlstate == "22012"
        slow = asyncio.create_task(driver.query(SLEEP))
        await wait_until(
            lambda: db.value("SELECT count(*) FROM pg_stat_activity WHERE query = $1", (SLEEP,)),
            what="the slow statement runs",
        )
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        assert await asyncio.wait_for(driver.query("SELECT 1"), 10) == [(1,)]
        # the kept connection, killed by the server: one statement fails, the next gets a
        # working connection
        pid = _pid(await driver.query("SELECT pg_backend_pid()"))
        db.value("SELECT pg_terminate_backend($1)", (pid,))
        with pytest.raises(pgqueue.ConnectionLost):
            await driver.query("SELECT 1")
        rows = await asyncio.wait_for(
            asyncio.gather(*(driver.query("SELECT pg_backend_pid()") for _ in range(4))), 20
        )
        assert pid not in {_pid(r) for r in rows}
    finally:
        await asyncio.wait_for(driver.close(), 10)


def test_sync_failed_and_killed_statements_give_their_connection_back(
    database_url: str, db: Any
) -> None:
    driver = sync_connect(sa_url(database_url, "psycopg"), pool_size=2)
    try:
        for _ in range(10):
            with pytest.raises(pgqueue.DatabaseError) as info:
                driver.query("SELECT 1 / 0")
            assert info.value.sqlstate == "22012"
        pid = _pid(driver.query("SELECT pg_backend_pid()"))
        db.value("SELECT pg_terminate_backend($1)", (pid,))
        with pytest.raises(pgqueue.ConnectionLost) as lost:
            driver.query("SELECT 1")
        assert lost.value.sqlstate == "57P01"
        assert pid != _pid(driver.query("SELECT pg_backend_pid()"))
    finally:
        driver.close()


# -- a caller's engine ---------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", ASYNC_DIALECTS)
async def test_a_callers_engine_gets_its_connections_back_as_they_came(
    database_url: str, dialect: str, db: Any, schema: str
) -> None:
    engine = create_async_engine(sa_url(database_url, dialect), pool_size=2)
    try:
        driver = AsyncSQLAlchemyDriver(engine)
        await driver.exec(f'CREATE SCHEMA "{schema}"')
        await driver.exec(f'CREATE TABLE "{schema}".t (x int)')
        await driver.exec(f'INSERT INTO "{schema}".t VALUES ($1)', (1,))
        assert db.value(f'SELECT count(*) FROM "{schema}".t') == 1  # committed
        pid = _pid(await driver.query("SELECT pg_backend_pid()"))
        assert db.value(STATE, (pid,)) == "idle"
        # nothing kept from a caller's engine
        assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
        async with engine.connect() as conn:
            assert await conn.get_isolation_level() != "AUTOCOMMIT"
            raw: Any = await conn.get_raw_connection()
            assert raw.dbapi_connection.autocommit is False
            assert not conn.in_transaction()
    finally:
        await engine.dispose()


def test_an_engine_with_listeners_sees_every_statement(database_url: str) -> None:
    engine = create_engine(sa_url(database_url, "psycopg"), pool_size=2)
    seen: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    try:
        driver = SQLAlchemyDriver(engine)
        assert driver.query("SELECT $1::int AS seven", (7,)) == [(7,)]
        assert any("AS seven" in statement for statement in seen)
    finally:
        engine.dispose()


@pytest.mark.parametrize("dialect", ASYNC_DIALECTS)
async def test_an_async_engine_with_listeners_sees_every_statement(
    database_url: str, dialect: str
) -> None:
    engine = create_async_engine(sa_url(database_url, dialect), pool_size=2)
    seen: list[str] = []
    event.listen(engine.sync_engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
    try:
        driver = AsyncSQLAlchemyDriver(engine)
        assert await driver.query("SELECT $1::int AS seven", (7,)) == [(7,)]
        assert any("AS seven" in statement for statement in seen)
    finally:
        await engine.dispose()


@pytest.mark.parametrize("dialect", ASYNC_DIALECTS)
async def test_an_autocommit_async_engine_is_refused(database_url: str, dialect: str) -> None:
    engine = create_async_engine(sa_url(database_url, dialect), isolation_level="AUTOCOMMIT")
    try:
        driver = AsyncSQLAlchemyDriver(engine)
        with pytest.raises(pgqueue.ConfigurationError, match="AUTOCOMMIT"):
            await driver.exec("SELECT 1")
        assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    finally:
        await engine.dispose()


def test_an_unreachable_server_is_connection_lost(database_url: str) -> None:
    # engine.raw_connection() lets the library's connect error through unwrapped (a server
    # restarting): the fast path says ConnectionLost, as the Connection path does
    engine = create_engine(_unreachable(database_url, "psycopg"))
    driver = SQLAlchemyDriver(engine)
    try:
        with pytest.raises(pgqueue.ConnectionLost):
            driver.query("SELECT 1")
    finally:
        engine.dispose()


@pytest.mark.parametrize("dialect", ["psycopg", "asyncpg"])
async def test_an_unreachable_server_is_connection_lost_async(
    database_url: str, dialect: str
) -> None:
    engine = create_async_engine(_unreachable(database_url, dialect))
    driver = AsyncSQLAlchemyDriver(engine)
    try:
        with pytest.raises(pgqueue.ConnectionLost):
            await driver.query("SELECT 1")
    finally:
        await engine.dispose()


def _unreachable(database_url: str, dialect: str) -> str:
    """The test database's URL with a port nothing listens on, for ``dialect``."""
    rest = database_url.split("://", 1)[1]
    user_host, _, path = rest.partition("/")
    user, _, _hostport = user_host.rpartition("@")
    return f"postgresql+{dialect}://{user + '@' if user else ''}127.0.0.1:1/{path}"
