"""Typed events that the client and the worker runtime emit, and the hub that delivers them.

Everything worth observing goes through here: a job enqueued, started, finished (with its
outcome, how long it ran and how long it waited), retried; jobs rescued from a dead worker; the
lead gained or lost; the listener reconnected; an operator's action. Subscribers registered on
a client (``client.events.subscribe(handler, JobFinished)``) receive them. Logging is one such
subscriber (:class:`LogSubscriber`, registered on every client); metrics, tracing and the
dashboard are others.

A handler is a plain function called in the thread or task that emits the event, before the
work goes on: it must be quick and must not block (hand slow work to a queue of your own). An
exception it raises is logged and swallowed: a subscriber can never break a worker. An event
type nobody subscribed to is not even built, so the seam costs nothing when unused.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .execution import ProcessStopped, ProcessTimeout

if TYPE_CHECKING:
    from .tracing import JobTracer

__all__ = [
    "AdminAction",
    "Event",
    "EventHub",
    "Handler",
    "JobCancelled",
    "JobCompleted",
    "JobFailed",
    "JobFinished",
    "JobReleased",
    "JobRetried",
    "JobSnoozed",
    "JobStarted",
    "JobsEnqueued",
    "JobsRescued",
    "LeaderGained",
    "LeaderLost",
    "ListenerLost",
    "ListenerReconnected",
    "LogSubscriber",
    "WorkerStarted",
    "WorkerStopped",
]

logger = logging.getLogger("pgqueue")


class Event:
    """Base class of every event pgqueue emits."""

    __slots__ = ()


# -- jobs ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobsEnqueued(Event):
    """Jobs were inserted by one call (``add_job``: one; ``add_jobs``: the batch).

    ``jobs`` holds the handles of the jobs inserted (duplicates refused with
    ``on_conflict="ignore"`` are not there). ``in_transaction``: the insert ran in the caller's
    transaction (``add_job_with_tx``), so the jobs exist only if the caller commits.
    """

    jobs: Sequence[Any]  # JobHandle
    in_transaction: bool = False


@dataclass(frozen=True, slots=True)
class JobStarted(Event):
    """A worker claimed a job and is about to run its ``process``.

    ``queue_wait`` is the seconds from the job's due time (its ``scheduled_for``: enqueue time,
    or the delay's end) to this start, as measured by this process's clock.
    """

    id: int
    kind: str
    queue: str
    attempt: int
    max_attempts: int
    instance_id: uuid.UUID
    scheduled_for: datetime
    queue_wait: float


Outcome = Literal["completed", "retry", "failed", "cancelled", "snoozed", "released"]
"""How an attempt ended, as :class:`JobFinished` reports it."""


@dataclass(frozen=True, slots=True)
class JobFinished(Event):
    """An attempt of a job ended (the outcome is handed to the writer in the same moment).

    The runtime emits one of its subclasses, one per outcome: :class:`JobCompleted`,
    :class:`JobFailed`, :class:`JobCancelled`, :class:`JobSnoozed`, :class:`JobReleased`.
    Subscribe to ``JobFinished`` for all of them, or to the ones you need: an outcome nobody
    wants costs nothing.

    ``outcome``: ``completed``; ``retry`` (failed, will run again after ``delay`` seconds);
    ``failed`` (no attempts left, or ``Discard``); ``cancelled``; ``snoozed`` (``Retry(in_=)``:
    run again after ``delay``, the attempt not counted); ``released`` (a shutdown cut it off:
    pending again, the attempt not counted). ``duration``: seconds ``process`` ran (``None`` if
    it never started). ``error``: the stored message of a failed attempt; ``exc``: the
    exception, when there was one.
    """

    id: int
    kind: str
    queue: str
    attempt: int
    max_attempts: int
    instance_id: uuid.UUID
    outcome: Outcome
    duration: float | None
    queue_wait: float | None
    delay: float = 0.0
    error: str = ""
    exc: BaseException | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class JobCompleted(JobFinished):
    """A job's ``process`` returned: the job is done (``outcome`` is ``completed``)."""


@dataclass(frozen=True, slots=True)
class JobFailed(JobFinished):
    """An attempt failed: ``outcome`` is ``retry`` (it runs again) or ``failed`` (for good)."""


@dataclass(frozen=True, slots=True)
class JobCancelled(JobFinished):
    """A job was cancelled while it ran, or raised ``Cancel`` (``outcome`` is ``cancelled``)."""


@dataclass(frozen=True, slots=True)
class JobSnoozed(JobFinished):
    """A job raised ``Retry(in_=...)``: it runs again after ``delay``, the attempt not counted."""


@dataclass(frozen=True, slots=True)
class JobReleased(JobFinished):
    """A shutdown cut a job off: pending again, the attempt not counted."""


@dataclass(frozen=True, slots=True)
class JobRetried(Event):
    """A failed attempt will be retried after ``delay`` seconds (also a ``JobFinished``)."""

    id: int
    kind: str
    queue: str
    attempt: int
    max_attempts: int
    delay: float
    error: str


@dataclass(frozen=True, slots=True)
class JobsRescued(Event):
    """The leader took back jobs of instances that stopped heartbeating.

    ``jobs`` maps each rescued job id to the status it got (``pending``, ``failed`` when its
    attempts were used up, ``cancelled`` when a cancel had been asked); ``dead_instances`` are
    the instances presumed dead in the same round.
    """

    instance_id: uuid.UUID
    jobs: dict[int, str]
    dead_instances: Sequence[uuid.UUID] = ()


# -- workers ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkerStarted(Event):
    """A worker runtime registered and started its loops."""

    instance_id: uuid.UUID
    queues: dict[str, int]
    kinds: Sequence[str]


@dataclass(frozen=True, slots=True)
class WorkerStopped(Event):
    """A worker runtime stopped; ``unrecorded`` outcomes could not be written (rescued later)."""

    instance_id: uuid.UUID
    unrecorded: int = 0


@dataclass(frozen=True, slots=True)
class LeaderGained(Event):
    """The instance took the leader lock: it now runs maintenance (rescue, retention)."""

    instance_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class LeaderLost(Event):
    """The instance no longer leads; ``reason`` says why (``lock lost``, ``error``, ``stop``)."""

    instance_id: uuid.UUID
    reason: str


@dataclass(frozen=True, slots=True)
class ListenerLost(Event):
    """The LISTEN session died; the runtime reconnects after ``retry_in`` seconds."""

    instance_id: uuid.UUID
    error: str
    retry_in: float


@dataclass(frozen=True, slots=True)
class ListenerReconnected(Event):
    """The LISTEN session is back after being lost (``down_for`` seconds without it)."""

    instance_id: uuid.UUID
    down_for: float


# -- operators ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AdminAction(Event):
    """An operator acted on jobs, queues or periodic entries through the client's admin API.

    ``action`` names the call: ``"cancel"``, ``"retry"``, ``"delete"``, ``"purge"``,
    ``"pause"``, ``"resume"``, ``"cron_pause"``, ``"cron_resume"`` or ``"cron_trigger"``;
    ``job_ids`` the jobs it changed (or enqueued); ``detail`` what else the call was given.
    """

    action: str
    job_ids: Sequence[int] = ()
    detail: dict[str, Any] = field(default_factory=dict)


# -- the hub ------------------------------------------------------------------------------------

E = TypeVar("E", bound=Event)
Handler = Callable[[Any], None]
"""A subscriber: called with each event of the types it subscribed to."""


class EventHub:
    """Delivers events to the handlers subscribed to their type (one hub per client).

    Thread-safe: the sync runtime emits from job threads. Handlers run in the order they were
    subscribed; one that raises is logged (once per handler and event type) and skipped.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscriptions: list[tuple[Handler, tuple[type[Event], ...]]] = []
        # event type -> its handlers; rebuilt (never mutated) on every change, so emit() reads
        # it without a lock
        self._by_type: dict[type[Event], tuple[Handler, ...]] = {}
        # event type -> the wants() of its handlers when every one of them has one (no entry:
        # some handler takes every event of the type)
        self._asks: dict[type[Event], tuple[Callable[[type[Event]], bool], ...]] = {}
        self._warned: set[tuple[int, type[Event]]] = set()
        self.tracer: JobTracer | None = None
        """Wraps enqueues and runs in spans (``pgqueue.otel.instrument`` sets it; see
        :mod:`pgqueue.tracing`); ``None``: no tracing, at no cost."""

    def subscribe(self, handler: Handler, *types: type[Event]) -> Callable[[], None]:
        """Call ``handler`` with every event of ``types`` (all events when none are given).

        A subclass counts as its base (``JobFinished`` brings ``JobCompleted``...). A handler
        object with a ``wants(event_type) -> bool`` method is asked before an event of a type
        only it subscribed to is built (the ``LogSubscriber`` says no to completed jobs unless
        DEBUG logging is on). Returns a function that unsubscribes it.
        """
        for t in types:
            if not (isinstance(t, type) and issubclass(t, Event)):
                raise TypeError(f"subscribe() takes event classes from pgqueue.events, got {t!r}")
        if not callable(handler):
            raise TypeError(f"the handler must be callable, got {handler!r}")
        entry = (handler, types or (Event,))
        with self._lock:
            self._subscriptions.append(entry)
            self._rebuild()

        def unsubscribe() -> None:
            with self._lock:
                if entry in self._subscriptions:
                    self._subscriptions.remove(entry)
                    self._rebuild()

        return unsubscribe

    def _rebuild(self) -> None:
        table: dict[type[Event], tuple[Handler, ...]] = {}
        for event_type in _event_types():
            table[event_type] = tuple(
                handler for handler, wanted in self._subscriptions if issubclass(event_type, wanted)
            )
        self._by_type = {t: hs for t, hs in table.items() if hs}
        asks: dict[type[Event], tuple[Callable[[type[Event]], bool], ...]] = {}
        for event_type, handlers in self._by_type.items():
            filters = [getattr(h, "wants", None) for h in handlers]
            if all(callable(f) for f in filters):
                asks[event_type] = tuple(f for f in filters if f is not None)
        self._asks = asks

    def wants(self, event_type: type[Event]) -> bool:
        """Return True if an event of ``event_type`` would reach a subscriber (build it then)."""
        if event_type not in self._by_type:
            return False
        asks = self._asks.get(event_type)
        if asks is None:
            return True
        return any(ask(event_type) for ask in asks)

    def emit(self, event: Event) -> None:
        """Hand ``event`` to its subscribers; a handler's exception is logged, never raised."""
        handlers = self._by_type.get(type(event))
        if not handlers:
            return
        for handler in handlers:
            try:
                handler(event)
            except Exception:
                key = (id(handler), type(event))
                if key not in self._warned:
                    self._warned.add(key)
                    logger.exception(
                        "event subscriber %r failed on %s (logged once; it keeps being called)",
                        handler,
                        type(event).__name__,
                    )


def _event_types() -> list[type[Event]]:
    found: list[type[Event]] = []
    pending = [Event]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


# -- logging ------------------------------------------------------------------------------------


class LogSubscriber:
    """Writes pgqueue's events to the ``pgqueue`` logger: the log lines a worker prints.

    Every client has one (``client.log_subscription`` unsubscribes it). Failed attempts are
    logged at WARNING with their traceback, cancellations at INFO, other ends of attempts at
    DEBUG; leadership, rescues and listener trouble at INFO/WARNING.
    """

    TYPES: tuple[type[Event], ...] = ()  # set below, once the classes exist

    def wants(self, event_type: type[Event]) -> bool:
        """Say whether an event of ``event_type`` would be logged now.

        Completed, snoozed and released attempts are logged at DEBUG only: with DEBUG off, the
        runtime does not even build their events.
        """
        if issubclass(event_type, _DEBUG_ONLY):
            return logger.isEnabledFor(logging.DEBUG)
        return True

    def __call__(self, event: Event) -> None:
        """Log one event."""
        if isinstance(event, JobFinished):
            _log_finished(event)
        elif isinstance(event, JobsRescued):
            if event.jobs:
                logger.warning(
                    "rescued %d job(s) of dead instances",
                    len(event.jobs),
                    extra={
                        "instance_id": str(event.instance_id),
                        "rescued": len(event.jobs),
                        "dead_instances": [str(i) for i in event.dead_instances],
                    },
                )
        elif isinstance(event, LeaderGained):
            logger.info(
                "instance %s is now the leader",
                event.instance_id,
                extra={"instance_id": str(event.instance_id), "leader": True},
            )
        elif isinstance(event, LeaderLost):
            if event.reason == "lock lost":
                logger.warning(
                    "instance %s lost the leader lock",
                    event.instance_id,
                    extra={"instance_id": str(event.instance_id), "leader": False},
                )
        elif isinstance(event, ListenerLost):
            logger.warning(
                "listener lost (%s); reconnecting in %.1fs",
                event.error,
                event.retry_in,
                extra={"instance_id": str(event.instance_id)},
            )


LogSubscriber.TYPES = (JobFinished, JobsRescued, LeaderGained, LeaderLost, ListenerLost)
_DEBUG_ONLY = (JobCompleted, JobSnoozed, JobReleased)


def _loggable(exc: BaseException | None) -> BaseException | None:
    # Only real failures get a traceback in the log (not a timeout's internal exception).
    if exc is None or isinstance(exc, ProcessTimeout | ProcessStopped):
        return None
    return exc


def _log_finished(event: JobFinished) -> None:
    outcome = event.outcome
    if outcome not in ("retry", "failed", "cancelled") and not logger.isEnabledFor(logging.DEBUG):
        return  # another subscriber wanted the event; the log does not
    took = f" in {event.duration:.3f}s" if event.duration is not None else ""
    # the same fields as ctx.logger's (job_id is the row id), for structured (JSON) logs
    extra = {
        "job_id": event.id,
        "job_kind": event.kind,
        "job_queue": event.queue,
        "job_attempt": event.attempt,
        "job_max_attempts": event.max_attempts,
        "outcome": outcome,
        "duration": event.duration,
        "instance_id": str(event.instance_id),
    }
    if outcome in ("retry", "failed"):
        logger.warning(
            "job %s (%s) attempt %d/%d failed%s: %s%s",
            event.id,
            event.kind,
            event.attempt,
            event.max_attempts,
            took,
            event.error,
            f"; retrying in {event.delay:.1f}s" if outcome == "retry" else "; giving up",
            exc_info=_loggable(event.exc),
            extra={**extra, "error": event.error, "retry_in": event.delay},
        )
    elif outcome == "cancelled":
        logger.info(
            "job %s (%s) cancelled%s: %s",
            event.id,
            event.kind,
            took,
            event.error,
            extra={**extra, "error": event.error},
        )
    else:
        action = _ACTION_WORDS.get(outcome, outcome)
        logger.debug(
            "job %s (%s) attempt %d: %s%s",
            event.id,
            event.kind,
            event.attempt,
            action,
            took,
            extra=extra,
        )


# the words the debug line has always used
_ACTION_WORDS = {"completed": "complete", "snoozed": "snooze", "released": "release"}
