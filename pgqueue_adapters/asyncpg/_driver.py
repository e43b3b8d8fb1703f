"""The asyncpg adapter: ``AsyncDriver`` on an asyncpg ``Pool`` or ``Connection``.

asyncpg is asyncio-only, so unlike the psycopg adapter this module has no generated sync twin;
the ``sync_*`` entry points only explain that.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from pgqueue._async.driver import AsyncTxDriverBase
from pgqueue.adapter_registry import (
    LOCK_IDLE_TIMEOUT_SQL,
    LOST_SQLSTATES,
    Notification,
    Params,
    Row,
    idle_timeout_setting,
)
from pgqueue.errors import ConfigurationError, ConnectionLost, DatabaseError

__all__ = [
    "AsyncpgAdvisoryLock",
    "AsyncpgDriver",
    "AsyncpgListener",
    "AsyncpgTxDriver",
    "async_connect",
    "async_from_native",
    "async_wrap_transaction",
    "sync_connect",
    "sync_from_native",
    "sync_wrap_transaction",
    "translate_error",
]

# asyncpg reports a connection it can no longer use with an InterfaceError worded like these.
_LOST_INTERFACE = re.compile(r"closed|closing|released back to the pool|terminated", re.IGNORECASE)
# What asyncpg (and the sockets under it) raise; anything else is not ours to translate.
_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    OSError,  # includes TimeoutError (asyncpg's command_timeout)
)
# Connecting also raises ValueError (asyncpg's verdict on a malformed URL).
_CONNECT_ERRORS: tuple[type[BaseException], ...] = (*_ERRORS, ValueError)
_SYNC_REFUSAL = (
    "asyncpg is asyncio-only: use pgqueue.AsyncClient, or the psycopg or sqlalchemy driver for "
    "sync code"
)
# How long closing a dedicated session may take before the socket is simply dropped.
_CLOSE_TIMEOUT = 5.0
_savepoint_ids = itertools.count(1)


def translate_error(exc: BaseException) -> DatabaseError:
    """Map an asyncpg (or socket) exception to pgqueue's driver-independent errors."""
    message = str(exc).strip() or type(exc).__name__
    if isinstance(exc, asyncpg.PostgresError):
        state: str | None = getattr(exc, "sqlstate", None)
        detail = getattr(exc, "detail", None)
        if detail:
            message = f"{message}\nDETAIL: {detail}"
        if isinstance(exc, asyncpg.PostgresConnectionError) or (
            state is not None and (state.startswith("08") or state in LOST_SQLSTATES)
        ):
            return ConnectionLost(f"lost the database connection: {message}", state)
        return DatabaseError(message, state, getattr(exc, "constraint_name", None))
    if isinstance(exc, asyncpg.InterfaceError) and _LOST_INTERFACE.search(message):
        return ConnectionLost(f"lost the database connection: {message}")
    if isinstance(exc, TimeoutError):
        # asyncpg's command_timeout: the statement was cancelled, the connection is still usable.
        return DatabaseError(f"the statement timed out on the client: {message}")
    if isinstance(exc, OSError):
        return ConnectionLost(f"lost the database connection: {message}")
    return DatabaseError(message)


async def _run(conn: Any, query: str, params: Params, fetch: bool) -> list[Row]:
    try:
        if fetch:
            return [tuple(record) for record in await conn.fetch(query, *params)]
        if params:
            await conn.execute(query, *params)
        else:
            # Without parameters asyncpg uses the simple protocol, which also takes a script of
            # several statements (a migration file).
            await conn.execute(query)
        return []
    except _ERRORS as exc:
        raise translate_error(exc) from exc


async def _close_quietly(conn: Any) -> None:
    """Close a dedicated session; drop the socket if it cannot be closed politely."""
    if conn.is_closed():
        return
    try:
        await conn.close(timeout=_CLOSE_TIMEOUT)
    except Exception:
        conn.terminate()
    except BaseException:  # cancelled: do not leave the socket open
        conn.terminate()
        raise


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
        self, source: asyncpg.Pool | asyncpg.Connection, *, owns_source: bool = False
    ) -> None:
        self._pool: Any = None
        self._conn: Any = None
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

    @asynccontextmanager
    async def _idle_connection(self) -> AsyncIterator[Any]:
        if self._pool is not None:
            try:
                conn = await self._pool.acquire()
            except _ERRORS as exc:
                raise translate_error(exc) from exc
            try:
                yield conn
            finally:
                # If asyncpg cannot reset the connection it terminates it; the pool opens another.
                with contextlib.suppress(*_ERRORS):
                    await self._pool.release(conn)
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

    async def _statement(self, query: str, params: Params, fetch: bool) -> list[Row]:
        async with self._idle_connection() as conn:
            return await _run(conn, query, params, fetch)

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
            except _ERRORS as exc:
                raise translate_error(exc) from exc
            try:
                yield AsyncpgTxDriver(conn, parent=self)
            except BaseException:
                with contextlib.suppress(*_ERRORS):  # else the connection is gone, and the tx too
                    await transaction.rollback()
                raise
            try:
                await transaction.commit()
            except _ERRORS as exc:
                raise translate_error(exc) from exc

    async def _dedicated(self) -> Any:
        # Computed before connecting so that a connection that cannot be copied says so.
        kwargs = None if self._pool is not None else _connection_connect_kwargs(self._conn)
        try:
            if kwargs is None:
                return await _connect_like_pool(self._pool)
            return await asyncpg.connect(**kwargs)
        except _ERRORS as exc:
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
        return await AsyncpgAdvisoryLock.acquire(await self._dedicated(), key, idle_timeout)

    async def copy_records(
        self,
        schema: str,
        table: str,
        columns: Sequence[str],
        records: Iterable[Sequence[Any]],
    ) -> int:
        """Load ``records`` into ``schema.table`` with ``COPY FROM STDIN``, in one transaction."""
        async with self.with_tx() as tx:
            try:
                status = await tx.connection.copy_records_to_table(
                    table, records=records, columns=list(columns), schema_name=schema
                )
            except _ERRORS as exc:
                raise translate_error(exc) from exc
        return int(str(status).rsplit(" ", 1)[-1])  # "COPY <n>"

    async def close(self) -> None:
        """Close the pool (or connection) if this driver opened it; leave the caller's open."""
        if not self._owns_source:
            return
        if self._pool is not None:
            await self._pool.close()
        elif self._conn is not None:
            await _close_quietly(self._conn)


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
        await _run(self._conn, sql, params, False)

    async def query(self, sql: str, params: Params = ()) -> list[Row]:
        """Run one statement in the transaction and return its rows."""
        return await _run(self._conn, sql, params, True)

    @asynccontextmanager
    async def with_tx(self) -> AsyncIterator[AsyncpgTxDriver]:
        """Run the block in a savepoint of the current transaction."""
        # Plain SAVEPOINT statements rather than conn.transaction(): they also work in a
        # transaction the caller opened with a bare BEGIN, which asyncpg refuses to nest in.
        name = f"pgqueue_sp_{next(_savepoint_ids)}"
        await _run(self._conn, f"SAVEPOINT {name}", (), False)
        try:
            yield self
        except BaseException:
            with contextlib.suppress(DatabaseError):  # else the connection is gone, and the tx too
                await _run(
                    self._conn, f"ROLLBACK TO SAVEPOINT {name}; RELEASE SAVEPOINT {name}", (), False
                )
            raise
        await _run(self._conn, f"RELEASE SAVEPOINT {name}", (), False)


class AsyncpgListener:
    """A dedicated connection LISTENing on one channel; notifications queue up until ``wait``."""

    def __init__(self, conn: Any, channel: str) -> None:
        self._conn = conn
        self._channel = channel
        self._pid: int = conn.get_server_pid()
        # Notifications, then None once the session has died.
        self._queue: asyncio.Queue[Notification | None] = asyncio.Queue()
        self._lost = False
        self._closed = False

    @classmethod
    async def start(cls, conn: asyncpg.Connection, channel: str) -> AsyncpgListener:
        """LISTEN on ``channel`` on ``conn`` (dedicated; the listener owns it)."""
        listener = cls(conn, channel)
        try:
            conn.add_termination_listener(listener._on_terminated)
            # add_listener quotes the channel and sends LISTEN.
            await conn.add_listener(channel, listener._on_notification)
        except BaseException as exc:
            await _close_quietly(conn)
            if isinstance(exc, _ERRORS):
                raise translate_error(exc) from exc
            raise
        return listener

    def _on_notification(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        self._queue.put_nowait(Notification(channel, payload, pid))

    def _on_terminated(self, conn: Any) -> None:
        self._queue.put_nowait(None)

    @property
    def channel(self) -> str:
        """The channel listened to."""
        return self._channel

    @property
    def backend_pid(self) -> int:
        """The backend pid of the listening session."""
        return self._pid

    def _drain(self, out: list[Notification]) -> list[Notification]:
        while not self._lost and not self._queue.empty():
            item = self._queue.get_nowait()
            if item is None:
                self._lost = True
            else:
                out.append(item)
        return out

    def _check_alive(self) -> None:
        if self._closed:
            raise ConnectionLost("the listener is closed")
        if self._lost or self._conn.is_closed():
            self._lost = True
            raise ConnectionLost(
                "the listening connection was closed (backend terminated or network lost); "
                "notifications may have been missed"
            )

    async def wait(self, timeout: float) -> list[Notification]:
        """Return notifications arriving within ``timeout`` seconds (empty list on timeout).

        Raises :class:`pgqueue.ConnectionLost` once the session has died (after handing out
        what arrived before).
        """
        if self._closed:
            raise ConnectionLost("the listener is closed")
        if out := self._drain([]):
            return out
        self._check_alive()
        try:
            async with asyncio.timeout(max(timeout, 0)):
                item = await self._queue.get()
        except TimeoutError:
            self._check_alive()
            return []
        if item is None:
            self._lost = True
            self._check_alive()
        assert item is not None
        return self._drain([item])

    async def close(self) -> None:
        """Stop listening and close the connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._conn.remove_termination_listener(self._on_terminated)
        await _close_quietly(self._conn)


class AsyncpgAdvisoryLock:
    """A session advisory lock held by a dedicated connection."""

    def __init__(self, conn: Any, key: int) -> None:
        self._conn = conn
        self._key = key
        self._pid: int = conn.get_server_pid()

    @classmethod
    async def acquire(
        cls, conn: asyncpg.Connection, key: int, idle_timeout: float | None = None
    ) -> AsyncpgAdvisoryLock | None:
        """Try to lock ``key`` on ``conn`` (dedicated; the lock owns it).

        Closes ``conn`` and returns ``None`` when another session holds the lock.
        """
        try:
            rows = await _run(conn, "SELECT pg_try_advisory_lock($1)", (key,), True)
            if rows[0][0] and idle_timeout is not None:
                await _run(conn, LOCK_IDLE_TIMEOUT_SQL, (idle_timeout_setting(idle_timeout),), True)
        except BaseException:
            await _close_quietly(conn)
            raise
        if not rows[0][0]:
            await _close_quietly(conn)
            return None
        return cls(conn, key)

    @property
    def key(self) -> int:
        """The lock key."""
        return self._key

    @property
    def backend_pid(self) -> int:
        """The backend pid of the session holding the lock."""
        return self._pid

    async def is_held(self) -> bool:
        """Return True if the session is alive and pg_locks shows it holding the lock."""
        if self._conn.is_closed():
            return False
        # pg_locks splits a bigint key into classid (high 32 bits) and objid (low 32 bits).
        try:
            rows = await _run(
                self._conn,
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' "
                "AND pid = pg_backend_pid() AND granted AND objsubid = 1 "
                "AND classid::bigint = $1 AND objid::bigint = $2)",
                ((self._key >> 32) & 0xFFFFFFFF, self._key & 0xFFFFFFFF),
                True,
            )
        except ConnectionLost:
            return False
        return bool(rows[0][0])

    async def release(self) -> None:
        """Unlock and close the session (closing alone would release it too). Idempotent."""
        if self._conn.is_closed():
            return
        try:
            await _run(self._conn, "SELECT pg_advisory_unlock($1)", (self._key,), True)
        except DatabaseError:
            pass  # the session is gone, and the lock with it
        finally:
            await _close_quietly(self._conn)


async def _keep_session(conn: Any) -> None:
    """Pool reset for the pools pgqueue opens: nothing beyond asyncpg's own rollback.

    asyncpg's default reset (``RESET ALL; UNLISTEN *; pg_advisory_unlock_all(); ...``) costs a
    round trip on every release, which doubled the cost of ``add_job``. pgqueue's pooled
    connections never change session state (LISTEN and advisory locks use dedicated sessions),
    and asyncpg still rolls back a transaction left open before calling this. Pools handed in
    by the caller keep whatever reset the caller chose.
    """


async def async_connect(url: str, *, min_size: int = 1, max_size: int = 10) -> AsyncpgDriver:
    """Open a pool on ``url`` and return a driver that owns it (closed by ``driver.close()``)."""
    try:
        # Connect once first: a wrong URL fails now with the server's message.
        probe = await asyncpg.connect(url)
        await probe.close()
    except _CONNECT_ERRORS as exc:
        raise ConnectionLost(f"cannot connect to the database: {exc}".strip()) from exc
    try:
        pool = await asyncpg.create_pool(
            url, min_size=min(min_size, max_size), max_size=max_size, reset=_keep_session
        )
    except _ERRORS as exc:
        raise ConnectionLost(f"cannot connect to the database: {exc}".strip()) from exc
    return AsyncpgDriver(pool, owns_source=True)


def async_from_native(obj: object) -> AsyncpgDriver:
    """Return a driver that uses a caller's asyncpg ``Pool`` or ``Connection`` (never closed)."""
    if isinstance(obj, (asyncpg.Pool, asyncpg.Connection, PoolConnectionProxy)):
        return AsyncpgDriver(obj)
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


def sync_connect(url: str, *, min_size: int = 1, max_size: int = 10) -> Any:
    """Refuse: asyncpg has no sync API."""
    raise ConfigurationError(_SYNC_REFUSAL)


def sync_from_native(obj: object) -> Any:
    """Refuse: asyncpg has no sync API."""
    raise ConfigurationError(_SYNC_REFUSAL)


def sync_wrap_transaction(obj: object) -> Any:
    """Refuse: asyncpg has no sync API."""
    raise ConfigurationError(_SYNC_REFUSAL)
