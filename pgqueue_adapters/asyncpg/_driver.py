"""The asyncpg adapter: ``AsyncDriver`` on an asyncpg ``Pool`` or ``Connection``.

The driver shells: which connection a statement runs on, and in which transaction, and how to
open a dedicated session like a given pool or connection. What runs on a connection
(statements, LISTEN, advisory locks, COPY, error translation) is in ``_library``, which the
SQLAlchemy adapter shares. asyncpg is asyncio-only, so unlike the psycopg adapter this module
has no generated sync twin; the ``sync_*`` entry points only explain that.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any, NoReturn

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from pgqueue.driver import AsyncTxDriverBase, Params, Row, async_advisory_lock_once
from pgqueue.errors import ConfigurationError, ConnectionLost, DatabaseError

from .._hot import HotConnection
from ._library import (
    ERRORS,
    AsyncpgAdvisoryLock,
    AsyncpgListener,
    close_quietly,
    copy_rows,
    open_session,
    run,
    translate_error,
)

__all__ = [
    "AsyncpgDriver",
    "AsyncpgTxDriver",
    "async_connect",
    "async_from_native",
    "async_wrap_transaction",
    "sync_connect",
    "sync_from_native",
    "sync_wrap_transaction",
]

# Connecting also raises ValueError (asyncpg's verdict on a malformed URL).
_CONNECT_ERRORS: tuple[type[BaseException], ...] = (*ERRORS, ValueError)
_SYNC_REFUSAL = (
    "asyncpg is asyncio-only: use pgqueue.AsyncClient, or the psycopg or sqlalchemy driver for "
    "sync code"
)
_savepoint_ids = itertools.count(1)


def _enum_value(value: Any) -> Any:
    """Return the plain value of one of asyncpg's string enums (its str() is the member name)."""
    return getattr(value, "value", value)


def _connection_connect_kwargs(conn: Any) -> dict[str, Any]:
    """Return ``asyncpg.connect`` arguments that open a session like ``conn``'s.

    asyncpg keeps what it connected with on the connection: the address it chose (``_addr``),
    the resolved parameters (``_params``: user, password, database, TLS settings...) and the
    client configuration (``_config``).
    """
    try:
        addr = conn._addr
        params = conn._params
        config = conn._config
    except AttributeError as exc:
        raise ConfigurationError(
            "cannot open a dedicated session (for LISTEN or an advisory lock) like the given "
            f"asyncpg connection: this asyncpg version does not expose its parameters ({exc}). "
            "Hand pgqueue an asyncpg Pool, or a URL, instead of a single connection"
        ) from exc
    kwargs: dict[str, Any] = {
        "user": params.user,
        "password": params.password,  # may be a callable: asyncpg calls it again
        "database": params.database,
        "server_settings": params.server_settings,
        "command_timeout": config.command_timeout,
        "statement_cache_size": config.statement_cache_size,
        "max_cached_statement_lifetime": config.max_cached_statement_lifetime,
        "max_cacheable_statement_size": config.max_cacheable_statement_size,
    }
    if isinstance(addr, str):  # a Unix socket path (".../.s.PGSQL.5432"): no TLS there
        kwargs["host"] = addr
        kwargs["ssl"] = False
    else:
        kwargs["host"], kwargs["port"] = addr[0], addr[1]
        # Use TLS exactly when the original session does: with sslmode=prefer or allow asyncpg
        # may have settled on either, and its context carries the certificates and checks.
        uses_tls = getattr(conn._protocol, "is_ssl", None)
        if uses_tls is None:
            uses_tls = conn._transport.get_extra_info("ssl_object") is not None
        if uses_tls and params.ssl is not None:
            kwargs["ssl"] = params.ssl
            negotiation = getattr(params, "ssl_negotiation", None)
            if negotiation is not None:
                kwargs["direct_tls"] = _enum_value(negotiation) == "direct"
        else:
            kwargs["ssl"] = False
    for name in ("target_session_attrs", "krbsrvname", "gsslib"):
        value = getattr(params, name, None)
        if value is not None:
            kwargs[name] = _enum_value(value)
    if isinstance(conn, asyncpg.Connection):
        kwargs["connection_class"] = type(conn)
    return kwargs


async def _connect_like_pool(pool: Any) -> Any:
    """Open a new connection the way ``pool`` opens its own (without its ``init`` hook)."""
    connect = getattr(pool, "_connect", None) or asyncpg.connect
    kwargs: dict[str, Any] = dict(pool._connect_kwargs)
    connection_class = getattr(pool, "_connection_class", None)
    if connection_class is not None:
        kwargs["connection_class"] = connection_class
    record_class = getattr(pool, "_record_class", None)
    if record_class is not None:
        kwargs["record_class"] = record_class
    return await connect(*pool._connect_args, **kwargs)


class AsyncpgDriver:
    """``AsyncDriver`` over asyncpg: a pool, or one connection shared under a lock.

    Statements outside ``with_tx`` commit on their own (asyncpg connections autocommit outside a
    transaction block). Listeners and advisory locks always get a new dedicated connection
    opened with the same connection parameters, never a pooled one. ``close()`` closes a pool
    the driver opened itself (see :func:`async_connect`), never one it was handed.
    """

    def __init__(
        self,
        source: asyncpg.Pool | asyncpg.Connection,
        *,
        owns_source: bool = False,
        session_url: str | None = None,
    ) -> None:
        self._pool: Any = None
        self._conn: Any = None
        # LISTEN and advisory locks go straight to the server (around a transaction pooler)
        self._session_url = session_url
        if isinstance(source, asyncpg.Pool):
            self._pool = source
        elif isinstance(source, (asyncpg.Connection, PoolConnectionProxy)):
            self._conn = source
        else:
            raise ConfigurationError(
                "AsyncpgDriver needs an asyncpg Pool or Connection, "
                f"got {type(source).__module__}.{type(source).__qualname__}"
            )
        self._owns_source = owns_source
        self._lock = asyncio.Lock()
        # Only for a pool of our own, of two or more: all but one may be kept (_hot.py).
        size = self._pool.get_max_size() if self._pool is not None else 0
        self._hot = HotConnection(owns_source and size >= 2, size - 1)

    @asynccontextmanager
    async def _idle_connection(self) -> AsyncIterator[Any]:
        if self._pool is not None:
            # A connection kept from an earlier statement, else one from the pool (_hot.py).
            hot = self._hot.take()
            if hot is None:
                try:
                    with self._hot.waiting():
                        conn = await self._pool.acquire()
                except ERRORS as exc:
                    raise translate_error(exc) from exc
                since = self._hot.now()
            else:
                conn, since = hot
            try:
                yield conn
            except BaseException:
                await self._release(conn)
                raise
            if conn.is_closed() or conn.is_in_transaction() or not self._hot.keep(conn, since):
                await self._release(conn)
            return
        async with self._lock:
            conn = self._conn
            # Work of ours must commit on its own; on a connection the caller left inside a
            # transaction it would only become part of theirs.
            if not conn.is_closed() and conn.is_in_transaction():
                raise ConfigurationError(
                    "the asyncpg connection given to pgqueue is inside a transaction: give "
                    "pgqueue an idle connection (or a pool), and use add_job_with_tx to enqueue "
                    "inside your transaction"
                )
            yield conn

    async def _release(self, conn: Any) -> None:
        # If asyncpg cannot reset the connection it terminates it; the pool opens another.
        with contextlib.suppress(*ERRORS):
            await self._pool.release(conn)

    async def _statement(self, query: str, params: Params, fetch: bool) -> list[Row]:
        async with self._idle_connection() as conn:
            return await run(conn, query, params, fetch)

    async def exec(self, sql: str, params: Params = ()) -> None:
        """Run one statement in its own transaction."""
        await self._statement(sql, params, False)

    async def query(self, sql: str, params: Params = ()) -> list[Row]:
        """Run one statement in its own transaction and return its rows."""
        return await self._statement(sql, params, True)

    @asynccontextmanager
    async def with_tx(self) -> AsyncIterator[AsyncpgTxDriver]:
        """Run the block in a transaction on one connection; yields a driver bound to it."""
        async with self._idle_connection() as conn:
            transaction = conn.transaction()
            try:
                await transaction.start()
            except ERRORS as exc:
                raise translate_error(exc) from exc
            try:
                yield AsyncpgTxDriver(conn, parent=self)
            except BaseException:
                with contextlib.suppress(*ERRORS):  # else the connection is gone, and the tx too
                    await transaction.rollback()
                raise
            try:
                await transaction.commit()
            except ERRORS as exc:
                raise translate_error(exc) from exc

    async def _dedicated(self) -> Any:
        if self._session_url is not None:
            return await open_session(self._session_url)
        # Computed before connecting so that a connection that cannot be copied says so.
        kwargs = None if self._pool is not None else _connection_connect_kwargs(self._conn)
        try:
            if kwargs is None:
                return await _connect_like_pool(self._pool)
            return await asyncpg.connect(**kwargs)
        except ERRORS as exc:
            raise translate_error(exc) from exc

    async def listener(self, channel: str) -> AsyncpgListener:
        """Open a dedicated connection that LISTENs on ``channel``."""
        return await AsyncpgListener.start(await self._dedicated(), channel)

    async def try_advisory_lock(
        self, key: int, idle_timeout: float | None = None
    ) -> AsyncpgAdvisoryLock | None:
        """Try to take advisory lock ``key`` on a new dedicated connection, without waiting.

        ``idle_timeout``: see ``AsyncDriver.try_advisory_lock``.
        """
        return await async_advisory_lock_once(await self.advisory_lock(key, idle_timeout))

    async def advisory_lock(
        self, key: int, idle_timeout: float | None = None
    ) -> AsyncpgAdvisoryLock:
        """Open a dedicated connection for advisory lock ``key``, not yet taken (``try_take``).

        ``idle_timeout``: see ``AsyncDriver.advisory_lock``.
        """
        return await AsyncpgAdvisoryLock.open(await self._dedicated(), key, idle_timeout)

    async def copy_records(
        self,
        schema: str,
        table: str,
        columns: Sequence[str],
        records: Iterable[Sequence[Any]],
    ) -> int:
        """Load ``records`` into ``schema.table`` with ``COPY FROM STDIN``, in one transaction."""
        async with self.with_tx() as tx:
            return await copy_rows(tx.connection, schema, table, columns, records)

    async def close(self) -> None:
        """Close the pool (or connection) if this driver opened it; leave the caller's open."""
        if not self._owns_source:
            return
        if self._pool is not None:
            for kept in self._hot.close():
                await self._release(kept)
            await self._pool.close()
        elif self._conn is not None:
            await close_quietly(self._conn)


class AsyncpgTxDriver(AsyncTxDriverBase):
    """A driver bound to one connection inside an open transaction (ours or the caller's).

    It never commits or rolls back; nested ``with_tx`` makes a savepoint.
    """

    def __init__(self, conn: Any, parent: AsyncpgDriver | None) -> None:
        self._conn = conn
        self._parent = parent

    @property
    def connection(self) -> Any:
        """The asyncpg connection the transaction runs on."""
        return self._conn

    async def exec(self, sql: str, params: Params = ()) -> None:
        """Run one statement in the transaction."""
        await run(self._conn, sql, params, False)

    async def query(self, sql: str, params: Params = ()) -> list[Row]:
        """Run one statement in the transaction and return its rows."""
        return await run(self._conn, sql, params, True)

    @asynccontextmanager
    async def with_tx(self) -> AsyncIterator[AsyncpgTxDriver]:
        """Run the block in a savepoint of the current transaction."""
        # Plain SAVEPOINT statements rather than conn.transaction(): they also work in a
        # transaction the caller opened with a bare BEGIN, which asyncpg refuses to nest in.
        name = f"pgqueue_sp_{next(_savepoint_ids)}"
        await run(self._conn, f"SAVEPOINT {name}", (), False)
        try:
            yield self
        except BaseException:
            with contextlib.suppress(DatabaseError):  # else the connection is gone, and the tx too
                await run(
                    self._conn, f"ROLLBACK TO SAVEPOINT {name}; RELEASE SAVEPOINT {name}", (), False
                )
            raise
        await run(self._conn, f"RELEASE SAVEPOINT {name}", (), False)


async def _keep_session(conn: Any) -> None:
    """Pool reset for the pools pgqueue opens: nothing beyond asyncpg's own rollback.

    asyncpg's default reset (``RESET ALL; UNLISTEN *; pg_advisory_unlock_all(); ...``) costs a
    round trip on every release, which doubled the cost of ``add_job``. pgqueue's pooled
    connections never change session state (LISTEN and advisory locks use dedicated sessions),
    and asyncpg still rolls back a transaction left open before calling this. Pools handed in
    by the caller keep whatever reset the caller chose.
    """


async def async_connect(
    url: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    session_url: str | None = None,
    pgbouncer: bool = False,
) -> AsyncpgDriver:
    """Open a pool on ``url`` and return a driver that owns it (closed by ``driver.close()``).

    ``session_url``: where dedicated sessions (LISTEN, the leader's lock) connect instead of
    ``url``. ``pgbouncer``: ``url`` leads to a transaction pooler, so the pool keeps no
    prepared statements (``statement_cache_size=0``): the pooler may run the next statement on
    another server session, where a named prepared statement does not exist.
    """
    for target in (url, session_url):
        if target is None:
            continue
        try:
            # Connect once first: a wrong URL fails now with the server's message.
            probe = await asyncpg.connect(target)
            await probe.close()
        except _CONNECT_ERRORS as exc:
            raise ConnectionLost(f"cannot connect to the database: {exc}".strip()) from exc
    extra: dict[str, Any] = {"statement_cache_size": 0} if pgbouncer else {}
    try:
        pool = await asyncpg.create_pool(
            url, min_size=min(min_size, max_size), max_size=max_size, reset=_keep_session, **extra
        )
    except ERRORS as exc:
        raise ConnectionLost(f"cannot connect to the database: {exc}".strip()) from exc
    return AsyncpgDriver(pool, owns_source=True, session_url=session_url)


def _check_uncached(obj: Any) -> None:
    """Refuse a pool or connection that caches prepared statements, for ``pgbouncer=True``."""
    if isinstance(obj, asyncpg.Pool):
        size = getattr(obj, "_connect_kwargs", {}).get("statement_cache_size", 100)
    else:
        config = getattr(obj, "_config", None)
        size = getattr(config, "statement_cache_size", 0)
    if size:
        raise ConfigurationError(
            "behind PgBouncer's transaction pooling, asyncpg must not cache prepared statements "
            "(the next statement may run on another server session): create the pool (or "
            "connection) with statement_cache_size=0"
        )


def async_from_native(
    obj: object, *, session_url: str | None = None, pgbouncer: bool = False
) -> AsyncpgDriver:
    """Return a driver that uses a caller's asyncpg ``Pool`` or ``Connection`` (never closed).

    ``session_url`` and ``pgbouncer``: see :func:`async_connect`; with ``pgbouncer`` the pool
    must already be created with ``statement_cache_size=0``.
    """
    if isinstance(obj, (asyncpg.Pool, asyncpg.Connection, PoolConnectionProxy)):
        if pgbouncer:
            _check_uncached(obj)
        return AsyncpgDriver(obj, session_url=session_url)
    raise ConfigurationError(
        f"cannot use a {type(obj).__module__}.{type(obj).__qualname__} here: pass an asyncpg "
        "Pool or Connection"
    )


def async_wrap_transaction(obj: object) -> AsyncpgTxDriver:
    """Return a driver that runs statements in the transaction open on an asyncpg connection.

    ``obj`` is an asyncpg ``Connection`` (or a connection acquired from a pool) on which the
    caller has started a transaction; pgqueue never commits or rolls it back.
    """
    if not isinstance(obj, (asyncpg.Connection, PoolConnectionProxy)):
        raise ConfigurationError(
            f"cannot enqueue in a {type(obj).__module__}.{type(obj).__qualname__}: pass the "
            "asyncpg Connection that holds your transaction"
        )
    if not obj.is_in_transaction():
        raise ConfigurationError(
            "the asyncpg connection has no open transaction, so the jobs would be committed at "
            "once: start one first (async with conn.transaction(): ...), or use add_job"
        )
    return AsyncpgTxDriver(obj, parent=None)


def sync_connect(url: str, **_options: Any) -> NoReturn:
    """Refuse: asyncpg has no sync API."""
    raise ConfigurationError(_SYNC_REFUSAL)


def sync_from_native(obj: object, **_options: Any) -> NoReturn:
    """Refuse: asyncpg has no sync API."""
    raise ConfigurationError(_SYNC_REFUSAL)


def sync_wrap_transaction(obj: object) -> NoReturn:
    """Refuse: asyncpg has no sync API."""
    raise ConfigurationError(_SYNC_REFUSAL)
