"""asyncpg-specific behaviour of the adapter (the shared contract is in _async/test_conformance.py).

asyncpg is asyncio-only, so these tests live outside ``tests/_async`` (whose files get a
generated sync twin).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest

import pgqueue
from pgqueue_adapters.asyncpg import (
    AsyncpgDriver,
    AsyncpgTxDriver,
    async_connect,
    async_from_native,
    async_wrap_transaction,
    sync_connect,
    sync_from_native,
    sync_wrap_transaction,
    translate_error,
)
from pgqueue_adapters.asyncpg._driver import _connection_connect_kwargs

pytestmark = pytest.mark.timeout(60)


async def test_pool_listener_and_lock_never_use_pooled_connections(database_url: str) -> None:
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=1)
    try:
        driver = AsyncpgDriver(pool)
        # The pool's only connection is busy: a listener or lock that needed it would hang.
        async with pool.acquire() as busy:
            busy_pid = busy.get_server_pid()
            listener = await asyncio.wait_for(driver.listener("apg-dedicated"), 5)
            lock = await asyncio.wait_for(driver.try_advisory_lock(424242), 5)
            assert lock is not None
            try:
                assert len({busy_pid, listener.backend_pid, lock.backend_pid}) == 3
                assert pool.get_size() == 1
                notify = "SELECT pg_notify('apg-dedicated', 'hi')"
                await busy.execute(notify)
                got = await listener.wait(5)
                assert [n.payload for n in got] == ["hi"]
                assert await lock.is_held()
            finally:
                await listener.close()
                await lock.release()
        # and the pooled connection is still the one the pool had
        async with pool.acquire() as conn:
            assert conn.get_server_pid() == busy_pid
    finally:
        await pool.close()


async def test_single_connection_inside_a_transaction_is_refused(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        driver = AsyncpgDriver(conn)
        transaction = conn.transaction()
        await transaction.start()  # the caller opened a transaction and left it open
        with pytest.raises(pgqueue.ConfigurationError, match="idle connection") as info:
            await driver.exec("SELECT 1")
        assert "add_job_with_tx" in str(info.value)
        with pytest.raises(pgqueue.ConfigurationError, match="idle connection"):
            async with driver.with_tx():
                pass
        await transaction.rollback()
        assert await driver.query("SELECT 1") == [(1,)]
        assert not conn.is_in_transaction()  # our statement committed on its own
    finally:
        await conn.close()


@pytest.mark.parametrize(
    ("function", "arg"),
    [
        (sync_connect, "postgresql://localhost/db"),
        (sync_from_native, object()),
        (sync_wrap_transaction, object()),
    ],
)
def test_sync_functions_refuse(function: Callable[[Any], Any], arg: object) -> None:
    with pytest.raises(pgqueue.ConfigurationError, match="asyncpg is asyncio-only"):
        function(arg)


def test_sync_client_refuses_the_asyncpg_driver(database_url: str) -> None:
    with pytest.raises(pgqueue.ConfigurationError, match=r"use pgqueue\.AsyncClient"):
        pgqueue.Client.connect(database_url, driver="asyncpg")


async def test_translate_error_on_a_unique_violation(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("CREATE TEMP TABLE t (id int CONSTRAINT t_pk PRIMARY KEY)")
        await conn.execute("INSERT INTO t VALUES (1)")
        with pytest.raises(asyncpg.UniqueViolationError) as info:
            await conn.execute("INSERT INTO t VALUES (1)")
    finally:
        await conn.close()
    error = translate_error(info.value)
    assert type(error) is pgqueue.DatabaseError
    assert error.sqlstate == "23505"
    assert error.constraint_name == "t_pk"
    assert "Key (id)=(1) already exists" in str(error)


def test_translate_error_recognises_a_lost_connection() -> None:
    lost = [
        asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
        asyncpg.AdminShutdownError("terminating connection due to administrator command"),
        asyncpg.InterfaceError("cannot perform operation: connection is closed"),
        ConnectionResetError("reset by peer"),
    ]
    for exc in lost:
        assert isinstance(translate_error(exc), pgqueue.ConnectionLost), exc
    kept = [
        asyncpg.InterfaceError("cannot perform operation: another operation is in progress"),
        asyncpg.DataError("invalid input for query argument $1"),
        TimeoutError(),  # asyncpg's command_timeout: the connection is still usable
    ]
    for exc in kept:
        error = translate_error(exc)
        assert type(error) is pgqueue.DatabaseError, exc


async def test_statements_report_parameter_type_errors(database_url: str) -> None:
    driver = await async_connect(database_url, max_size=1)
    try:
        with pytest.raises(pgqueue.DatabaseError, match="expected str"):
            await driver.query("SELECT $1::text", (5,))
        assert await driver.query("SELECT $1::text", ("ok",)) == [("ok",)]
    finally:
        await driver.close()


async def test_async_connect_owns_its_pool_and_fails_fast(database_url: str) -> None:
    driver = await async_connect(database_url, min_size=1, max_size=2)
    pool = driver._pool
    assert await driver.query("SELECT 1") == [(1,)]
    await driver.close()
    assert pool.is_closing()
    with pytest.raises(pgqueue.ConnectionLost, match="cannot connect"):
        await async_connect("postgresql://nobody@127.0.0.1:1/nothing")


async def test_client_connects_with_the_asyncpg_scheme(
    database_url: str, settings: pgqueue.Settings
) -> None:
    url = "postgresql+asyncpg://" + database_url.split("://", 1)[1]
    async with await pgqueue.AsyncClient.connect(url, settings=settings) as client:
        assert isinstance(client.driver, AsyncpgDriver)
        assert await client.migrate() != []
        assert await client.schema_version() is not None


async def test_a_native_pool_or_connection_stays_open(database_url: str) -> None:
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    try:
        driver = async_from_native(pool)
        assert await driver.query("SELECT 1") == [(1,)]
        await driver.close()
        assert not pool.is_closing()
        async with pool.acquire() as conn:
            proxy_driver = async_from_native(conn)  # a pool's connection proxy works too
            assert await proxy_driver.query("SELECT 2") == [(2,)]
            await proxy_driver.close()
            assert not conn.is_closed()
    finally:
        await pool.close()
    with pytest.raises(pgqueue.ConfigurationError, match="asyncpg Pool or Connection"):
        async_from_native(object())


async def test_dedicated_sessions_copy_the_connection_parameters(database_url: str, db) -> None:
    app = f"pgqueue-test-{uuid.uuid4().hex[:6]}"
    conn = await asyncpg.connect(
        database_url, server_settings={"application_name": app}, command_timeout=30
    )
    try:
        kwargs = _connection_connect_kwargs(conn)
        assert kwargs["server_settings"] == {"application_name": app}
        assert kwargs["command_timeout"] == 30
        assert kwargs["database"] == conn._params.database
        listener = await AsyncpgDriver(conn).listener("apg-params")
        try:
            assert listener.backend_pid != conn.get_server_pid()
            name = db.value(
                "SELECT application_name FROM pg_stat_activity WHERE pid = $1",
                (listener.backend_pid,),
            )
            assert name == app
        finally:
            await listener.close()
    finally:
        await conn.close()


def test_a_password_callable_is_kept_for_dedicated_sessions() -> None:
    # The test server trusts everyone, so check the rebuilt arguments themselves.
    def password() -> str:
        return "s3cr3t"

    fake = SimpleNamespace(
        _addr=("db.example", 6543),
        _params=SimpleNamespace(
            user="u", password=password, database="d", ssl=None, server_settings=None
        ),
        _config=SimpleNamespace(
            command_timeout=None,
            statement_cache_size=100,
            max_cached_statement_lifetime=300,
            max_cacheable_statement_size=15360,
        ),
        _protocol=SimpleNamespace(is_ssl=False),
    )
    kwargs = _connection_connect_kwargs(fake)
    assert kwargs["password"] is password  # asyncpg calls it again for the new session
    assert (kwargs["host"], kwargs["port"], kwargs["user"], kwargs["database"]) == (
        "db.example",
        6543,
        "u",
        "d",
    )
    assert kwargs["ssl"] is False


def test_a_connection_without_parameters_is_explained() -> None:
    with pytest.raises(pgqueue.ConfigurationError, match="Pool, or a URL"):
        _connection_connect_kwargs(object())


async def test_wrap_transaction_needs_an_open_transaction(database_url: str, db) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        with pytest.raises(pgqueue.ConfigurationError, match="no open transaction"):
            async_wrap_transaction(conn)
        with pytest.raises(pgqueue.ConfigurationError, match="asyncpg Connection"):
            async_wrap_transaction(object())
        # a transaction opened with a bare BEGIN (which asyncpg's own nesting refuses) still
        # gets savepoints
        await conn.execute("CREATE TEMP TABLE t (id int)")
        await conn.execute("BEGIN")
        tx = async_wrap_transaction(conn)
        assert isinstance(tx, AsyncpgTxDriver)
        await tx.exec("INSERT INTO t VALUES (1)")
        with pytest.raises(RuntimeError):
            async with tx.with_tx() as inner:
                await inner.exec("INSERT INTO t VALUES (2)")
                raise RuntimeError("undo")
        async with tx.with_tx() as inner:
            await inner.exec("INSERT INTO t VALUES (3)")
        assert conn.is_in_transaction()  # never committed for the caller
        await conn.execute("COMMIT")
        assert await conn.fetch("SELECT id FROM t ORDER BY id") == [(1,), (3,)]
        with pytest.raises(pgqueue.ConfigurationError, match="pool or a URL"):
            await tx.listener("nope")
    finally:
        await conn.close()


async def test_add_job_with_tx_on_a_pooled_connection(
    database_url: str, settings: pgqueue.Settings, db
) -> None:
    from tests._async.test_enqueue import SendEmail

    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    try:
        client = pgqueue.AsyncClient(AsyncpgDriver(pool), settings=settings)
        await client.migrate()
        async with pool.acquire() as conn, conn.transaction():
            await client.add_job_with_tx(conn, SendEmail(to="proxy"))
        jobs = f'"{settings.schema}"."{settings.prefix}jobs"'
        assert db.value(f"SELECT payload->>'to' FROM {jobs}") == "proxy"
    finally:
        await pool.close()


async def test_listener_refuses_to_wait_once_closed(database_url: str) -> None:
    driver = await async_connect(database_url, max_size=1)
    try:
        listener = await driver.listener("apg-closed")
        await listener.close()
        with pytest.raises(pgqueue.ConnectionLost):
            await listener.wait(0.01)
    finally:
        await driver.close()


async def test_copy_records_rolls_back_on_bad_rows(database_url: str, db) -> None:
    driver = await async_connect(database_url, max_size=1)
    schema = f"t_{uuid.uuid4().hex[:12]}"
    try:
        await driver.exec(f'CREATE SCHEMA "{schema}"')
        await driver.exec(f'CREATE TABLE "{schema}".c (id int PRIMARY KEY)')
        with pytest.raises(pgqueue.DatabaseError) as info:
            await driver.copy_records(schema, "c", ["id"], [(1,), (1,)])
        assert info.value.sqlstate == "23505"
        assert db.value(f'SELECT count(*) FROM "{schema}".c') == 0
        assert await driver.copy_records(schema, "c", ["id"], iter([(1,), (2,)])) == 2
    finally:
        await driver.exec(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await driver.close()


def _socket_path(port: int | None) -> str:
    socket = f"/var/run/postgresql/.s.PGSQL.{port or 5432}"
    if not os.path.exists(socket):
        pytest.skip(f"no PostgreSQL socket at {socket}")
    return socket


async def test_dedicated_sessions_over_a_unix_socket(database_url: str) -> None:
    url = urlsplit(database_url)
    socket = _socket_path(url.port)
    try:
        conn = await asyncpg.connect(
            host=os.path.dirname(socket),
            port=url.port,
            user=url.username,
            password=url.password,
            database=url.path.lstrip("/"),
        )
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.skip(f"cannot log in over {socket}: {exc}")
    try:
        assert isinstance(conn._addr, str)  # asyncpg keeps the socket path
        driver = AsyncpgDriver(conn)
        lock = await driver.try_advisory_lock(777)
        assert lock is not None
        try:
            assert lock.backend_pid != conn.get_server_pid()
            assert await lock.is_held()
        finally:
            await lock.release()
    finally:
        await conn.close()


async def test_the_store_keeps_the_drivers_error_as_the_cause(
    database_url: str, settings: pgqueue.Settings
) -> None:
    # What callers read of an error (is_data_refusal looks at its cause, a traceback shows the
    # library's message) must survive the store's error mapping.
    from pgqueue._async.store import AsyncStore
    from pgqueue.execution import is_data_refusal

    async with await pgqueue.AsyncClient.connect(
        database_url, driver="asyncpg", settings=settings
    ) as client:
        await client.migrate()
        store = AsyncStore(client.driver, settings)
        with pytest.raises(pgqueue.DatabaseError) as caught:
            await store.job_get("not a number")  # type: ignore[arg-type]
    assert isinstance(caught.value.__cause__, asyncpg.DataError)
    assert is_data_refusal(caught.value)
