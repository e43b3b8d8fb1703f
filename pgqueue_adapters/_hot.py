"""One pooled connection kept out of its pool between single statements.

Borrowing a connection from asyncpg's pool and giving it back costs more CPU than the statement
that runs on it (measured on 2 cores: ~40 µs of a ~70 µs insert; the release goes through a
shielded task and an extra turn of the event loop), and psycopg_pool's borrow, return and
commit-on-exit cost ~20 µs. An application adding one job per request, or a worker at
concurrency 1, pays that on every statement. So a driver that owns its pool keeps the last
connection it used here, out of the pool, and the next single statement takes it from here
without touching the pool; statements that run at the same time borrow from the pool as before.

What keeps this as safe as the pool:

- at most one connection is kept, and only by a driver whose pool holds at least two, so the
  pool always has connections of its own to lend;
- a connection is not kept while anyone waits for the pool (``waiting``): it goes back, and the
  waiter gets it;
- a statement that fails (or is cancelled) gives its connection back to the pool, which resets
  or replaces it, as it would have without this;
- a connection kept longer than ``MAX_AGE`` seconds goes back to the pool, so the pool's own
  age and idle rules still see it.

No method awaits: the same object serves the asyncio drivers and the (generated) sync ones,
whose threads race for it under a lock held for a few instructions.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: Seconds after which a kept connection goes back to its pool at its next use.
MAX_AGE = 300.0


class HotConnection:
    """A slot for one idle pooled connection, reused by single statements (see module doc)."""

    def __init__(self, enabled: bool) -> None:
        self._enabled = enabled
        self._lock = threading.Lock()
        self._conn: Any = None
        self._since = 0.0
        self._waiting = 0

    @property
    def enabled(self) -> bool:
        """Whether connections are kept at all (a driver's own pool of two or more)."""
        return self._enabled

    def take(self) -> tuple[Any, float] | None:
        """Return the kept connection and when it left the pool, emptying the slot; or None."""
        if self._conn is None:  # the common miss, without the lock
            return None
        with self._lock:
            conn, self._conn = self._conn, None
            return None if conn is None else (conn, self._since)

    def keep(self, conn: Any, since: float) -> bool:
        """Keep ``conn`` (borrowed at ``since``) for the next statement.

        False when it must go back to the pool instead: the slot is taken, someone waits for
        the pool, the connection is old, or the driver is closed (or does not keep any).
        """
        if not self._enabled or self._waiting or time.monotonic() - since > MAX_AGE:
            return False
        with self._lock:
            if self._conn is not None or self._waiting or not self._enabled:
                return False
            self._conn, self._since = conn, since
            return True

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """Count the block as waiting for the pool: no connection is kept meanwhile."""
        with self._lock:
            self._waiting += 1
        try:
            yield
        finally:
            with self._lock:
                self._waiting -= 1

    def close(self) -> Any:
        """Stop keeping connections; return the one kept (to give back to the pool), or None."""
        with self._lock:
            self._enabled = False
            conn, self._conn = self._conn, None
            return conn

    @staticmethod
    def now() -> float:
        """Return the time on the clock that ``since`` values are read on."""
        return time.monotonic()
