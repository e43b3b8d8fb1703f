"""Until-empty mode: the runtime asks itself to stop once nothing of its queues is due.

``client.run(..., until_empty=True)`` and ``pgqueue worker --until-empty`` give the runtime one
:class:`EmptyWatch`; a runtime without one (the normal mode) pays nothing for it: no query, no
claim and no wake-up more.

The decision needs no query of its own; it reads what the claims already tell. Before a claim,
a fetcher notes how many outcomes the writer had written; after a claim that found fewer due
jobs than it asked for, it records that number with how many jobs it has launched so far. The
queues are empty when, for every queue, the last claim found nothing, began after the last
outcome was written, and the launches of all queues add up to the outcomes written: every job
this process claimed has its outcome written, and every queue was claimed from afterwards, so
a retry that is due now, or a job that a job enqueued (committed before its outcome), would
have been found. When the writer has written the last outcome, it wakes the fetchers for that
final claim.

On the sync side the fetchers and the writer are threads: each number here is changed by one
thread only (a queue's by its fetcher, the outcome count by the writer), and a fetcher
publishes what its claim found as one tuple, so a reader never sees half of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..compat import Event

__all__ = ["EmptyWatch"]


class EmptyWatch:
    """Tells the runtime (``on_empty``) when its queues have nothing due and nothing runs."""

    def __init__(self, wake: Mapping[str, Event], on_empty: Callable[[], None]) -> None:
        self._wake = wake
        self._on_empty = on_empty
        self.written = 0
        """How many outcomes the writer is done with (written, or found no longer ours)."""
        self._launched = dict.fromkeys(wake, 0)
        # per queue: (outcomes written when its last claim began, jobs it had launched by its
        # end), set when that claim found fewer due jobs than free slots; None while it claims
        self._dry: dict[str, tuple[int, int] | None] = dict.fromkeys(wake)
        self.empty = False
        """Set once ``on_empty`` was called."""

    def claim_begins(self, queue: str) -> int:
        """Note that a claim of ``queue`` begins; return the outcome count it starts after."""
        self._dry[queue] = None
        return self.written

    def claim_ended(self, queue: str, seen: int, launched: int, dry: bool) -> None:
        """Record that a claim of ``queue`` launched ``launched`` jobs (``dry``: below its ask)."""
        total = self._launched[queue] + launched
        self._launched[queue] = total
        if dry:
            self._dry[queue] = (seen, total)
            self._check()

    def outcomes_written(self, count: int) -> None:
        """Count ``count`` more outcomes the writer is done with (from its task or thread)."""
        self.written += count
        # Everything launched has its outcome written: each queue claims once more, from now.
        # A launch this sum misses belongs to a claim under way, which ends with a check.
        if sum(self._launched.values()) == self.written:
            for wake in self._wake.values():
                wake.set()

    def _check(self) -> None:
        written = self.written
        launched = 0
        stale = []
        for queue, state in list(self._dry.items()):
            if state is None:  # claiming, or its last claim was full or failed: it checks later
                return
            if state[0] != written:
                stale.append(queue)
            launched += state[1]
        if launched != written:  # outcomes still to write: the last one wakes the queues
            return
        if stale:
            # an outcome was written while these queues claimed (before the claim that
            # launched its job ended, say): they claim once more, from now
            for queue in stale:
                self._wake[queue].set()
        elif not self.empty:
            self.empty = True
            self._on_empty()
