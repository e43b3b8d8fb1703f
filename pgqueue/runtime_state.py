"""The worker runtime's bookkeeping, written once for both runtimes.

The runtime parts in ``pgqueue/_async/runtime/`` (and their generated twins) only wait, send
and receive; what they remember lives here, in plain classes without I/O: which runs are in
progress (:class:`RunTable`), which outcomes wait to be written (:class:`Outbox`), which
unknown kinds were warned about (:class:`UnknownKindWarnings`), what a notification says
(:func:`read_notification`), and the events a run's start and end become.

On the sync side job threads touch a :class:`RunTable` and an :class:`Outbox` while the
runtime's own threads read them: every method is one atomic operation on a builtin container
(under the GIL) or reads a copy, as the runtime has always relied on.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .events import (
    JobCancelled,
    JobCompleted,
    JobFailed,
    JobFinished,
    JobReleased,
    JobRetried,
    JobSnoozed,
    JobStarted,
)
from .events import Outcome as FinishedAs
from .execution import ClaimedJob, Outcome, Running, signal_stop
from .store_codec import UnknownKind

__all__ = [
    "HealthClock",
    "Notification",
    "Outbox",
    "RunTable",
    "UnknownKindWarnings",
    "WorkerHealth",
    "finished_class",
    "job_finished",
    "job_retried",
    "job_started",
    "queue_wait",
    "read_notification",
]

RunKey = tuple[int, Any]  # (job id, lease)


class RunTable:
    """The runs in progress in this process, by queue.

    Runs are keyed by job id *and* lease: one process can hold two runs of a job, when a claim
    of it was lost (a crash) or it was rescued while this process stalled, and the job came
    back to this process while the old run went on. Only the newest lease's outcome can be
    recorded, and each run must report its own.
    """

    __slots__ = ("_active", "_running")

    def __init__(self, queues: Iterable[str]) -> None:
        self._running: dict[RunKey, Running] = {}
        self._active: dict[str, set[RunKey]] = {name: set() for name in queues}

    def __len__(self) -> int:
        return len(self._running)

    def busy(self, queue: str) -> int:
        """How many slots of ``queue`` are taken."""
        return len(self._active[queue])

    def add(self, job: ClaimedJob) -> Running:
        """Count ``job``'s run as in progress; return its bookkeeping."""
        running = Running(job)
        key = (job.id, job.lease)
        self._running[key] = running
        self._active[job.queue].add(key)
        return running

    def remove(self, job: ClaimedJob) -> Running | None:
        """Take ``job``'s run out; ``None`` if it was already taken (only one caller wins)."""
        key = (job.id, job.lease)
        running = self._running.pop(key, None)
        if running is not None:
            self._active[job.queue].discard(key)
        return running

    def remove_all(self) -> list[Running]:
        """Take out every run still in progress (a shutdown giving up on them)."""
        taken = []
        for key in list(self._running):
            running = self._running.pop(key, None)
            if running is not None:
                self._active[running.job.queue].discard(key)
                taken.append(running)
        return taken

    def runs(self) -> list[Running]:
        """Return the runs in progress (a copy)."""
        return list(self._running.values())

    def runs_of(self, job_id: int) -> list[Running]:
        """Return the runs of job ``job_id`` (normally one)."""
        # a copy: job tasks (threads on the sync side) remove their runs meanwhile
        return [r for (i, _), r in list(self._running.items()) if i == job_id]

    def cancel(self, job_id: int) -> None:
        """Ask every run of job ``job_id`` to stop: someone cancelled it."""
        for running in self.runs_of(job_id):
            signal_stop(running, "cancel")


class Outbox:
    """Outcomes waiting to be written: job tasks (threads) add, one writer takes batches.

    Single consumer: adders only append, so the first items stay put between ``take`` and
    ``put_back``.
    """

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: list[tuple[ClaimedJob, Outcome]] = []

    def __len__(self) -> int:
        return len(self._items)

    def add(self, job: ClaimedJob, outcome: Outcome) -> None:
        """Queue ``job``'s outcome."""
        self._items.append((job, outcome))

    def take(self, limit: int) -> list[tuple[ClaimedJob, Outcome]]:
        """Take the oldest ``limit`` outcomes out."""
        batch = self._items[:limit]
        del self._items[: len(batch)]
        return batch

    def put_back(self, batch: list[tuple[ClaimedJob, Outcome]]) -> None:
        """Return outcomes that could not be written, ahead of the rest (order kept)."""
        self._items[:0] = batch

    def job_ids(self, limit: int) -> list[int]:
        """Return the ids of the first ``limit`` jobs waiting (for a log line)."""
        return [job.id for job, _ in self._items[:limit]]


@dataclass(frozen=True, slots=True)
class Notification:
    """What one NOTIFY on the runtime's channel asks: wake a queue, or cancel a job."""

    queue: str | None = None
    cancel: int | None = None


def read_notification(payload: str) -> Notification | None:
    """Read a notification's payload (``q:<queue>`` or ``c:<job id>``); ``None`` if neither."""
    if payload.startswith("q:"):
        return Notification(queue=payload[2:])
    if payload.startswith("c:") and payload[2:].isdigit():
        return Notification(cancel=int(payload[2:]))
    return None


class UnknownKindWarnings:
    """Which (queue, kind) of waiting jobs nobody runs to warn about, and when again.

    Each is warned about when first found, then again once ``rewarn_after`` seconds have
    passed while it still waits; one that no longer waits is forgotten.
    """

    __slots__ = ("_warned", "rewarn_after")

    def __init__(self, rewarn_after: float) -> None:
        self.rewarn_after = rewarn_after
        self._warned: dict[tuple[str, str], float] = {}  # -> when last warned (monotonic)

    def due(self, waiting: Iterable[UnknownKind], now: float) -> list[UnknownKind]:
        """Return those of ``waiting`` (one check's findings) to warn about at ``now``."""
        found = set()
        warn = []
        for item in waiting:
            key = (item.queue, item.kind)
            found.add(key)
            last = self._warned.get(key)
            if last is not None and now - last < self.rewarn_after:
                continue
            self._warned[key] = now
            warn.append(item)
        for key in set(self._warned) - found:
            del self._warned[key]
        return warn


# -- events of a run ----------------------------------------------------------------------------

# how JobFinished names each outcome action, and the event class of each
_FINISHED_AS: Mapping[str, FinishedAs] = {
    "complete": "completed",
    "retry": "retry",
    "fail": "failed",
    "cancel": "cancelled",
    "snooze": "snoozed",
    "release": "released",
}
_FINISHED_CLASS: Mapping[str, type[JobFinished]] = {
    "complete": JobCompleted,
    "retry": JobFailed,
    "fail": JobFailed,
    "cancel": JobCancelled,
    "snooze": JobSnoozed,
    "release": JobReleased,
}


def finished_class(outcome: Outcome) -> type[JobFinished]:
    """Return the :class:`JobFinished` subclass an attempt that ended with ``outcome`` emits."""
    return _FINISHED_CLASS[outcome.action]


def job_started(running: Running, instance_id: uuid.UUID) -> JobStarted:
    """Build the event for a run that starts now (after ``running.queue_wait`` is set)."""
    job = running.job
    return JobStarted(
        id=job.id,
        kind=job.kind,
        queue=job.queue,
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        instance_id=instance_id,
        scheduled_for=job.scheduled_for,
        queue_wait=running.queue_wait if running.queue_wait is not None else 0.0,
    )


def queue_wait(job: ClaimedJob) -> float:
    """Return the seconds from ``job``'s due time to now, by this process's clock."""
    return time.time() - job.scheduled_for.timestamp()


def job_finished(running: Running, outcome: Outcome, instance_id: uuid.UUID) -> JobFinished:
    """Build the event for a run that ended with ``outcome``.

    The queue wait is the one measured at the start when ``JobStarted`` was built; otherwise
    it is worked out now, from the time ``process`` ran (so that nothing is measured for a
    job whose end nobody wants to hear of).
    """
    job = running.job
    wait = running.queue_wait
    if wait is None:
        wait = queue_wait(job) - (job.duration or 0.0)
    return _FINISHED_CLASS[outcome.action](
        id=job.id,
        kind=job.kind,
        queue=job.queue,
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        instance_id=instance_id,
        outcome=_FINISHED_AS[outcome.action],
        duration=job.duration,
        queue_wait=wait,
        delay=outcome.delay,
        error=outcome.message,
        exc=outcome.exc,
    )


def job_retried(job: ClaimedJob, outcome: Outcome) -> JobRetried:
    """Build the event for a failed attempt that will be retried (a ``retry`` outcome)."""
    return JobRetried(
        id=job.id,
        kind=job.kind,
        queue=job.queue,
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        delay=outcome.delay,
        error=outcome.message,
    )


@dataclass(frozen=True)
class WorkerHealth:
    """What a worker's health probes answer: ``runtime.health()``.

    ``pgqueue worker --health-port`` serves it at ``/livez`` and ``/readyz``.

    - ``alive`` (liveness): the runtime runs and its heartbeat loop made a pass, successful or
      not, within ``2 * rescue_after`` seconds (at least 60): the process is not wedged. A
      database that is down does not make a worker dead (restarting it would not help).
    - ``ready`` (readiness): alive, not stopping, and the last heartbeat reached the database
      within ``2 * heartbeat_interval + 5`` seconds, with no failed one since: it is
      connected and the schema was current when it registered (it refuses to start otherwise).
    - ``heartbeat_age``: seconds since the heartbeat loop's last pass; ``database_age``: since
      it last reached the database (``None``: never); ``database_error``: the last failure's
      message while it lasts; ``listener_connected``: whether the LISTEN session is up (when it
      is not, queues are polled: still ready); ``leader``; ``running``: jobs running now.
    """

    alive: bool
    ready: bool
    stopping: bool
    heartbeat_age: float
    database_age: float | None
    database_error: str | None
    listener_connected: bool
    leader: bool
    running: int

    def as_dict(self) -> dict[str, Any]:
        """Return the fields as a JSON-ready dict (the probes' response body)."""
        return {
            "alive": self.alive,
            "ready": self.ready,
            "stopping": self.stopping,
            "heartbeat_age": round(self.heartbeat_age, 3),
            "database_age": None if self.database_age is None else round(self.database_age, 3),
            "database_error": self.database_error,
            "listener_connected": self.listener_connected,
            "leader": self.leader,
            "running": self.running,
        }


class HealthClock:
    """When the heartbeat loop last made a pass and last reached the database (monotonic)."""

    def __init__(self) -> None:
        self.pass_at = time.monotonic()
        self.ok_at: float | None = None
        self.error: str | None = None

    def ok(self) -> None:
        """Record a pass that reached the database."""
        self.pass_at = self.ok_at = time.monotonic()
        self.error = None

    def failed(self, error: str) -> None:
        """Record a pass that failed to reach the database."""
        self.pass_at = time.monotonic()
        self.error = error
