"""Pooled connections kept out of their pool between statements.

Borrowing a connection from asyncpg's pool and giving it back costs more CPU than the statement
that runs on it (measured on 2 cores: ~40 µs of a ~70 µs insert; the release goes through a
shielded task and an extra turn of the event loop), and psycopg_pool's borrow, return and
commit-on-exit cost ~20 µs. An application adding one job per request, or a worker at
concurrency 1, pays that on every statement; ten producers at once pay it ten times. So a driver
that owns its pool keeps the connections it is done with here, out of the pool (the most
recently used first), and the next statement takes one from here without touching the pool; the
pool is asked only when none is kept.

What keeps this as safe as the pool:

- at most the pool's size minus one are kept, and only by a driver whose pool holds at least
  two, so the pool always has a connection of its own to lend;
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
    """Idle pooled connections kept for the next statements (see module doc)."""

    def __init__(self, enabled: bool, capacity: int = 1) -> None:
        self._enabled = enabled and capacity >= 1
        self._capacity = capacity
        self._lock = threading.Lock()
        self._kept: list[tuple[Any, float]] = []
        self._waiting = 0

    @property
    def enabled(self) -> bool:
        """Whether connections are kept at all (a driver's own pool of two or more)."""
        return self._enabled

    def take(self) -> tuple[Any, float] | None:
        """Return the most recently kept connection and when it left the pool; or None."""
        if not self._kept:  # the common miss, without the lock
            return None
        with self._lock:
            return self._kept.pop() if self._kept else None

    def keep(self, conn: Any, since: float) -> bool:
        """Keep ``conn`` (borrowed at ``since``) for the next statement.

        False when it must go back to the pool instead: someone waits for the pool, as many as
        allowed are kept, the connection is old, or the driver is closed (or keeps none).
        """
        if not self._enabled or self._waiting or time.monotonic() - since > MAX_AGE:
            return False
        with self._lock:
            if self._waiting or not self._enabled or len(self._kept) >= self._capacity:
                return False
            self._kept.append((conn, since))
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

    def close(self) -> list[Any]:
        """Stop keeping connections; return those kept (to give back to the pool)."""
        with self._lock:
            self._enabled = False
            kept, self._kept = self._kept, []
            return [conn for conn, _ in kept]

    @staticmethod
    def now() -> float:
        """Return the time on the clock that ``since`` values are read on."""
        return time.monotonic()
