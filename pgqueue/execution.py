"""What the runtime decides about a job, shared by the sync and asyncio runtimes.

The runtime modules do the I/O; this module holds the pure parts: reading a claimed row,
building the context, the retry delay, and turning how ``process`` ended into an outcome.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import random
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from .errors import ConnectionLost, DatabaseError
from .jobs import CancelSignal, JobContext
from .outcomes import Cancel, Discard, Retry
from .runtime_config import RuntimeConfig

__all__ = [
    "OVERRUN_GRACE",
    "CancelFlag",
    "ClaimedJob",
    "Outcome",
    "ProcessStopped",
    "ProcessTimeout",
    "Running",
    "StuckRuns",
    "backoff_delay",
    "describe_error",
    "is_coroutine_function",
    "is_data_refusal",
    "outcome_for_bad_payload",
    "outcome_for_error",
    "outcome_unrecordable",
    "outcome_unrunnable",
    "read_options",
    "signal_stop",
    "storable_text",
]

logger = logging.getLogger("pgqueue")
_JOB_LOGGER = logging.getLogger("pgqueue.job")

# How long a coroutine that overran its timeout gets to unwind from its cancellation before
# the runtime records the timeout and frees its slot (its code may go on: a stuck run).
OVERRUN_GRACE = 1.0

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


@dataclass(slots=True)
class ClaimedJob:
    """A job this process claimed, as read back from ``job_claim``.

    ``timeout``, ``backoff`` and ``backoff_max`` come from the row's ``options`` column, checked;
    when that column cannot be read, ``options_error`` says why (the job is failed unrun).
    """

    id: int
    kind: str
    queue: str
    payload_text: str
    attempt: int
    max_attempts: int
    scheduled_for: datetime
    priority: int
    lease: Any
    job_id: str | None = None
    timeout: float | None = None
    backoff: float | None = None
    backoff_max: float | None = None
    options_error: str | None = None
    # why the runtime asked the job to stop, if it did: "cancel", "timeout" or "shutdown"
    stop_reason: str | None = None
    # how long process() ran, in seconds, once it ended (or was given up on)
    duration: float | None = None
    # the periodic entry and tick that enqueued the job (its stored options say)
    periodic: str | None = None
    tick: datetime | None = None
    # the enqueue's trace context (W3C headers), when a tracer was installed (pgqueue.tracing)
    trace: dict[str, str] | None = None

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
            id=self.id,
            job_id=self.job_id,
            kind=self.kind,
            queue=self.queue,
            attempt=self.attempt,
            max_attempts=self.max_attempts,
            scheduled_for=self.scheduled_for,
            cancelled=cancelled,
            logger=bound,
            periodic=self.periodic,
            tick=self.tick,
        )


def _number(options: dict[str, Any], name: str, *, allow_zero: bool) -> float | None:
    value = options.get(name)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not allow_zero)
    ):
        raise ValueError(
            f"{name!r} must be a {'non-negative' if allow_zero else 'positive'} "
            f"number of seconds, got {value!r}"
        )
    return float(value)


def read_options(job: ClaimedJob, text: str | None) -> None:
    """Set ``job``'s runtime options from its stored ``options`` text, or ``options_error``.

    Never raises: options that cannot be read make the job fail unrun (``outcome_unrunnable``).
    """
    if not text or text == "{}":  # almost every job: skip the parser
        return
    try:
        options = json.loads(text)
        if not isinstance(options, dict):
            raise ValueError(f"expected a JSON object, got {_clip(text, 100)}")
        job.timeout = _number(options, "timeout", allow_zero=False)
        job.backoff = _number(options, "backoff", allow_zero=True)
        job.backoff_max = _number(options, "backoff_max", allow_zero=False)
        periodic = options.get("periodic")
        if periodic is not None:
            if not isinstance(periodic, dict) or not isinstance(periodic.get("name"), str):
                raise ValueError(f"'periodic' must name the entry, got {_clip(str(periodic), 100)}")
            job.periodic = periodic["name"]
            job.tick = datetime.fromisoformat(str(periodic.get("tick")))
        trace = options.get("trace")
        if isinstance(trace, dict):  # a context that cannot be read is left out, never fatal
            job.trace = {k: v for k, v in trace.items() if isinstance(v, str)}
    except (ValueError, RecursionError) as exc:  # json.JSONDecodeError is a ValueError
        job.options_error = f"cannot read the job's stored options: {exc}"


def backoff_delay(job: ClaimedJob, config: RuntimeConfig) -> float:
    """Seconds to wait before the next attempt: exponential in the attempt, +/-20 % jitter."""
    base = config.retry_backoff if job.backoff is None else job.backoff
    cap = config.retry_backoff_max if job.backoff_max is None else job.backoff_max
    # jitter spreads retries of jobs that failed together (an outage) over time
    delay = min(base * 2.0 ** min(max(job.attempt, 1) - 1, 60), cap)
    return delay * random.uniform(0.8, 1.2)


Action = Literal["complete", "retry", "fail", "cancel", "snooze", "release"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What to write for a job that ended: the action and its details.

    ``message`` and ``error`` are storable: NUL bytes and lone surrogates are escaped.
    ``exc`` is the exception behind an error outcome, for the log (never written).
    """

    action: Action
    delay: float = 0.0
    message: str = ""
    error: str = ""  # JSON object for the error history
    exc: BaseException | None = field(default=None, compare=False, repr=False)

    @property
    def status(self) -> str:
        """The job status an error outcome writes (``job_finish_many``'s status column)."""
        return {"retry": "pending", "fail": "failed", "cancel": "cancelled"}.get(self.action, "")


def storable_text(text: str) -> str:
    r"""Return ``text`` as PostgreSQL can store it in ``text`` and ``jsonb``.

    A NUL character becomes the four characters ``\x00`` and a lone surrogate its ``\udXXX``
    escape: PostgreSQL refuses both, and one job's odd exception message must not keep its
    outcome (or, written in a batch, other jobs' outcomes) from being recorded.
    """
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_name(exc: BaseException) -> str:
    try:
        return str(type(exc).__qualname__)
    except Exception:  # a hostile metaclass
        return "<unnamed exception type>"


def describe_error(exc: BaseException) -> str:
    """``Type: message`` for the job's ``last_error``, storable and cut at 2,000 characters.

    Never raises: an exception whose ``str()`` fails is described by that failure.
    """
    name = _type_name(exc)
    try:
        text = str(exc)
    except Exception as inner:
        text = f"<str() of the exception failed: {_type_name(inner)}>"
    described = f"{name}: {text}" if text else name
    return storable_text(described)[:_MAX_MESSAGE_CHARS]


def _traceback_text(exc: BaseException) -> str:
    try:
        text = "".join(traceback.format_exception(exc))
    except Exception as inner:
        text = f"<the traceback could not be formatted: {_type_name(inner)}>"
    return storable_text(text)[-_MAX_TRACEBACK_CHARS:]


def _error_json(job: ClaimedJob, message: str, exc: BaseException | None) -> str:
    now = datetime.now(UTC)
    entry: dict[str, Any] = {
        "attempt": job.attempt,
        "at": now.isoformat(),
        "error": message,
        "traceback": "" if exc is None else _traceback_text(exc),
    }
    if job.duration is not None:
        entry["started_at"] = (now - timedelta(seconds=job.duration)).isoformat()
        entry["duration"] = round(job.duration, 6)
    return json.dumps(entry)


def _error_outcome(
    job: ClaimedJob, message: str, exc: BaseException | None, config: RuntimeConfig
) -> Outcome:
    """Return a charged failed attempt: retried after the backoff, or failed if the last."""
    error = _error_json(job, message, exc)
    if job.attempt >= job.max_attempts:
        return Outcome("fail", message=message, error=error, exc=exc)
    return Outcome("retry", delay=backoff_delay(job, config), message=message, error=error, exc=exc)


def outcome_for_error(job: ClaimedJob, exc: BaseException, config: RuntimeConfig) -> Outcome:
    """Decide what happens to ``job`` after ``process`` raised ``exc`` (or it was stopped).

    Never raises: if the error cannot even be described, that failure is the attempt's error
    (charged and recorded like any other), so an odd exception cannot make a job loop.
    """
    try:
        return _outcome_for_error(job, exc, config)
    except Exception as inner:
        message = storable_text(
            f"{_type_name(exc)}: <the error could not be described: {_type_name(inner)}>"
        )
        return _error_outcome(job, message, None, config)


def _outcome_for_error(job: ClaimedJob, exc: BaseException, config: RuntimeConfig) -> Outcome:
    if job.stop_reason == "shutdown":
        # Whatever the job raised on its way out (even Cancel), it was cut off by a stop:
        # it goes back to pending for another run.
        return Outcome("release")
    if isinstance(exc, Retry):
        return Outcome("snooze", delay=max(exc.in_.total_seconds(), 0.0))
    if isinstance(exc, Cancel | Discard):
        reason = storable_text(str(exc.reason))[:_MAX_MESSAGE_CHARS]
        action: Action = "cancel" if isinstance(exc, Cancel) else "fail"
        return Outcome(action, message=reason, error=_error_json(job, reason, None))
    if job.stop_reason == "cancel":
        message = "cancelled while running"
        return Outcome("cancel", message=message, error=_error_json(job, message, exc), exc=exc)
    if job.stop_reason == "timeout":
        message = f"timed out after {job.timeout:g}s"
    else:
        message = describe_error(exc)
    return _error_outcome(job, message, exc, config)


def outcome_for_bad_payload(job: ClaimedJob, exc: BaseException) -> Outcome:
    """Fail a job whose stored arguments do not fit its class (retrying cannot help)."""
    message = storable_text(
        f"cannot build {job.kind!r} from its stored arguments: {describe_error(exc)} "
        "(was it enqueued by a different version of the job class?)"
    )[:_MAX_MESSAGE_CHARS]
    return Outcome("fail", message=message, error=_error_json(job, message, exc), exc=exc)


def outcome_unrunnable(job: ClaimedJob) -> Outcome | None:
    """Fail, without running it, a job that cannot run: unreadable options, no attempts left.

    ``None`` for a job that can run (nearly all).
    """
    if job.options_error is not None:
        message = storable_text(job.options_error)[:_MAX_MESSAGE_CHARS]
    elif job.attempt > job.max_attempts:
        # A row edited by hand, or max_attempts lowered: the claim counted one attempt more
        # than the job has. It does not run again.
        message = (
            f"not run: no attempts left (claimed as attempt {job.attempt} of "
            f"max_attempts {job.max_attempts})"
        )
    else:
        return None
    return Outcome("fail", message=message, error=_error_json(job, message, None))


def outcome_unrecordable(job: ClaimedJob, error: BaseException) -> Outcome:
    """Return what to write instead of an outcome the database refused (its text, say).

    A message of ours made storable, and no traceback: this write does not fail on data. The
    job ends ``failed``, so that a job whose outcome cannot be stored does not loop.
    """
    # Only the first line of the refusal: its details may quote the refused data itself.
    reason = describe_error(error).split("\n", 1)[0]
    message = (
        "the outcome of this attempt could not be recorded: the database refused it "
        f"({_clip(reason, 300)})"
    )
    return Outcome("fail", message=message, error=_error_json(job, message, None))


class ProcessTimeout(Exception):
    """``process`` ran past the job's timeout."""


class ProcessStopped(Exception):
    """``process`` was cut off by the runtime (cancel request or shutdown)."""


@dataclass(slots=True)
class Running:
    """One run of a claimed job in this process: the runtime's bookkeeping, both sides alike."""

    job: ClaimedJob
    cancel: CancelFlag = field(default_factory=CancelFlag)
    handle: Any = None  # from JobPool.submit
    inner: Any = None  # what to cancel to cut process() off (a task), while it runs
    is_coroutine: bool = False
    # seconds from the job's due time to this run's start, when an event asked for it
    queue_wait: float | None = None


def signal_stop(running: Running, reason: str) -> None:
    """Tell a running job to stop: its context's flag, and for coroutines a cancellation.

    ``reason`` is ``"cancel"``, ``"timeout"`` or ``"shutdown"``; the first one given is kept.
    """
    if running.job.stop_reason is None:
        running.job.stop_reason = reason
    running.cancel.set()
    # A thread cannot be interrupted, so a sync job asked to cancel is only signalled (it may
    # still complete); shutdown and timeouts stop waiting for it (its result is ignored).
    inner = running.inner
    if inner is not None and (running.is_coroutine or reason != "cancel"):
        inner.cancel()


class StuckRuns:
    """Runs whose ``process`` overran its timeout, ignored cancellation and still runs.

    The runtime stops waiting for such a run (its attempt is recorded as timed out and its slot
    is free) but cannot stop its code; this counts them and logs when each starts and stops
    being stuck. Thread-safe: a thread may report that its run ended.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, job: ClaimedJob) -> Callable[[], None]:
        """Count ``job``'s run as stuck; return the function to call once it ends."""
        with self._lock:
            self._count += 1
            count = self._count
        since = time.monotonic()
        logger.warning(
            "job %s (%s): process() overran its timeout of %gs and ignored cancellation; its "
            "attempt is recorded as timed out and its slot is free, but its code keeps running "
            "(%d stuck run(s) in this process)",
            job.id,
            job.kind,
            job.timeout,
            count,
        )
        ended = False

        def end() -> None:
            nonlocal ended
            with self._lock:
                if ended:
                    return
                ended = True
                self._count -= 1
            logger.info(
                "job %s (%s): the stuck run of attempt %d ended %.1fs after its timeout; its "
                "result was ignored",
                job.id,
                job.kind,
                job.attempt,
                time.monotonic() - since,
            )

        return end


def is_data_refusal(exc: BaseException) -> bool:
    """Return True when a write failed on what it carried, so that a resend fails again.

    A data exception or integrity violation from the server (SQLSTATE classes 22, 23), or a
    value the driver could not encode (a ``ValueError``/``TypeError``, raw or translated).
    Lost connections, timeouts and everything else may pass: those writes are retried.
    """
    if isinstance(exc, ConnectionLost):
        return False
    if isinstance(exc, DatabaseError):
        if exc.sqlstate is not None:
            return exc.sqlstate[:2] in ("22", "23")
        return isinstance(exc.__cause__, ValueError | TypeError)
    return isinstance(exc, ValueError | TypeError)
