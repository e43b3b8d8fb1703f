"""The connections a driver keeps out of its own pool between statements (_hot.py).

On the drivers that build their own pool from a URL: asyncpg, psycopg async and psycopg sync.
What must hold: statements reuse kept connections, all but one of the pool's at most; a caller
waiting for the pool is never left waiting while a connection sits kept; a failed, cancelled or
killed statement's connection goes back to the pool (and a dead one is replaced); close() gives
them back.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pgqueue.errors import DatabaseError
from pgqueue_adapters.asyncpg import async_connect as asyncpg_connect
from pgqueue_adapters.psycopg import async_connect as psycopg_async_connect
from pgqueue_adapters.psycopg import sync_connect as psycopg_sync_connect
from tests._async.helpers import wait_until

pytestmark = pytest.mark.timeout(60)

ASYNC_CONNECTS: dict[str, Callable[..., Any]] = {
    "asyncpg": asyncpg_connect,
    "psycopg-async": psycopg_async_connect,
}


def _pid_of(rows: list[Any]) -> int:
    return int(rows[0][0])


def _terminate(database_url: str, pid: int) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


def _sessions(db: Any, state: str, running: str = "") -> int:
    """How many sessions of the test database are in ``state`` (running ``running``)."""
    return int(
        db.value(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND state = $1 AND strpos(query, $2) > 0",
            (state, running),
        )
    )


def _idle_in_pool(driver: Any) -> int:
    pool = driver._pool
    if hasattr(pool, "get_idle_size"):  # asyncpg
        return int(pool.get_idle_size())
    return int(pool.get_stats()["pool_available"])


@pytest.mark.parametrize("mode", sorted(ASYNC_CONNECTS))
async def test_single_statements_reuse_the_kept_connection(database_url: str, mode: str) -> None:
    driver = await ASYNC_CONNECTS[mode](database_url, min_size=2, max_size=4)
    try:
        pids = {_pid_of(await driver.query("SELECT pg_backend_pid()")) for _ in range(5)}
        assert len(pids) == 1
        # kept out of the pool between statements: the pool lends the others
        assert _idle_in_pool(driver) == 1
        async with driver.with_tx() as tx:  # a transaction may run on it too
            assert _pid_of(await tx.query("SELECT pg_backend_pid()")) in pids
    finally:
        await asyncio.wait_for(driver.close(), 10)


@pytest.mark.parametrize("mode", sorted(ASYNC_CONNECTS))
async def test_concurrent_statements_keep_their_connections_up_to_all_but_one(
    database_url: str, mode: str
) -> None:
    # a pool of 4, all open from the start: three statements at once borrow without waiting
    driver = await ASYNC_CONNECTS[mode](database_url, min_size=4, max_size=4)
    try:
        sleep_then_pid = "SELECT pg_backend_pid() FROM pg_sleep(0.05)"
        first = await asyncio.gather(*(driver.query(sleep_then_pid) for _ in range(3)))
        assert len(driver._hot._kept) == 3  # all three kept
        assert _idle_in_pool(driver) == 1
        again = await asyncio.gather(*(driver.query(sleep_then_pid) for _ in range(3)))
        assert {_pid_of(r) for r in again} == {_pid_of(r) for r in first}
        # four at once: the pool's last connection is lent, and not kept afterwards
        await asyncio.gather(*(driver.query(sleep_then_pid) for _ in range(4)))
        assert len(driver._hot._kept) == 3
        assert _idle_in_pool(driver) == 1
    finally:
        await asyncio.wait_for(driver.close(), 10)


@pytest.mark.parametrize("mode", sorted(ASYNC_CONNECTS))
async def test_a_caller_waiting_for_the_pool_gets_the_connection(
    database_url: str, db: Any, mode: str
) -> None:
    # Pool of 2. A holds one connection in a transaction until W has run; B's statement holds
    # the other while W starts to wait for the pool. When B ends, its connection must go to W
    # (not be kept): else W waits forever, and A with it.
    driver = await ASYNC_CONNECTS[mode](database_url, min_size=1, max_size=2)
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
        # A holds its transaction open and B's statement runs: both connections are taken
        await wait_until(
            lambda: _sessions(db, "idle in transaction") and _sessions(db, "active", "pg_sleep"),
            what="A in its transaction and B's statement running",
        )
        await asyncio.wait_for(asyncio.gather(w(), b, task_a), 20)
        assert w_ran.is_set()
    finally:
        await asyncio.wait_for(driver.close(), 10)


@pytest.mark.parametrize("mode", sorted(ASYNC_CONNECTS))
async def test_failed_cancelled_and_killed_statements_give_their_connection_back(
    database_url: str, db: Any, mode: str
) -> None:
    driver = await ASYNC_CONNECTS[mode](database_url, min_size=1, max_size=2)
    try:
        for _ in range(10):  # more failures than the pool has connections: none is leaked
            with pytest.raises(DatabaseError):
                await driver.query("SELECT 1 / 0")
        slow = asyncio.create_task(driver.query("SELECT pg_sleep(5)"))
        await wait_until(
            lambda: _sessions(db, "active", "pg_sleep(5)"), what="the statement running"
        )
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        # the kept connection, killed by the server: one statement fails, the next gets a
        # working connection
        pid = _pid_of(await driver.query("SELECT pg_backend_pid()"))
        _terminate(database_url, pid)
        with pytest.raises(DatabaseError):
            await driver.query("SELECT 1")
        rows = await asyncio.wait_for(
            asyncio.gather(*(driver.query("SELECT pg_backend_pid()") for _ in range(4))), 20
        )
        assert pid not in {_pid_of(r) for r in rows}
    finally:
        await asyncio.wait_for(driver.close(), 10)


def test_sync_threads_share_the_pool_and_the_kept_connection(database_url: str) -> None:
    driver = psycopg_sync_connect(database_url, min_size=1, max_size=2)
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
        pids = {_pid_of(driver.query("SELECT pg_backend_pid()")) for _ in range(5)}
        assert len(pids) == 1
        assert _idle_in_pool(driver) == 0  # min 1: the pool's one connection is the kept one
        a = threading.Thread(target=hold_until_w_ran)
        a.start()
        b = threading.Thread(target=lambda: driver.query("SELECT pg_sleep(0.3)"))
        b.start()
        w_thread = threading.Thread(target=w)
        w_thread.start()
        for thread in (a, b, w_thread):
            thread.join(30)
            assert not thread.is_alive()
        assert not errors
        assert w_ran.is_set()
        # many threads at once, more than the pool holds, then one by one again
        threads = [
            threading.Thread(target=lambda: driver.query("SELECT pg_sleep(0.01)")) for _ in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
            assert not thread.is_alive()
        with pytest.raises(DatabaseError):
            driver.query("SELECT 1 / 0")
        assert _pid_of(driver.query("SELECT pg_backend_pid()"))
    finally:
        driver.close()
