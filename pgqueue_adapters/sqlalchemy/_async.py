"""The SQLAlchemy 2 adapter: ``AsyncDriver`` on an ``AsyncEngine``, ``AsyncConnection`` or session.

Written once, for asyncio, in pgqueue_adapters/sqlalchemy/_async.py; the sync adapter (on an
``Engine``, ``Connection`` or ``Session``) in pgqueue_adapters/sqlalchemy/_sync.py is generated
from it.

A single statement on an engine on the ``psycopg`` or ``asyncpg`` dialect runs on the library's
connection under a pooled one, with that library's pgqueue adapter (see _native.py: twice as
fast). The others (in a transaction, on a caller's connection or session, on another dialect,
or on an engine with event listeners) go through ``exec_driver_sql``: pgqueue's ``$1, $2, ...``
placeholders are rewritten into the DBAPI paramstyle of the engine's dialect, so they reach the
database library as they would without SQLAlchemy. Listeners, advisory locks and ``COPY``
need a library-level session, so they are supported on the ``psycopg`` dialect (and, asyncio
only, ``asyncpg``): each listener or lock opens a dedicated connection with that library, from
the engine's URL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, Protocol

import sqlalchemy.ext.asyncio as sa  # sync: import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncSession  # sync: from sqlalchemy.orm import Session
from sqlalchemy.pool import PoolProxiedConnection, QueuePool
from sqlalchemy.util import greenlet_spawn  # async-only

from pgqueue.driver import (
    AsyncAdvisoryLock,
    AsyncListener,
    AsyncLock,
    AsyncTxDriverBase,
    Params,
    Row,
    async_advisory_lock_once,
)
from pgqueue.errors import ConfigurationError, ConnectionLost, DatabaseError, DriverNotInstalled

from .._hot import HotConnection
from ._errors import DB_ERRORS, dbapi_error, translate_checkout_error, translate_error
from ._native import AUTOCOMMIT_REFUSAL, native_idle, watched
from ._placeholders import bind_params
from ._shared import Side, describe, engine_url, refuse_pgbouncer, unscope

__all__ = [
    "AsyncSQLAlchemyDriver",
    "AsyncSQLAlchemyTxDriver",
    "async_connect",
    "async_from_native",
    "async_wrap_transaction",
]

# This module's side: objects of the other side are refused with a message naming the right
# client; the libraries that can open dedicated sessions (listeners, advisory locks) and COPY.
_SIDE = Side(True, ("psycopg", "asyncpg"))  # sync: _SIDE = Side(False, ("psycopg",))


# -- helpers ------------------------------------------------------------------------------------


class _NativeRun(Protocol):
    """How a statement runs on the library's own connection (the fast path: see _native.py)."""

    async def __call__(self, native: Any, sql: str, params: Params, fetch: bool, /) -> list[Row]:
        """Run ``sql`` on ``native``; return its rows if ``fetch``."""
        ...


def _native_runner(dialect: Dialect) -> _NativeRun | None:
    """Return the psycopg or asyncpg adapter's ``run`` for the dialect's library, or ``None``."""
    # async-only: begin
    if dialect.driver == "asyncpg":
        from pgqueue_adapters.asyncpg import run

        return run
    # async-only: end
    if dialect.driver != "psycopg":
        return None
    from ..psycopg._async_library import (  # sync: from ..psycopg._sync_library import (
        async_run,
    )

    return async_run


async def _autocommit(native: Any, on: bool) -> None:
    """Switch a psycopg connection's autocommit (no round trip; asyncpg's needs no switch)."""
    switch = getattr(native, "set_autocommit", None)
    if switch is not None:
        await switch(on)


async def _give_back(pooled: PoolProxiedConnection, ran: bool = True) -> None:
    """Return a connection of the fast path to its pool as it came, or discard it if it broke.

    ``ran``: pgqueue switched it to autocommit and ran statements on it; then one that broke,
    or that a statement left inside a transaction, is invalidated (the pool opens a new one),
    as SQLAlchemy does with a connection it lost.
    """
    native = pooled.driver_connection
    if ran and native_idle(native):
        await _autocommit(native, False)
    elif ran:
        await greenlet_spawn(pooled.invalidate)  # sync: pooled.invalidate()
    await greenlet_spawn(pooled.close)  # sync: pooled.close()


async def _run(conn: sa.AsyncConnection, sql: str, params: Params, fetch: bool) -> list[Row]:
    # async-only: begin
    if not params and conn.dialect.driver == "asyncpg":
        from ._native import asyncpg_script, is_script

        if is_script(sql):
            await asyncpg_script(conn, sql)
            return []
    # async-only: end
    statement, bound = bind_params(sql, params, conn.dialect.paramstyle)
    try:
        result = await conn.exec_driver_sql(statement, bound)
    except DB_ERRORS as exc:
        raise translate_error(exc) from exc
    if fetch and result.returns_rows:
        return [tuple(row) for row in result]
    result.close()
    return []


# -- the driver ---------------------------------------------------------------------------------


class AsyncSQLAlchemyDriver:
    """``AsyncDriver`` over SQLAlchemy 2: an ``AsyncEngine``, or one ``AsyncConnection`` (locked).

    Every statement outside ``with_tx`` runs in its own transaction and commits (on an engine,
    in autocommit: one round trip, see _native.py; a driver that owns its engine keeps
    connections out of the pool between such statements, see pgqueue_adapters/_hot.py).
    Listeners and advisory locks always get a dedicated connection of the dialect's library
    (psycopg or asyncpg), opened from the engine's URL: connection arguments given to the
    engine in other ways (``connect_args``, ``do_connect`` events) do not reach it. ``close()``
    disposes of the engine only if the driver owns it (see :func:`async_connect`).
    """

    def __init__(
        self,
        source: sa.AsyncEngine | sa.AsyncConnection,
        *,
        owns_source: bool = False,
        session_url: str | None = None,
    ) -> None:
        _SIDE.refuse_other_side(source)
        # LISTEN and advisory locks go there, when given (around a transaction pooler)
        self._session_url = session_url
        self._engine: sa.AsyncEngine | None = None
        self._conn: sa.AsyncConnection | None = None
        self._native_run: _NativeRun | None = None
        if isinstance(source, sa.AsyncEngine):
            self._engine = source
            self._native_run = _native_runner(source.dialect)
        elif isinstance(source, sa.AsyncConnection):
            self._conn = source
        else:
            raise ConfigurationError(
                "AsyncSQLAlchemyDriver needs a SQLAlchemy AsyncEngine or AsyncConnection, "
                f"got {describe(source)}"
            )
        self._dialect = source.dialect
        self._url = source.engine.url
        _SIDE.check_dialect(self._dialect)
        self._owns_source = owns_source
        self._lock = AsyncLock()
        # Our own engine's single statements keep connections out of its pool between them
        # (pgqueue_adapters/_hot.py): all but one of a pool of two or more.
        pool = source.engine.pool
        size = pool.size() if isinstance(pool, QueuePool) else 0
        self._hot = HotConnection(owns_source and self._engine is not None and size >= 2, size - 1)

    @asynccontextmanager
    async def _idle_connection(self) -> AsyncIterator[sa.AsyncConnection]:
        """Yield a connection with no transaction: from the engine, or ours under the lock."""
        if self._engine is not None:
            try:
                with self._hot.waiting():
                    conn = await self._engine.connect()
            except DB_ERRORS as exc:
                raise translate_error(exc) from exc
            try:
                yield conn
            finally:
                await conn.close()
            return
        assert self._conn is not None
        async with self._lock:
            # Work of ours must commit on its own; on a connection the caller left inside a
            # transaction it would only become part of theirs.
            if self._conn.in_transaction():
                raise ConfigurationError(
                    "the SQLAlchemy connection given to pgqueue is inside a transaction: give "
                    "pgqueue an idle connection (or an engine), and use add_job_with_tx to "
                    "enqueue inside your transaction"
                )
            yield self._conn

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[sa.AsyncConnection]:
        """Yield a connection in a new transaction, committed if the block ends normally.

        Errors of the begin and the commit are translated, the block's own pass unchanged.
        """
        async with self._idle_connection() as conn:
            try:
                await conn.begin()
                await _refuse_autocommit(conn)
            except DB_ERRORS as exc:
                raise translate_error(exc) from exc
            try:
                yield conn
            except BaseException:
                # The block's error says more than a failed rollback (on a broken connection,
                # which SQLAlchemy discards anyway).
                with suppress(*DB_ERRORS):
                    await conn.rollback()
                raise
            try:
                await conn.commit()
            except DB_ERRORS as exc:
                raise translate_error(exc) from exc

    async def _native_checkout(
        self, engine: sa.AsyncEngine
    ) -> tuple[PoolProxiedConnection, float] | None:
        """Return a connection in autocommit for the fast path, and when it left the pool.

        A connection kept from an earlier statement (_hot.py), else one from the pool; ``None``
        when the pool's is inside a transaction (a pool that does not reset on return): the
        ``Connection`` path ends that.
        """
        hot = self._hot.take()
        if hot is not None:
            return hot
        try:
            with self._hot.waiting():
                pooled = await engine.raw_connection()
        except (*DB_ERRORS, dbapi_error(engine.dialect)) as exc:
            # the pool lets the library's own connect errors through (see _errors.py)
            raise translate_checkout_error(exc, engine.dialect) from exc
        autocommit = getattr(pooled.dbapi_connection, "autocommit", False) is True
        if autocommit or not native_idle(pooled.driver_connection):
            await _give_back(pooled, ran=False)
            if autocommit:  # the engine's own setting: see with_tx
                raise ConfigurationError(AUTOCOMMIT_REFUSAL)
            return None
        try:
            await _autocommit(pooled.driver_connection, True)
        except BaseException:
            await _give_back(pooled)
            raise
        return pooled, self._hot.now()

    async def _native_statement(
        self, engine: sa.AsyncEngine, run: _NativeRun, sql: str, params: Params, fetch: bool
    ) -> list[Row] | None:
        """Run one statement on the library's connection under a pooled one (see _native.py).

        ``None`` if it could not (see ``_native_checkout``). The connection stays in autocommit
        while it is kept, and goes back to the pool as it came.
        """
        checked_out = await self._native_checkout(engine)
        if checked_out is None:
            return None
        pooled, since = checked_out
        try:
            rows = await run(pooled.driver_connection, sql, params, fetch)
        except BaseException:
            await _give_back(pooled)
            raise
        if not (native_idle(pooled.driver_connection) and self._hot.keep(pooled, since)):
            await _give_back(pooled)
        return rows

    async def _statement(self, sql: str, params: Params, fetch: bool) -> list[Row]:
        if self._engine is None:
            # a caller's connection: its isolation level is not ours to change
            async with self._transaction() as conn:
                return await _run(conn, sql, params, fetch)
        if self._native_run is not None and not watched(self._engine):
            rows = await self._native_statement(self._engine, self._native_run, sql, params, fetch)
            if rows is not None:
                return rows
        async with self._idle_connection() as conn:
            # One statement commits on its own (AUTOCOMMIT, reset when the connection goes back
            # to the pool), as on the other drivers' pools: one round trip instead of three,
            # and no transaction left open between round trips, where a process that stalls
            # (SIGSTOP, swapped out) would hold its locks and block the leader's rescue.
            try:
                await _refuse_autocommit(conn)  # the engine's own setting: see with_tx
                await conn.execution_options(isolation_level="AUTOCOMMIT")
            except DB_ERRORS as exc:
                raise translate_error(exc) from exc
            return await _run(conn, sql, params, fetch)

    async def exec(self, sql: str, params: Params = ()) -> None:
        """Run one statement in its own transaction."""
        await self._statement(sql, params, False)

    async def query(self, sql: str, params: Params = ()) -> list[Row]:
        """Run one statement in its own transaction and return its rows."""
        return await self._statement(sql, params, True)

    @asynccontextmanager
    async def with_tx(self) -> AsyncIterator[AsyncSQLAlchemyTxDriver]:
        """Run the block in a transaction on one connection; yields a driver bound to it."""
        async with self._transaction() as conn:
            yield AsyncSQLAlchemyTxDriver(conn, parent=self)

    async def listener(self, channel: str) -> AsyncListener:
        """Open a dedicated connection that LISTENs on ``channel``."""
        dsn = self._session_url or _SIDE.dedicated_dsn(self._dialect, self._url)
        # async-only: begin
        if self._dialect.driver == "asyncpg":
            from pgqueue_adapters.asyncpg import AsyncpgListener, open_session

            return await AsyncpgListener.start(await open_session(dsn), channel)
        # async-only: end
        from pgqueue_adapters.psycopg import AsyncPsycopgListener, async_open_session

        return await AsyncPsycopgListener.start(await async_open_session(dsn), channel)

    async def try_advisory_lock(
        self, key: int, idle_timeout: float | None = None
    ) -> AsyncAdvisoryLock | None:
        """Try to take advisory lock ``key`` on a new dedicated connection, without waiting.

        ``idle_timeout``: see ``AsyncDriver.try_advisory_lock``.
        """
        return await async_advisory_lock_once(await self.advisory_lock(key, idle_timeout))

    async def advisory_lock(self, key: int, idle_timeout: float | None = None) -> AsyncAdvisoryLock:
        """Open a dedicated connection for advisory lock ``key``, not yet taken (``try_take``).

        ``idle_timeout``: see ``AsyncDriver.advisory_lock``.
        """
        dsn = self._session_url or _SIDE.dedicated_dsn(self._dialect, self._url)
        # async-only: begin
        if self._dialect.driver == "asyncpg":
            from pgqueue_adapters.asyncpg import AsyncpgAdvisoryLock, open_session

            return await AsyncpgAdvisoryLock.open(await open_session(dsn), key, idle_timeout)
        # async-only: end
        from pgqueue_adapters.psycopg import AsyncPsycopgAdvisoryLock, async_open_session

        session = await async_open_session(dsn)
        return await AsyncPsycopgAdvisoryLock.open(session, key, idle_timeout)

    async def copy_records(
        self,
        schema: str,
        table: str,
        columns: Sequence[str],
        records: Iterable[Sequence[Any]],
    ) -> int:
        """Load ``records`` into ``schema.table`` with ``COPY FROM STDIN``, in one transaction.

        Runs on the database library's own connection beneath SQLAlchemy's, which needs one
        of the dialects whose library pgqueue knows (see the module docstring).
        """
        _SIDE.require_library(self._dialect)
        async with self._transaction() as conn:
            try:
                raw: Any = (await _pool_connection(conn)).driver_connection
            except DB_ERRORS as exc:
                raise translate_error(exc) from exc
            # async-only: begin
            if self._dialect.driver == "asyncpg":
                from pgqueue_adapters.asyncpg import copy_rows

                return await copy_rows(raw, schema, table, columns, records)
            # async-only: end
            from pgqueue_adapters.psycopg import async_copy_rows

            return await async_copy_rows(raw, schema, table, columns, records)

    async def close(self) -> None:
        """Dispose of the engine if this driver created it; otherwise leave the caller's open."""
        if not self._owns_source:
            return
        if self._engine is not None:
            for kept in self._hot.close():
                await _give_back(kept)
            await self._engine.dispose()
        elif self._conn is not None:
            await self._conn.close()


async def _pool_connection(conn: sa.AsyncConnection) -> PoolProxiedConnection:
    """Return the pool's proxy of the DBAPI connection under ``conn``."""
    return await conn.get_raw_connection()  # sync: return conn.connection


async def _autocommit_outside_transaction(conn: sa.AsyncConnection) -> bool:
    """Return True if ``conn`` is in AUTOCOMMIT isolation and no transaction is open on it."""
    try:
        raw = await _pool_connection(conn)
    except DB_ERRORS as exc:
        raise translate_error(exc) from exc
    if getattr(raw.dbapi_connection, "autocommit", False) is not True:
        return False
    native: Any = raw.driver_connection
    in_transaction = getattr(native, "is_in_transaction", None)  # asyncpg
    if in_transaction is not None:
        return not in_transaction()
    return int(native.info.transaction_status) == 0  # psycopg: TransactionStatus.IDLE


async def _refuse_autocommit(conn: sa.AsyncConnection) -> None:
    """Raise if ``conn`` runs in AUTOCOMMIT isolation, where transactions do not hold."""
    raw = await _pool_connection(conn)
    if getattr(raw.dbapi_connection, "autocommit", False) is True:
        raise ConfigurationError(AUTOCOMMIT_REFUSAL)


class AsyncSQLAlchemyTxDriver(AsyncTxDriverBase):
    """A driver bound to an open transaction: a connection's, or a session's (``AsyncSession``).

    It never commits or rolls back; nested ``with_tx`` makes a savepoint. On a session, every
    statement runs on ``session.connection()``, so it joins the session's transaction.
    """

    def __init__(
        self,
        source: sa.AsyncConnection | AsyncSession,
        parent: AsyncSQLAlchemyDriver | None = None,
    ) -> None:
        _SIDE.refuse_other_side(source)
        if not isinstance(source, sa.AsyncConnection | AsyncSession):
            raise ConfigurationError(
                "AsyncSQLAlchemyTxDriver needs a SQLAlchemy AsyncConnection or AsyncSession, "
                f"got {describe(source)}"
            )
        self._source = source
        self._parent = parent

    async def _connection(self) -> sa.AsyncConnection:
        if isinstance(self._source, AsyncSession):
            try:
                return await self._source.connection()
            except DB_ERRORS as exc:
                raise translate_error(exc) from exc
        return self._source

    async def exec(self, sql: str, params: Params = ()) -> None:
        """Run one statement in the transaction."""
        await _run(await self._connection(), sql, params, False)

    async def query(self, sql: str, params: Params = ()) -> list[Row]:
        """Run one statement in the transaction and return its rows."""
        return await _run(await self._connection(), sql, params, True)

    @asynccontextmanager
    async def with_tx(self) -> AsyncIterator[AsyncSQLAlchemyTxDriver]:
        """Run the block in a savepoint of the current transaction.

        On a connection in AUTOCOMMIT isolation outside a transaction (each statement commits
        on its own, and SQLAlchemy sends no BEGIN) the block runs in a transaction of its own
        instead, so that it commits as one.
        """
        conn = await self._connection()
        if await _autocommit_outside_transaction(conn):
            await _run(conn, "BEGIN", (), False)
            try:
                yield self
            except BaseException:
                with suppress(DatabaseError):  # the block's error says more
                    await _run(conn, "ROLLBACK", (), False)
                raise
            await _run(conn, "COMMIT", (), False)
            return
        try:
            savepoint = await self._source.begin_nested()
        except DB_ERRORS as exc:
            raise translate_error(exc) from exc
        try:
            yield self
        except BaseException:
            with suppress(*DB_ERRORS):  # the block's error says more
                await savepoint.rollback()
            raise
        try:
            await savepoint.commit()
        except DB_ERRORS as exc:
            raise translate_error(exc) from exc


# -- entry points -------------------------------------------------------------------------------


async def async_connect(
    url: str, *, pool_size: int = 10, session_url: str | None = None, pgbouncer: bool = False
) -> AsyncSQLAlchemyDriver:
    """Create an engine on ``url`` and return a driver that owns it.

    ``session_url``: where dedicated sessions (LISTEN, the leader's lock) connect instead of
    ``url``. ``pgbouncer=True`` is refused: see :func:`refuse_pgbouncer`.

    ``driver.close()`` disposes of the engine. A plain ``postgresql://`` URL uses psycopg 3,
    ``postgresql+asyncpg://`` uses asyncpg. Connects once first, so that an unreachable
    database fails now. The pool holds at most ``pool_size`` connections (no overflow), as the
    other drivers' pools do, so a process's share of ``max_connections`` is known.
    """
    if pgbouncer:
        refuse_pgbouncer()
    parsed = engine_url(url)
    try:
        engine = sa.create_async_engine(parsed, pool_size=pool_size, max_overflow=0)
    except ImportError as exc:
        raise DriverNotInstalled(
            f"SQLAlchemy cannot load the driver of {parsed.drivername}://: {exc}"
        ) from exc
    except sa_exc.SQLAlchemyError as exc:
        raise ConfigurationError(
            f"cannot use {parsed.render_as_string(hide_password=True)}: {exc}"
        ) from exc
    try:
        driver = AsyncSQLAlchemyDriver(engine, owns_source=True, session_url=session_url)
        try:
            probe = await engine.connect()
        except DB_ERRORS as exc:
            message = str(translate_error(exc)).removeprefix("lost the database connection: ")
            raise ConnectionLost(f"cannot connect to the database: {message}") from exc
        await probe.close()
    except BaseException:
        await engine.dispose()
        raise
    return driver


def async_from_native(
    obj: object, *, session_url: str | None = None, pgbouncer: bool = False
) -> AsyncSQLAlchemyDriver:
    """Return a driver that uses a caller's ``AsyncEngine`` or ``AsyncConnection``.

    Given a session (``AsyncSession``, or a scoped session), the driver uses the engine or
    connection it is bound to. The driver never disposes of or closes what it was given.
    ``session_url`` and ``pgbouncer``: see :func:`async_connect`.
    """
    if pgbouncer:
        refuse_pgbouncer()
    obj = unscope(obj)
    _SIDE.refuse_other_side(obj)
    if isinstance(obj, AsyncSession):
        bind = obj.bind
        if not isinstance(bind, sa.AsyncEngine | sa.AsyncConnection):
            raise ConfigurationError(
                "the AsyncSession is not bound to an AsyncEngine: pass the engine instead"
            )
        obj = bind
    if isinstance(obj, sa.AsyncEngine | sa.AsyncConnection):
        return AsyncSQLAlchemyDriver(obj, session_url=session_url)
    raise ConfigurationError(
        f"cannot use a {describe(obj)} here: pass a SQLAlchemy AsyncEngine, AsyncConnection "
        "or AsyncSession"
    )


def async_wrap_transaction(obj: object) -> AsyncSQLAlchemyTxDriver:
    """Return a driver that runs statements in a caller's transaction, and never commits it.

    ``obj`` is the ``AsyncConnection`` or ``AsyncSession`` that holds the transaction; a scoped
    session stands for its current session.
    """
    obj = unscope(obj)
    _SIDE.refuse_other_side(obj)
    if isinstance(obj, sa.AsyncConnection | AsyncSession):
        return AsyncSQLAlchemyTxDriver(obj)
    raise ConfigurationError(
        f"cannot enqueue in a {describe(obj)}: pass the SQLAlchemy AsyncConnection or "
        "AsyncSession that holds your transaction"
    )
