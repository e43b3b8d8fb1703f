"""The seam between pgqueue's core and a database library: the driver protocols.

The asyncio protocols are written in pgqueue/_async/driver.py; the sync ones in
pgqueue/_sync/driver.py are generated from them. Adapters import both, with the values they
share, from the public module :mod:`pgqueue.driver`.

The core talks to PostgreSQL only through these methods. An adapter in ``pgqueue_adapters``
implements them for one library; ``tests/_async/test_conformance.py`` is the contract every
adapter must pass unchanged.

Conventions every adapter follows:

- SQL uses PostgreSQL's native placeholders ``$1, $2, ...``; ``params`` is a sequence.
- Parameters are ``None``, ``bool``, ``int``, ``float``, ``str``, aware ``datetime``,
  ``uuid.UUID`` and lists of those (sent as arrays). JSON travels as ``str`` cast in SQL
  (``$1::jsonb``). Results come back as tuples of the same Python types.
- Errors from the server or the connection are raised as :class:`pgqueue.DatabaseError`
  (with ``sqlstate``) or :class:`pgqueue.ConnectionLost`, the library's exception chained.
- A statement outside ``with_tx`` runs in its own transaction and is committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypeVar, runtime_checkable

from .._driver_values import (
    ADVISORY_LOCK_HELD_SQL,
    ADVISORY_LOCK_IDLE_TIMEOUT_SQL,
    ADVISORY_LOCK_RELEASE_SQL,
    ADVISORY_LOCK_TRY_SQL,
    Notification,
    Params,
    Row,
    advisory_lock_held_params,
    idle_timeout_setting,
)
from ..errors import ConfigurationError, ConnectionLost, DatabaseError

__all__ = [
    "AsyncAdvisoryLock",
    "AsyncAdvisoryLockBase",
    "AsyncDriver",
    "AsyncListener",
    "AsyncSupportsCopy",
    "AsyncTxDriverBase",
    "async_advisory_lock_once",
]


@runtime_checkable
class AsyncListener(Protocol):
    """A dedicated session that LISTENs on one channel for as long as the listener lives."""

    @property
    def channel(self) -> str:
        """The channel listened to, as given (the adapter quotes it)."""
        ...

    @property
    def backend_pid(self) -> int:
        """The PostgreSQL backend pid of the listening session."""
        ...

    async def wait(self, timeout: float) -> list[Notification]:
        """Return the notifications that arrive within ``timeout`` seconds.

        Returns as soon as at least one notification is there (with all that are already
        queued), or an empty list when the time runs out. Raises
        :class:`pgqueue.ConnectionLost` when the session died: notifications may have been missed,
        so the caller should open a new listener and re-check the database.
        """
        ...

    async def close(self) -> None:
        """Stop listening and close the session. Idempotent."""
        ...


@runtime_checkable
class AsyncAdvisoryLock(Protocol):
    """A session-level advisory lock held by a dedicated session."""

    @property
    def key(self) -> int:
        """The lock key."""
        ...

    @property
    def backend_pid(self) -> int:
        """The PostgreSQL backend pid of the session holding the lock."""
        ...

    async def try_take(self) -> bool:
        """Try to take the lock on this session, without waiting; True when it holds it now.

        A session that did not get the lock keeps it for the next try, so a candidate tries
        again every round on one session instead of opening one per round. Raises
        :class:`pgqueue.ConnectionLost` when the session died (release it and open another).
        """
        ...

    async def is_held(self) -> bool:
        """Return True if the session is alive and still holds the lock (one round trip)."""
        ...

    async def release(self) -> None:
        """Release the lock, if held, and close its session.

        Idempotent; never raises for a dead session.
        """
        ...


@runtime_checkable
class AsyncDriver(Protocol):
    """What the pgqueue core needs from a database library (asyncio side)."""

    async def exec(self, sql: str, params: Params = ()) -> None:
        """Run one statement and discard any result."""
        ...

    async def query(self, sql: str, params: Params = ()) -> list[Row]:
        """Run one statement and return all its rows as tuples."""
        ...

    def with_tx(self) -> AbstractAsyncContextManager[AsyncDriver]:
        """Open a transaction; the driver it yields runs every statement inside it.

        Leaving the block normally commits, an exception rolls back and propagates. Nested use
        on the yielded driver makes a savepoint.
        """
        ...

    async def listener(self, channel: str) -> AsyncListener:
        """Open a dedicated session listening on ``channel``."""
        ...

    async def try_advisory_lock(
        self, key: int, idle_timeout: float | None = None
    ) -> AsyncAdvisoryLock | None:
        """Try to take session advisory lock ``key`` on a new dedicated session, without waiting.

        Returns the held lock, or ``None`` if another session holds it. With ``idle_timeout``
        (seconds), the session sets ``idle_session_timeout`` (PostgreSQL 14 and later), so the
        server ends it, and releases the lock, once it has been idle that long: a holder whose
        process stalls (stopped, swapped out) cannot keep the lock. The holder keeps the session
        busy by calling ``is_held()`` more often than that.
        """
        ...

    async def advisory_lock(self, key: int, idle_timeout: float | None = None) -> AsyncAdvisoryLock:
        """Open a dedicated session for session advisory lock ``key``, without taking it.

        ``try_take()`` takes it, as often as needed, on that one session; ``release()`` closes
        the session. ``idle_timeout``: as for :meth:`try_advisory_lock`, set when the session
        opens, so a candidate that keeps trying keeps its session.
        """
        ...

    async def close(self) -> None:
        """Release what the driver opened itself (never a connection or pool it was handed)."""
        ...


@runtime_checkable
class AsyncSupportsCopy(Protocol):
    """Optional capability: bulk load rows with ``COPY ... FROM STDIN``."""

    async def copy_records(
        self,
        schema: str,
        table: str,
        columns: Sequence[str],
        records: Iterable[Sequence[Any]],
    ) -> int:
        """Copy ``records`` into ``schema.table`` (names unquoted; the adapter quotes them).

        Returns the number of rows copied.
        """
        ...


class AsyncTxDriverBase:
    """What every adapter's transaction-bound driver shares.

    Such a driver runs statements inside one open transaction. It has no sessions of its own to
    give: listeners and advisory locks come from the driver that opened the transaction
    (``_parent``), and a caller's transaction has none. Closing it does nothing: the
    connection belongs to whoever opened the transaction.
    """

    _parent: AsyncDriver | None

    def _require_parent(self) -> AsyncDriver:
        if self._parent is None:
            raise ConfigurationError(
                "listeners and advisory locks need a driver built from a pool or a URL (or a "
                "SQLAlchemy engine), not from a caller's transaction"
            )
        return self._parent

    async def listener(self, channel: str) -> AsyncListener:
        """Open a dedicated listening session (through the parent driver)."""
        return await self._require_parent().listener(channel)

    async def try_advisory_lock(
        self, key: int, idle_timeout: float | None = None
    ) -> AsyncAdvisoryLock | None:
        """Try to take an advisory lock on a dedicated session (through the parent driver)."""
        return await self._require_parent().try_advisory_lock(key, idle_timeout)

    async def advisory_lock(self, key: int, idle_timeout: float | None = None) -> AsyncAdvisoryLock:
        """Open a dedicated session for an advisory lock (through the parent driver)."""
        return await self._require_parent().advisory_lock(key, idle_timeout)

    async def close(self) -> None:
        """Do nothing: the transaction's connection belongs to whoever opened it."""


class AsyncAdvisoryLockBase:
    """What every adapter's advisory lock shares: taking, checking and releasing the lock.

    A subclass holds one dedicated session and says how to run a statement on it
    (``_fetch``, the library's errors translated to pgqueue's), whether the session is closed
    and how to close it. The lock owns the session and closes it on release.
    """

    def __init__(self, key: int, backend_pid: int) -> None:
        self._key = key
        self._pid = backend_pid
        self._taken = False  # unlocking a lock not held makes the server log a warning

    async def _fetch(self, query: str, params: Params) -> list[Row]:
        raise NotImplementedError

    def _session_closed(self) -> bool:
        raise NotImplementedError

    async def _close_session(self) -> None:
        raise NotImplementedError

    async def _prepare(self, idle_timeout: float | None) -> None:
        """Set the session's ``idle_session_timeout``; close the session if that fails.

        See ``AsyncDriver.try_advisory_lock``.
        """
        if idle_timeout is None:
            return
        try:
            await self._fetch(ADVISORY_LOCK_IDLE_TIMEOUT_SQL, (idle_timeout_setting(idle_timeout),))
        except BaseException:
            await self._close_session()
            raise

    async def try_take(self) -> bool:
        """Try the lock on this session, without waiting; keep the session either way."""
        if self._session_closed():
            raise ConnectionLost("the advisory lock's session is closed: open another")
        rows = await self._fetch(ADVISORY_LOCK_TRY_SQL, (self._key,))
        self._taken = self._taken or bool(rows[0][0])
        return bool(rows[0][0])

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
        if self._session_closed():
            return False
        try:
            rows = await self._fetch(ADVISORY_LOCK_HELD_SQL, advisory_lock_held_params(self._key))
        except ConnectionLost:
            return False
        return bool(rows[0][0])

    async def release(self) -> None:
        """Unlock and close the session (closing alone would release it too). Idempotent."""
        if self._session_closed():
            return
        try:
            if self._taken:
                await self._fetch(ADVISORY_LOCK_RELEASE_SQL, (self._key,))
        except DatabaseError:
            pass  # the session is gone, and the lock with it
        finally:
            await self._close_session()


_LockT = TypeVar("_LockT", bound=AsyncAdvisoryLock)


async def async_advisory_lock_once(lock: _LockT) -> _LockT | None:
    """Try ``lock`` (from ``advisory_lock()``) once: return it held, or close its session.

    What every adapter's ``try_advisory_lock`` is: a session for one try, kept only when it got
    the lock.
    """
    try:
        taken = await lock.try_take()
    except BaseException:
        await lock.release()
        raise
    if taken:
        return lock
    await lock.release()
    return None
