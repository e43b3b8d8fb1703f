"""What the runtime decides about a job, shared by the sync and asyncio runtimes.

The runtime modules do the I/O; this module holds the pure parts: reading a claimed row,
building the context, the retry delay, and turning how ``process`` ended into an outcome.
"""

from __future__ import annotations

import inspect
import json
import logging
import random
import threading
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from .jobs import CancelSignal, JobContext
from .outcomes import Cancel, Discard, Retry
from .runtime_config import RuntimeConfig

__all__ = [
    "CancelFlag",
    "ClaimedJob",
    "Outcome",
    "ProcessStopped",
    "ProcessTimeout",
    "backoff_delay",
    "finish_params",
    "is_coroutine_function",
    "outcome_for_bad_payload",
    "outcome_for_error",
    "parse_claimed",
    "split_claim_rows",
]

logger = logging.getLogger("pgqueue")
_JOB_LOGGER = logging.getLogger("pgqueue.job")

# Tracebacks beyond this are cut from the stored history (the message is kept whole).
_MAX_TRACEBACK_CHARS = 8000
_MAX_MESSAGE_CHARS = 2000


_FLAG_LOCK = threading.Lock()
_COROUTINE_FUNCTIONS: dict[Any, bool] = {}


def is_coroutine_function(fn: Any) -> bool:
    """``inspect.iscoroutinefunction``, remembered per function (it is asked for every job)."""
    key = getattr(fn, "__func__", fn)  # a bound method: its function
    try:
        return _COROUTINE_FUNCTIONS[key]
    except KeyError:
        result = _COROUTINE_FUNCTIONS[key] = inspect.iscoroutinefunction(fn)
        return result
    except TypeError:  # unhashable callable
        return inspect.iscoroutinefunction(fn)


class CancelFlag:
    """``ctx.cancelled``: set once when the job should stop; ``is_set()`` and ``wait()``.

    Behaves like a ``threading.Event`` that is only ever set, but costs a plain attribute
    until someone waits on it: a job that never waits never pays for the event's lock and
    condition (a noticeable part of a short job's cost).
    """

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: threading.Event | None = None

    def is_set(self) -> bool:
        """Return True once the job has been asked to stop."""
        return self._set

    def set(self) -> None:
        """Ask the job to stop (wakes anyone in :meth:`wait`)."""
        self._set = True
        event = self._event
        if event is not None:
            event.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job is asked to stop or ``timeout`` passes; return ``is_set()``."""
        if self._set:
            return True
        event = self._event
        if event is None:
            with _FLAG_LOCK:
                if self._event is None:
                    self._event = threading.Event()
                event = self._event
            # set() may have run before the event existed: it saw no event to wake
            if self._set:
                event.set()
        return event.wait(timeout)


@dataclass
class ClaimedJob:
    """A job this process claimed, as read back from ``job_claim``."""

    id: int
    kind: str
    queue: str
    payload_text: str
    attempt: int
    max_attempts: int
    scheduled_for: datetime
    options: dict[str, Any]
    priority: int
    lease: Any
    # why the runtime asked the job to stop, if it did: "cancel", "timeout" or "shutdown"
    stop_reason: str | None = field(default=None)

    @property
    def timeout(self) -> float | None:
        """The per-attempt timeout in seconds, if the job has one."""
        value = self.options.get("timeout")
        return float(value) if value is not None else None

    def context(self, cancelled: CancelSignal) -> JobContext:
        """Build the :class:`JobContext` handed to ``process``."""
        bound = logging.LoggerAdapter(
            _JOB_LOGGER,
            {
                "job_id": self.id,
                "job_kind": self.kind,
                "job_queue": self.queue,
                "job_attempt": self.attempt,
            },
        )
        return JobContext(
            job_id=self.id,
            kind=self.kind,
            queue=self.queue,
            attempt=self.attempt,
            max_attempts=self.max_attempts,
            scheduled_for=self.scheduled_for,
            cancelled=cancelled,
            logger=bound,
        )


def parse_claimed(row: Sequence[Any], lease: Any, queue: str) -> ClaimedJob:
    """Read one job row returned by ``job_claim`` (the queue is the one claimed from)."""
    job_id, kind, payload, attempts, max_attempts, scheduled_for, options, priority, _ = row
    return ClaimedJob(
        id=job_id,
        kind=kind,
        queue=queue,
        payload_text=payload,
        attempt=attempts,
        max_attempts=max_attempts,
        scheduled_for=scheduled_for,
        # "{}" for almost every job: skip the parser
        options=json.loads(options) if options and options != "{}" else {},
        priority=priority,
        lease=lease,
    )


def split_claim_rows(
    rows: Sequence[Sequence[Any]],
) -> tuple[Sequence[Sequence[Any]], float | None]:
    """Split ``job_claim``'s rows into the job rows and the seconds until the next due job.

    The last row carries the next due time (id NULL) only when the claim filled fewer slots
    than asked; then it is ``None`` when no scheduled job is waiting.
    """
    if rows and rows[-1][0] is None:
        due = rows[-1][8]
        return rows[:-1], None if due is None else float(due)
    return rows, None


def finish_params(batch: Sequence[tuple[ClaimedJob, Outcome]]) -> tuple[list[Any], ...]:
    """Return the array parameters of ``job_finish_many`` for a batch of outcomes."""
    columns: tuple[list[Any], ...] = ([], [], [], [], [], [], [])
    ids, leases, actions, statuses, delays, messages, errors = columns
    for job, outcome in batch:
        ids.append(job.id)
        leases.append(job.lease)
        if outcome.action in ("retry", "fail", "cancel"):
            actions.append("error")
            statuses.append(outcome.status)
            messages.append(outcome.message)
            errors.append(outcome.error)
        else:
            actions.append(outcome.action)
            statuses.append(None)
            messages.append(None)
            errors.append(None)
        delays.append(outcome.delay)
    return columns


def backoff_delay(job: ClaimedJob, config: RuntimeConfig) -> float:
    """Seconds to wait before the next attempt: exponential in the attempt, +/-20 % jitter."""
    base = float(job.options.get("backoff", config.retry_backoff))
    cap = float(job.options.get("backoff_max", config.retry_backoff_max))
    # jitter spreads retries of jobs that failed together (an outage) over time
    delay = min(base * 2.0 ** min(job.attempt - 1, 60), cap)
    return delay * random.uniform(0.8, 1.2)


Action = Literal["complete", "retry", "fail", "cancel", "snooze", "release"]


@dataclass(frozen=True)
class Outcome:
    """What to write for a job that ended: the action and its details."""

    action: Action
    delay: float = 0.0
    message: str = ""
    error: str = ""  # JSON object for the error history

    @property
    def status(self) -> str:
        """The job status an error outcome writes (``job_finish_many``'s status column)."""
        return {"retry": "pending", "fail": "failed", "cancel": "cancelled"}.get(self.action, "")


def _error_json(job: ClaimedJob, message: str, exc: BaseException | None) -> str:
    tb = ""
    if exc is not None:
        tb = "".join(traceback.format_exception(exc))[-_MAX_TRACEBACK_CHARS:]
    return json.dumps(
        {
            "attempt": job.attempt,
            "at": datetime.now(UTC).isoformat(),
            "error": message,
            "traceback": tb,
        }
    )


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__qualname__}: {exc}" if str(exc) else type(exc).__qualname__
    return text[:_MAX_MESSAGE_CHARS]


def outcome_for_error(job: ClaimedJob, exc: BaseException, config: RuntimeConfig) -> Outcome:
    """Decide what happens to ``job`` after ``process`` raised ``exc`` (or it was stopped)."""
    if job.stop_reason == "shutdown":
        # Whatever the job raised on its way out (even Cancel), it was cut off by a stop:
        # it goes back to pending for another run.
        return Outcome("release")
    if isinstance(exc, Retry):
        return Outcome("snooze", delay=max(exc.in_.total_seconds(), 0.0))
    if isinstance(exc, Cancel):
        return Outcome("cancel", message=exc.reason, error=_error_json(job, exc.reason, None))
    if isinstance(exc, Discard):
        return Outcome("fail", message=exc.reason, error=_error_json(job, exc.reason, None))
    if job.stop_reason == "cancel":
        message = "cancelled while running"
        return Outcome("cancel", message=message, error=_error_json(job, message, exc))
    if job.stop_reason == "timeout":
        message = f"timed out after {job.timeout:g}s"
    else:
        message = _describe(exc)
    error = _error_json(job, message, exc)
    if job.attempt >= job.max_attempts:
        return Outcome("fail", message=message, error=error)
    return Outcome("retry", delay=backoff_delay(job, config), message=message, error=error)


def outcome_for_bad_payload(job: ClaimedJob, exc: BaseException) -> Outcome:
    """Fail a job whose stored arguments do not fit its class (retrying cannot help)."""
    message = (
        f"cannot build {job.kind!r} from its stored arguments: {_describe(exc)} "
        "(was it enqueued by a different version of the job class?)"
    )
    return Outcome("fail", message=message, error=_error_json(job, message, exc))


class ProcessTimeout(Exception):
    """``process`` ran past the job's timeout."""


class ProcessStopped(Exception):
    """``process`` was cut off by the runtime (cancel request or shutdown)."""
