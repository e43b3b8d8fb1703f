"""What pgqueue does on an asyncpg connection: statements, LISTEN, advisory locks, COPY, errors.

The one place that knows asyncpg's API for these. Both the asyncpg adapter and the SQLAlchemy
adapter on its asyncpg dialect use it (SQLAlchemy hands over the asyncpg connection under its
own). asyncpg is asyncio-only, so this module has no sync twin.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable, Sequence
from typing import Any

import asyncpg

from pgqueue.driver import LOST_SQLSTATES, AsyncAdvisoryLockBase, Notification, Params, Row
from pgqueue.errors import ConnectionLost, DatabaseError

__all__ = [
    "ERRORS",
    "AsyncpgAdvisoryLock",
    "AsyncpgListener",
    "close_quietly",
    "copy_rows",
    "open_session",
    "run",
    "translate_error",
]

# asyncpg reports a connection it can no longer use with an InterfaceError worded like these.
_LOST_INTERFACE = re.compile(r"closed|closing|released back to the pool|terminated", re.IGNORECASE)

ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    OSError,  # includes TimeoutError (asyncpg's command_timeout)
)
"""What asyncpg (and the sockets under it) raise; anything else is not ours to translate."""

# How long closing a dedicated session may take before the socket is simply dropped.
_CLOSE_TIMEOUT = 5.0


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


async def run(conn: Any, query: str, params: Params, fetch: bool) -> list[Row]:
    """Run one statement on ``conn``; return its rows if ``fetch`` (errors translated).

    Without parameters a statement goes by the simple protocol, so it may be a script of
    several statements (a migration file).
    """
    try:
        if fetch:
            return [tuple(record) for record in await conn.fetch(query, *params)]
        if params:
            await conn.execute(query, *params)
        else:
            await conn.execute(query)
        return []
    except ERRORS as exc:
        raise translate_error(exc) from exc


async def open_session(dsn: str) -> Any:
    """Open a dedicated connection on ``dsn`` (asyncpg connections are in autocommit mode)."""
    try:
        return await asyncpg.connect(dsn)
    except ERRORS as exc:
        raise translate_error(exc) from exc


async def close_quietly(conn: Any) -> None:
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


async def copy_rows(
    conn: Any,
    schema: str,
    table: str,
    columns: Sequence[str],
    records: Iterable[Sequence[Any]],
) -> int:
    """``COPY`` ``records`` into ``schema.table`` on ``conn``, in its open transaction.

    Names are given unquoted (asyncpg quotes them). Returns the number of rows copied.
    """
    try:
        status = await conn.copy_records_to_table(
            table, records=records, columns=list(columns), schema_name=schema
        )
    except ERRORS as exc:
        raise translate_error(exc) from exc
    return int(str(status).rsplit(" ", 1)[-1])  # "COPY <n>"


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
            await close_quietly(conn)
            if isinstance(exc, ERRORS):
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
        await close_quietly(self._conn)


class AsyncpgAdvisoryLock(AsyncAdvisoryLockBase):
    """A session advisory lock held by a dedicated connection."""

    def __init__(self, conn: Any, key: int) -> None:
        super().__init__(key, conn.get_server_pid())
        self._conn = conn

    @classmethod
    async def open(
        cls, conn: asyncpg.Connection, key: int, idle_timeout: float | None = None
    ) -> AsyncpgAdvisoryLock:
        """Make ``conn`` (dedicated) the session of lock ``key``, not yet taken.

        ``idle_timeout``: see ``AsyncDriver.advisory_lock``.
        """
        lock = cls(conn, key)
        await lock._prepare(idle_timeout)
        return lock

    async def _fetch(self, query: str, params: Params) -> list[Row]:
        return await run(self._conn, query, params, True)

    def _session_closed(self) -> bool:
        return bool(self._conn.is_closed())

    async def _close_session(self) -> None:
        await close_quietly(self._conn)
