"""The delay between retries of a failing operation, shared by both runtimes.

Pure arithmetic, no I/O and no clock: the runtime's claim retries, outcome-write retries and
listener reconnects each hold one :class:`Backoff` and wait what it says.
"""

from __future__ import annotations

import random

__all__ = ["Backoff"]


class Backoff:
    """Delays that start at ``initial``, double after each failure, and stop growing at ``cap``.

    ``jitter`` spreads each delay by up to that fraction either way (``0.2``: +/-20 %), so
    that processes that failed together (an outage) do not all retry at once. ``reset()``
    after a success starts again from ``initial``. Not thread-safe: one per loop.
    """

    __slots__ = ("_base", "cap", "initial", "jitter")

    def __init__(self, initial: float, cap: float, *, jitter: float = 0.0) -> None:
        if initial <= 0 or cap <= 0:
            raise ValueError("a backoff's initial delay and cap must be positive")
        if not 0 <= jitter < 1:
            raise ValueError("a backoff's jitter must be a fraction in [0, 1)")
        self.initial = initial
        self.cap = cap
        self.jitter = jitter
        self._base = min(initial, cap)

    @property
    def upcoming(self) -> float:
        """The delay the next failure gets, before jitter."""
        return self._base

    def next(self) -> float:
        """Return the delay to wait after a failure (jittered), and double the following one."""
        base = self._base
        self._base = min(base * 2, self.cap)
        if self.jitter:
            return base * random.uniform(1 - self.jitter, 1 + self.jitter)
        return base

    def reset(self) -> None:
        """Start again from ``initial`` (after a success)."""
        self._base = min(self.initial, self.cap)
