"""What pgqueue does on a psycopg 3 connection: statements, LISTEN, advisory locks, COPY, errors.

The one place that knows psycopg's API for these. Both the psycopg adapter and the SQLAlchemy
adapter on its psycopg dialect use it (SQLAlchemy hands over the psycopg connection under its
own). It imports psycopg only, not psycopg_pool.

Written once, for asyncio, in pgqueue_adapters/psycopg/_async_library.py; the sync module
pgqueue_adapters/psycopg/_sync_library.py is generated from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import psycopg
from psycopg import AsyncConnection, AsyncRawCursor, sql
from psycopg.rows import tuple_row

from pgqueue.driver import LOST_SQLSTATES, AsyncAdvisoryLockBase, Notification, Params, Row
from pgqueue.errors import ConnectionLost, DatabaseError

__all__ = [
    "AsyncPsycopgAdvisoryLock",
    "AsyncPsycopgListener",
    "async_copy_rows",
    "async_open_session",
    "async_run",
    "translate_error",
]


def translate_error(exc: psycopg.Error) -> DatabaseError:
    """Map a psycopg exception to pgqueue's driver-independent errors."""
    state = exc.sqlstate
    lost = isinstance(exc, psycopg.InterfaceError) or (
        isinstance(exc, psycopg.OperationalError)
        and (state is None or state.startswith("08") or state in LOST_SQLSTATES)
    )
    message = str(exc).strip() or type(exc).__name__
    if lost:
        return ConnectionLost(f"lost the database connection: {message}", state)
    constraint = exc.diag.constraint_name if state else None
    return DatabaseError(message, state, constraint)


async def async_run(
    conn: AsyncConnection[Any], query: str, params: Params, fetch: bool
) -> list[Row]:
    """Run one statement on ``conn``; return its rows if ``fetch`` (errors translated)."""
    try:
        # A raw cursor takes PostgreSQL's own $n placeholders; tuple_row so that a caller's
        # connection configured with dict_row still gives us tuples.
        async with AsyncRawCursor(conn, row_factory=tuple_row) as cur:
            await cur.execute(query, params)
            if fetch and cur.description is not None:
                return await cur.fetchall()
            return []
    except psycopg.Error as exc:
        raise translate_error(exc) from exc


async def async_open_session(conninfo: str, **kwargs: Any) -> AsyncConnection[Any]:
    """Open a dedicated autocommit connection (for a listener or an advisory lock)."""
    try:
        return await AsyncConnection.connect(conninfo, **{**kwargs, "autocommit": True})
    except psycopg.Error as exc:
        raise translate_error(exc) from exc


async def async_copy_rows(
    conn: AsyncConnection[Any],
    schema: str,
    table: str,
    columns: Sequence[str],
    records: Iterable[Sequence[Any]],
) -> int:
    """``COPY`` ``records`` into ``schema.table`` on ``conn``, in its open transaction.

    Names are given unquoted (they are quoted here). Returns the number of rows copied.
    """
    statement = sql.SQL("COPY {}.{} ({}) FROM STDIN").format(
        sql.Identifier(schema),
        sql.Identifier(table),
        sql.SQL(", ").join(sql.Identifier(c) for c in columns),
    )
    count = 0
    try:
        async with conn.cursor() as cur, cur.copy(statement) as copy:
            for record in records:
                await copy.write_row(record)
                count += 1
    except psycopg.Error as exc:
        raise translate_error(exc) from exc
    return count


class AsyncPsycopgListener:
    """A dedicated autocommit connection LISTENing on one channel."""

    def __init__(self, conn: AsyncConnection[Any], channel: str) -> None:
        self._conn = conn
        self._channel = channel
        self._pid = conn.info.backend_pid

    @classmethod
    async def start(cls, conn: AsyncConnection[Any], channel: str) -> AsyncPsycopgListener:
        """LISTEN on ``channel`` on ``conn`` (autocommit, dedicated; the listener owns it)."""
        try:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        except psycopg.Error as exc:
            await conn.close()
            raise translate_error(exc) from exc
        return cls(conn, channel)

    @property
    def channel(self) -> str:
        """The channel listened to."""
        return self._channel

    @property
    def backend_pid(self) -> int:
        """The backend pid of the listening session."""
        return self._pid

    async def wait(self, timeout: float) -> list[Notification]:
        """Return notifications arriving within ``timeout`` seconds (empty list on timeout)."""
        out: list[Notification] = []
        try:
            async for n in self._conn.notifies(timeout=timeout, stop_after=1):
                out.append(Notification(n.channel, n.payload, n.pid))
        except psycopg.Error as exc:
            raise translate_error(exc) from exc
        if not out and self._conn.closed:
            raise ConnectionLost("the listening connection is closed")
        return out

    async def close(self) -> None:
        """Close the listening connection."""
        await self._conn.close()


class AsyncPsycopgAdvisoryLock(AsyncAdvisoryLockBase):
    """A session advisory lock held by a dedicated autocommit connection."""

    def __init__(self, conn: AsyncConnection[Any], key: int) -> None:
        super().__init__(key, conn.info.backend_pid)
        self._conn = conn

    @classmethod
    async def open(
        cls, conn: AsyncConnection[Any], key: int, idle_timeout: float | None = None
    ) -> AsyncPsycopgAdvisoryLock:
        """Make ``conn`` (autocommit, dedicated) the session of lock ``key``, not yet taken.

        ``idle_timeout``: see ``AsyncDriver.advisory_lock``.
        """
        lock = cls(conn, key)
        await lock._prepare(idle_timeout)
        return lock

    async def _fetch(self, query: str, params: Params) -> list[Row]:
        return await async_run(self._conn, query, params, True)

    def _session_closed(self) -> bool:
        return self._conn.closed

    async def _close_session(self) -> None:
        await self._conn.close()
