"""The SQLAlchemy 2 adapter: ``AsyncDriver`` on an ``AsyncEngine``, ``AsyncConnection`` or session.

Written once, for asyncio, in pgqueue_adapters/sqlalchemy/_async.py; the sync adapter (on an
``Engine``, ``Connection`` or ``Session``) in pgqueue_adapters/sqlalchemy/_sync.py is generated
from it.

Statements go through ``exec_driver_sql``: pgqueue's ``$1, $2, ...`` placeholders are rewritten
into the DBAPI paramstyle of the engine's dialect, so they reach the database library as they
would without SQLAlchemy. Listeners, advisory locks and ``COPY`` need a library-level session,
so they are supported on the ``psycopg`` dialect (and, asyncio only, ``asyncpg``): each
listener or lock opens a dedicated connection with that library, from the engine's URL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any

import sqlalchemy.ext.asyncio as sa  # sync: import sqlalchemy as sa
from sqlalchemy import URL
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncSession  # sync: from sqlalchemy.orm import Session
from sqlalchemy.pool import PoolProxiedConnection

from pgqueue.driver import (
    AsyncAdvisoryLock,
    AsyncListener,
    AsyncLock,
    AsyncTxDriverBase,
    Params,
    Row,
)
from pgqueue.errors import ConfigurationError, ConnectionLost, DatabaseError, DriverNotInstalled

from ._errors import DB_ERRORS, translate_error
from ._placeholders import bind_params
from ._shared import describe, engine_url, library_dsn, unscope

__all__ = [
    "AsyncSQLAlchemyDriver",
    "AsyncSQLAlchemyTxDriver",
    "async_connect",
    "async_from_native",
    "async_wrap_transaction",
]

# Which side this module is: objects of the other side get a message naming the right client.
_IS_ASYNC_SIDE = True  # sync: _IS_ASYNC_SIDE = False
_OTHER_SIDE = "use pgqueue.Client with it"  # sync: _OTHER_SIDE = "use pgqueue.AsyncClient with it"
# The dialects whose library can open the dedicated sessions of listeners and advisory locks.
_DEDICATED_DRIVERS = ("psycopg", "asyncpg")  # sync: _DEDICATED_DRIVERS = ("psycopg",)
_DEDICATED_HINT = "postgresql+psycopg:// or postgresql+asyncpg://"  # sync: _DEDICATED_HINT = "postgresql+psycopg://"


# -- helpers ------------------------------------------------------------------------------------


def _refuse_other_side(obj: object) -> None:
    """Raise if ``obj`` is a SQLAlchemy object of the other (sync or asyncio) side."""
    module = type(obj).__module__ or ""
    if not module.startswith("sqlalchemy"):
        return
    is_async = module.startswith("sqlalchemy.ext.asyncio")
    if is_async != _IS_ASYNC_SIDE:
        flavour = "an asyncio" if is_async else "a sync"
        raise ConfigurationError(
            f"{type(obj).__qualname__} is {flavour} SQLAlchemy object: {_OTHER_SIDE}"
        )


def _check_dialect(dialect: Dialect) -> None:
    if dialect.name != "postgresql":
        raise ConfigurationError(
            f"pgqueue needs PostgreSQL, but the SQLAlchemy engine's dialect is {dialect.name!r}"
        )
    if dialect.is_async != _IS_ASYNC_SIDE:
        raise ConfigurationError(
            f"the engine's {dialect.driver} dialect is "
            f"{'asyncio' if dialect.is_async else 'sync'}: {_OTHER_SIDE}"
        )


def _require_library(dialect: Dialect) -> None:
    """Raise unless pgqueue can use the dialect's library directly (dedicated sessions, COPY)."""
    if dialect.driver not in _DEDICATED_DRIVERS:
        raise ConfigurationError(
            f"listeners, advisory locks and COPY need an engine on {_DEDICATED_HINT}; "
            f"this one uses {dialect.name}+{dialect.driver}"
        )


def _dedicated_dsn(dialect: Dialect, url: URL) -> str:
    """Return the plain ``postgresql://`` URL that a dedicated session connects to."""
    _require_library(dialect)
    return library_dsn(url)


# async-only: begin
def _is_script(sql: str) -> bool:
    """Return True if ``sql`` may hold several statements (a ``;`` with text after it)."""
    return ";" in sql.rstrip().rstrip(";")


async def _asyncpg_script(conn: sa.AsyncConnection, sql: str) -> None:
    """Run a parameterless script of several statements in ``conn``'s transaction.

    SQLAlchemy's asyncpg dialect prepares every statement, and a prepared statement holds one
    command; asyncpg's own ``execute()`` without arguments uses the simple query protocol,
    which takes a script (a migration file).
    """
    from pgqueue_adapters.asyncpg import run

    try:
        raw: Any = (await _pool_connection(conn)).driver_connection
        if not raw.is_in_transaction():
            # Have SQLAlchemy's adapter send its BEGIN, so that the script runs inside it.
            await conn.exec_driver_sql(";")
    except DB_ERRORS as exc:
        raise translate_error(exc) from exc
    await run(raw, sql, (), False)


# async-only: end


async def _run(conn: sa.AsyncConnection, sql: str, params: Params, fetch: bool) -> list[Row]:
    # async-only: begin
    if not params and conn.dialect.driver == "asyncpg" and _is_script(sql):
        await _asyncpg_script(conn, sql)
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

    Every statement outside ``with_tx`` runs in its own transaction and commits. Listeners and
    advisory locks always get a dedicated connection of the dialect's library (psycopg or
    asyncpg), opened from the engine's URL: connection arguments given to the engine in other
    ways (``connect_args``, ``do_connect`` events) do not reach it. ``close()`` disposes of the
    engine only if the driver owns it (see :func:`async_connect`).
    """

    def __init__(
        self, source: sa.AsyncEngine | sa.AsyncConnection, *, owns_source: bool = False
    ) -> None:
        _refuse_other_side(source)
        self._engine: sa.AsyncEngine | None = None
        self._conn: sa.AsyncConnection | None = None
        if isinstance(source, sa.AsyncEngine):
            self._engine = source
        elif isinstance(source, sa.AsyncConnection):
            self._conn = source
        else:
            raise ConfigurationError(
                "AsyncSQLAlchemyDriver needs a SQLAlchemy AsyncEngine or AsyncConnection, "
                f"got {describe(source)}"
            )
        self._dialect = source.dialect
        self._url = source.engine.url
        _check_dialect(self._dialect)
        self._owns_source = owns_source
        self._lock = AsyncLock()

    @asynccontextmanager
    async def _idle_connection(self) -> AsyncIterator[sa.AsyncConnection]:
        """Yield a connection with no transaction: from the engine, or ours under the lock."""
        if self._engine is not None:
            try:
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

    async def _statement(self, sql: str, params: Params, fetch: bool) -> list[Row]:
        if self._engine is None:
            # a caller's connection: its isolation level is not ours to change
            async with self._transaction() as conn:
                return await _run(conn, sql, params, fetch)
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
        dsn = _dedicated_dsn(self._dialect, self._url)
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
        dsn = _dedicated_dsn(self._dialect, self._url)
        # async-only: begin
        if self._dialect.driver == "asyncpg":
            from pgqueue_adapters.asyncpg import AsyncpgAdvisoryLock, open_session

            return await AsyncpgAdvisoryLock.acquire(await open_session(dsn), key, idle_timeout)
        # async-only: end
        from pgqueue_adapters.psycopg import AsyncPsycopgAdvisoryLock, async_open_session

        session = await async_open_session(dsn)
        return await AsyncPsycopgAdvisoryLock.acquire(session, key, idle_timeout)

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
        _require_library(self._dialect)
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
        raise ConfigurationError(
            "the SQLAlchemy engine or connection runs with isolation_level='AUTOCOMMIT': "
            "pgqueue needs real transactions, give it one without that setting"
        )


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
        _refuse_other_side(source)
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


async def async_connect(url: str, *, pool_size: int = 10) -> AsyncSQLAlchemyDriver:
    """Create an engine on ``url`` and return a driver that owns it.

    ``driver.close()`` disposes of the engine. A plain ``postgresql://`` URL uses psycopg 3,
    ``postgresql+asyncpg://`` uses asyncpg. Connects once first, so that an unreachable
    database fails now. The pool holds at most ``pool_size`` connections (no overflow), as the
    other drivers' pools do, so a process's share of ``max_connections`` is known.
    """
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
        driver = AsyncSQLAlchemyDriver(engine, owns_source=True)
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


def async_from_native(obj: object) -> AsyncSQLAlchemyDriver:
    """Return a driver that uses a caller's ``AsyncEngine`` or ``AsyncConnection``.

    Given a session (``AsyncSession``, or a scoped session), the driver uses the engine or
    connection it is bound to. The driver never disposes of or closes what it was given.
    """
    obj = unscope(obj)
    _refuse_other_side(obj)
    if isinstance(obj, AsyncSession):
        bind = obj.bind
        if not isinstance(bind, sa.AsyncEngine | sa.AsyncConnection):
            raise ConfigurationError(
                "the AsyncSession is not bound to an AsyncEngine: pass the engine instead"
            )
        obj = bind
    if isinstance(obj, sa.AsyncEngine | sa.AsyncConnection):
        return AsyncSQLAlchemyDriver(obj)
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
    _refuse_other_side(obj)
    if isinstance(obj, sa.AsyncConnection | AsyncSession):
        return AsyncSQLAlchemyTxDriver(obj)
    raise ConfigurationError(
        f"cannot enqueue in a {describe(obj)}: pass the SQLAlchemy AsyncConnection or "
        "AsyncSession that holds your transaction"
    )
