"""The psycopg 3 adapter: ``AsyncDriver`` on a psycopg ``AsyncConnectionPool`` or connection.

The driver shells: which connection a statement runs on, and in which transaction. What runs
on a connection (statements, LISTEN, advisory locks, COPY, error translation) is in the
library module (pgqueue_adapters/psycopg/_async_library.py and its sync twin), which the
SQLAlchemy adapter shares.

Written once, for asyncio, in pgqueue_adapters/psycopg/_async.py; the sync adapter in
pgqueue_adapters/psycopg/_sync.py is generated from it.
"""

from __future__ import annotations

import inspect  # async-only
import itertools
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from pgqueue.driver import AsyncLock, AsyncTxDriverBase, Params, Row, async_advisory_lock_once
from pgqueue.errors import ConfigurationError, ConnectionLost, DatabaseError

from .._hot import HotConnection
from ._async_library import (  # sync: from ._sync_library import (
    AsyncPsycopgAdvisoryLock,
    AsyncPsycopgListener,
    async_copy_rows,
    async_open_session,
    async_run,
    translate_error,
)

__all__ = [
    "AsyncPsycopgDriver",
    "AsyncPsycopgTxDriver",
    "async_connect",
    "async_from_native",
    "async_wrap_transaction",
]

_savepoint_ids = itertools.count(1)

# Where to go with an object of the other side (the sync twin gets the mirror text).
_OTHER_SIDE = "Client takes sync ones"  # sync: _OTHER_SIDE = "AsyncClient takes async ones"


async def _resolve(value: Any) -> Any:
    """Return ``value``, or what it computes when it is a callable (sync or async)."""
    if callable(value):
        value = value()
        if inspect.isawaitable(value):  # async-only
            value = await value  # async-only
    return value


def _dedicated_conninfo(conninfo: str, password: str | None) -> str:
    # conn.info.dsn omits the password; put it back so dedicated sessions can log in too.
    if password and "password" not in psycopg.conninfo.conninfo_to_dict(conninfo):
        return psycopg.conninfo.make_conninfo(conninfo, password=password)
    return conninfo


class AsyncPsycopgDriver:
    """``AsyncDriver`` over psycopg 3: a pool, or one connection shared under a lock.

    Statements outside ``with_tx`` commit on their own. Listeners and advisory locks always get
    a dedicated connection, opened with the same connection parameters, or on ``session_url``
    when given (a direct route around a transaction pooler). ``close()`` closes a pool the
    driver opened itself (see :func:`async_connect`), never one it was handed.
    """

    def __init__(
        self,
        source: AsyncConnectionPool[Any] | AsyncConnection[Any],
        *,
        owns_source: bool = False,
        session_url: str | None = None,
    ) -> None:
        self._pool: AsyncConnectionPool[Any] | None = None
        self._conn: AsyncConnection[Any] | None = None
        self._conninfo: Any
        self._connect_kwargs: Any
        if isinstance(source, AsyncConnectionPool):
            self._pool = source
            # Kept as given: a pool may compute them per connection (callables, psycopg_pool 3.3).
            self._conninfo = source.conninfo
            self._connect_kwargs = source.kwargs
        elif isinstance(source, AsyncConnection):
            self._conn = source
            self._conninfo = _dedicated_conninfo(source.info.dsn, source.info.password)
            self._connect_kwargs = {}
        else:
            raise ConfigurationError(
                "AsyncPsycopgDriver needs a psycopg AsyncConnectionPool or AsyncConnection, "
                f"got {type(source).__name__}"
            )
        if session_url is not None:
            # LISTEN and advisory locks go straight to the server (around a transaction pooler)
            self._conninfo, self._connect_kwargs = session_url, {}
        self._owns_source = owns_source
        self._lock = AsyncLock()
        # Only for a pool of our own (autocommit connections) of two or more: all but one may be
        # kept (pgqueue_adapters/_hot.py).
        size = self._pool.max_size if self._pool is not None else 0
        self._hot = HotConnection(owns_source and size >= 2, size - 1)

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        if self._pool is not None and self._hot.enabled:
            # A connection kept from an earlier statement, else one from the pool (_hot.py).
            hot = self._hot.take()
            if hot is None:
                with self._hot.waiting():
                    conn = await self._pool.getconn()
                since = self._hot.now()
            else:
                conn, since = hot
            try:
                yield conn
            except BaseException:
                await self._pool.putconn(conn)  # rolled back, or replaced, by the pool
                raise
            idle = not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE
            if not idle or not self._hot.keep(conn, since):
                await self._pool.putconn(conn)
        elif self._pool is not None:
            async with self._pool.connection() as conn:
                yield conn
        else:
            assert self._conn is not None
            async with self._lock:
                yield self._conn

    @asynccontextmanager
    async def _idle_connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        async with self._connection() as conn:
            # Work of ours must commit on its own; on a connection the caller left inside a
            # transaction it would only become a savepoint of theirs.
            if self._conn is not None and conn.info.transaction_status != TransactionStatus.IDLE:
                raise ConfigurationError(
                    "the connection given to pgqueue is inside a transaction "
                    f"({conn.info.transaction_status.name}): give pgqueue an idle connection "
                    "(or a pool), and use add_job_with_tx to enqueue inside your transaction"
                )
            yield conn

    async def _statement(self, query: str, params: Params, fetch: bool) -> list[Row]:
        async with self._idle_connection() as conn:
            if conn.autocommit:
                return await async_run(conn, query, params, fetch)
            try:
                async with conn.transaction():
                    return await async_run(conn, query, params, fetch)
            except psycopg.Error as exc:
                raise translate_error(exc) from exc

    async def exec(self, sql: str, params: Params = ()) -> None:
        """Run one statement in its own transaction."""
        await self._statement(sql, params, False)

    async def query(self, sql: str, params: Params = ()) -> list[Row]:
        """Run one statement in its own transaction and return its rows."""
        return await self._statement(sql, params, True)

    @asynccontextmanager
    async def with_tx(self) -> AsyncIterator[AsyncPsycopgTxDriver]:
        """Run the block in a transaction on one connection; yields a driver bound to it."""
        try:
            async with self._idle_connection() as conn, conn.transaction():
                yield AsyncPsycopgTxDriver(conn, parent=self)
        except psycopg.Error as exc:
            raise translate_error(exc) from exc

    async def _dedicated(self) -> AsyncConnection[Any]:
        conninfo = await _resolve(self._conninfo)
        return await async_open_session(conninfo, **(await _resolve(self._connect_kwargs) or {}))

    async def listener(self, channel: str) -> AsyncPsycopgListener:
        """Open a dedicated connection that LISTENs on ``channel``."""
        return await AsyncPsycopgListener.start(await self._dedicated(), channel)

    async def try_advisory_lock(
        self, key: int, idle_timeout: float | None = None
    ) -> AsyncPsycopgAdvisoryLock | None:
        """Try to take advisory lock ``key`` on a new dedicated connection, without waiting.

        ``idle_timeout``: see ``AsyncDriver.try_advisory_lock``.
        """
        return await async_advisory_lock_once(await self.advisory_lock(key, idle_timeout))

    async def advisory_lock(
        self, key: int, idle_timeout: float | None = None
    ) -> AsyncPsycopgAdvisoryLock:
        """Open a dedicated connection for advisory lock ``key``, not yet taken (``try_take``).

        ``idle_timeout``: see ``AsyncDriver.advisory_lock``.
        """
        return await AsyncPsycopgAdvisoryLock.open(await self._dedicated(), key, idle_timeout)

    async def copy_records(
        self,
        schema: str,
        table: str,
        columns: Sequence[str],
        records: Iterable[Sequence[Any]],
    ) -> int:
        """Load ``records`` into ``schema.table`` with ``COPY FROM STDIN``, in one transaction."""
        try:
            async with self._idle_connection() as conn, conn.transaction():
                return await async_copy_rows(conn, schema, table, columns, records)
        except psycopg.Error as exc:
            raise translate_error(exc) from exc

    async def close(self) -> None:
        """Close the pool if this driver opened it; otherwise leave the caller's objects open."""
        if self._owns_source and self._pool is not None:
            for kept in self._hot.close():
                await self._pool.putconn(kept)
            await self._pool.close()


class AsyncPsycopgTxDriver(AsyncTxDriverBase):
    """A driver bound to one connection inside an open transaction (ours or the caller's).

    It never commits or rolls back; nested ``with_tx`` makes a savepoint.
    """

    def __init__(self, conn: AsyncConnection[Any], parent: AsyncPsycopgDriver | None) -> None:
        self._conn = conn
        self._parent = parent

    async def exec(self, sql: str, params: Params = ()) -> None:
        """Run one statement in the transaction."""
        await async_run(self._conn, sql, params, False)

    async def query(self, sql: str, params: Params = ()) -> list[Row]:
        """Run one statement in the transaction and return its rows."""
        return await async_run(self._conn, sql, params, True)

    @asynccontextmanager
    async def with_tx(self) -> AsyncIterator[AsyncPsycopgTxDriver]:
        """Run the block in a savepoint of the current transaction.

        On an autocommit connection outside a transaction (where each statement commits on its
        own) the block runs in a transaction of its own instead, so that it commits as one.
        """
        conn = self._conn
        if conn.autocommit or conn.info.transaction_status != TransactionStatus.IDLE:
            # psycopg's transaction(): a savepoint inside a transaction, else BEGIN ... COMMIT
            try:
                async with conn.transaction():
                    yield self
            except psycopg.Error as exc:
                raise translate_error(exc) from exc
            return
        # Not autocommit, and idle: psycopg's transaction() would open the caller's transaction
        # and commit it at the end of the block. A savepoint statement makes psycopg open that
        # transaction implicitly, as any statement does, and leaves it to the caller.
        name = f"pgqueue_sp_{next(_savepoint_ids)}"
        await async_run(conn, f"SAVEPOINT {name}", (), False)
        try:
            yield self
        except BaseException:
            with suppress(DatabaseError):  # the block's error says more
                await async_run(conn, f"ROLLBACK TO SAVEPOINT {name}", (), False)
            raise
        await async_run(conn, f"RELEASE SAVEPOINT {name}", (), False)


async def async_connect(
    url: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    session_url: str | None = None,
    pgbouncer: bool = False,
) -> AsyncPsycopgDriver:
    """Open a pool on ``url`` and return a driver that owns it (closed by ``driver.close()``).

    ``session_url``: where dedicated sessions (LISTEN, the leader's lock) connect instead of
    ``url``. ``pgbouncer``: ``url`` leads to a transaction pooler, so the pool's connections
    never prepare statements (``prepare_threshold=None``): the pooler may run the next
    statement on another server session, where the prepared one does not exist.
    """
    kwargs: dict[str, Any] = {"autocommit": True}
    if pgbouncer:
        kwargs["prepare_threshold"] = None
    for target in (url, session_url):
        if target is None:
            continue
        try:
            # Connect once first: a wrong URL fails now with the server's message, instead of
            # the pool retrying in the background until its timeout.
            probe = await AsyncConnection.connect(target)
            await probe.close()
        except psycopg.Error as exc:
            raise ConnectionLost(f"cannot connect to the database: {exc}".strip()) from exc
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        url, min_size=min_size, max_size=max_size, open=False, kwargs=kwargs
    )
    await pool.open(wait=True)
    return AsyncPsycopgDriver(pool, owns_source=True, session_url=session_url)


def _check_unprepared(obj: AsyncConnectionPool[Any] | AsyncConnection[Any]) -> None:
    """Refuse a pool or connection that prepares statements, for ``pgbouncer=True``."""
    if isinstance(obj, AsyncConnectionPool):
        kwargs = obj.kwargs
        if callable(kwargs):  # computed per connection: cannot be checked here
            return
        threshold = (kwargs or {}).get("prepare_threshold", 5)
    else:
        threshold = obj.prepare_threshold
    if threshold is not None:
        raise ConfigurationError(
            "behind PgBouncer's transaction pooling, psycopg must not prepare statements (the "
            "next statement may run on another server session): open the pool with "
            "kwargs={'prepare_threshold': None} (a connection: prepare_threshold=None)"
        )


def async_from_native(
    obj: object, *, session_url: str | None = None, pgbouncer: bool = False
) -> AsyncPsycopgDriver:
    """Return a driver that uses a caller's ``AsyncConnectionPool`` or ``AsyncConnection``.

    ``session_url`` and ``pgbouncer``: see :func:`async_connect`; with ``pgbouncer`` the pool
    must already be configured not to prepare statements.
    """
    if isinstance(obj, AsyncConnectionPool | AsyncConnection):
        if pgbouncer:
            _check_unprepared(obj)
        return AsyncPsycopgDriver(obj, session_url=session_url)
    raise ConfigurationError(
        f"cannot use a {type(obj).__module__}.{type(obj).__qualname__} here: pass a psycopg "
        f"AsyncConnectionPool or AsyncConnection ({_OTHER_SIDE})"
    )


def async_wrap_transaction(obj: object) -> AsyncPsycopgTxDriver:
    """Return a driver that runs statements in the caller's ``AsyncConnection`` transaction."""
    if isinstance(obj, AsyncConnection):
        return AsyncPsycopgTxDriver(obj, parent=None)
    raise ConfigurationError(
        f"cannot enqueue in a {type(obj).__module__}.{type(obj).__qualname__}: pass the "
        f"psycopg AsyncConnection that holds your transaction ({_OTHER_SIDE})"
    )
