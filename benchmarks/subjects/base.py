"""What every benchmarked library provides to the harness.

Each subject runs inside its own OS process (``benchmarks/role.py``), against a fresh, empty
database created for that one measurement, and is told its jobs by integer: the job with
payload ``{"i": i}`` must reach ``record(i)`` when a worker runs it. The harness checks that
every ``i`` was recorded exactly once, so a subject must never swallow or repeat a job.

The job itself is a no-op apart from ``record(i)``: the numbers measure the queue, not the work.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Subject:
    """One library in one driver mode. Subclasses implement every method."""

    #: Name used in results and charts, e.g. "pgqueuer" or "pgqueue/asyncpg".
    name: str = ""
    #: One SQL statement returning the number of jobs not finished yet (waiting or running);
    #: the harness polls it to see when a drain is over.
    remaining_sql: str = ""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def install(self) -> None:
        """Create the library's tables in the (empty) database at ``self.dsn``."""
        raise NotImplementedError

    def enqueue_single(self, start: int, n: int) -> float:
        """Add jobs ``start .. start+n-1`` one call (one transaction) each, the way an application
        adds a job per request. Connect before timing; return the seconds the n calls took."""
        raise NotImplementedError

    def enqueue_bulk(self, start: int, n: int) -> float:
        """Add jobs ``start .. start+n-1`` with the library's fastest bulk API. Return seconds.

        Used both as a measurement (100,000 jobs) and to pre-load the drain benchmarks."""
        raise NotImplementedError

    def enqueue_batches(self, start: int, n: int, batch: int) -> float:
        """Add jobs ``start .. start+n-1`` with the library's batch API in calls of ``batch``
        jobs each (one transaction per call), the way a request or a script adds a thousand
        at a time. Return the seconds all calls took."""
        raise NotImplementedError

    def enqueue_concurrent(self, start: int, n: int, producers: int) -> float:
        """Add jobs ``start .. start+n-1`` one call (one transaction) each from ``producers``
        concurrent producers sharing one client (threads for a sync client, asyncio tasks for an
        async one), the way a web application's request handlers do.

        The first ``producers`` jobs are added concurrently before the clock starts (connections
        opened, statements prepared); the rest in ``producers`` lanes (``split_producers``).
        Return the seconds the timed calls took, scaled to n calls."""
        raise NotImplementedError

    def enqueue_spaced(self, start: int, n: int, spacing: float) -> list[float]:
        """Add jobs ``start .. start+n-1`` one call each, ``spacing`` seconds apart, and return
        for each the wall-clock time (``time.time()``) at which its call returned (committed).
        The pickup-latency benchmark compares these with the times the worker started them."""
        raise NotImplementedError

    def remaining(self) -> int:
        """How many jobs are not finished yet (waiting or running), by SQL."""
        raise NotImplementedError

    def fill_finished(self, n: int) -> None:
        """Insert ``n`` rows shaped as the library leaves finished jobs (straight SQL), so that
        the claim-cost benchmark can compare an empty history with a large one."""
        raise NotImplementedError

    #: True when ``run_worker(..., emptied=...)`` can tell by itself that no job is left (none
    #: due, none running, outcomes written); the harness then takes the drain's end from the
    #: worker instead of polling ``remaining_sql``.
    ends_when_empty: bool = False

    def run_worker(
        self,
        concurrency: int,
        record: Callable[[int], None],
        stop: threading.Event,
        emptied: Callable[[], None] | None = None,
    ) -> None:
        """Run one worker with ``concurrency`` jobs at a time until ``stop`` is set; then shut it
        down gracefully (finished jobs' results written) and return. Blocking.

        With ``emptied`` (only given to subjects with ``ends_when_empty``), run until no job is
        left, outcomes written, call ``emptied()``, then wait for ``stop`` before closing the
        connections.

        The job handler calls ``record(payload["i"])`` and nothing else."""
        raise NotImplementedError


def split_producers(start: int, n: int, producers: int) -> tuple[range, list[range]]:
    """Jobs ``start .. start+n-1`` for ``producers`` producers: the warm-up jobs (one each,
    untimed), and each producer's lane of the rest (every ``producers``-th job)."""
    warm = range(start, start + min(producers, n))
    rest = warm.stop
    return warm, [range(rest + k, start + n, producers) for k in range(producers)]
