"""Per-job options and the rules for merging them."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypedDict

from .errors import InvalidJobOptions, InvalidName, InvalidQueueName
from .names import check_text, validate_queue

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_QUEUE",
    "JobOptionKwargs",
    "JobOptions",
    "ResolvedOptions",
]

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 25
# priority is stored as smallint; higher runs first.
MIN_PRIORITY, MAX_PRIORITY = -32768, 32767
MAX_ATTEMPTS_LIMIT = 2**31 - 1  # an integer column
MAX_JOB_ID_LENGTH = 255
# Far beyond any real schedule, well inside PostgreSQL's timestamp range.
MAX_DELAY = timedelta(days=366 * 1000)


@dataclass(frozen=True)
class JobOptions:
    """How and when a job runs. ``None`` means "not set here": a lower layer decides.

    Layers, strongest first: keyword arguments of ``add_job``, a ``JobOptions`` passed to it,
    the job class's ``job_options``, the client's defaults, then pgqueue's built-in defaults.
    A partial ``JobOptions`` therefore never blanks out what it does not mention.

    - ``queue``: the queue the job goes to (default ``"default"``).
    - ``priority``: higher runs first among due jobs of a queue (default 0, range of a smallint).
    - ``run_at``: an aware datetime when the job becomes due; ``run_in``: a delay from *now on
      the database clock*. At most one of the two.
    - ``max_attempts``: how many times the job may run before it is marked failed (default 25).
    - ``job_id``: a caller-chosen unique id for the job.
    - ``unique``: refuse identical jobs (same queue, kind and arguments) for this long.
    - ``timeout``: how long one attempt may run.
    - ``retry_backoff`` / ``retry_backoff_max``: the base and the cap of the exponential delay
      between failed attempts (defaults from :class:`~pgqueue.RuntimeConfig`).
    """

    queue: str | None = None
    priority: int | None = None
    run_at: datetime | None = None
    run_in: timedelta | None = None
    max_attempts: int | None = None
    job_id: str | None = None
    unique: timedelta | None = None
    timeout: timedelta | None = None
    retry_backoff: timedelta | None = None
    retry_backoff_max: timedelta | None = None

    def __post_init__(self) -> None:
        # Every value is checked here, where the option is built, so a bad one fails at the
        # line that wrote it, with InvalidJobOptions, whatever the layer it came from.
        if self.queue is not None:
            _check_queue(self.queue)
        if self.priority is not None:
            _check_priority(self.priority)
        if self.max_attempts is not None:
            _check_max_attempts(self.max_attempts)
        if self.run_at is not None and self.run_in is not None:
            raise InvalidJobOptions("pass either run_at or run_in, not both")
        if self.run_at is not None:
            _check_run_at(self.run_at)
        _seconds("run_in", self.run_in, allow_zero=True)
        if self.job_id is not None:
            _check_job_id(self.job_id)
        _seconds("unique", self.unique, allow_zero=False)
        _seconds("timeout", self.timeout, allow_zero=False)
        _seconds("retry_backoff", self.retry_backoff, allow_zero=True)
        _seconds("retry_backoff_max", self.retry_backoff_max, allow_zero=False)

    def merged_with(self, override: JobOptions | None) -> JobOptions:
        """Return these options with every field that ``override`` sets replaced by its value."""
        if override is None:
            return self
        changes = {
            f.name: getattr(override, f.name)
            for f in dataclasses.fields(override)
            if getattr(override, f.name) is not None
        }
        # run_at and run_in are one choice: setting either in the override replaces both.
        if "run_at" in changes or "run_in" in changes:
            changes.setdefault("run_at", None)
            changes.setdefault("run_in", None)
        return dataclasses.replace(self, **changes) if changes else self

    def resolve(self) -> ResolvedOptions:
        """Fill the gaps with built-in defaults (every value was checked when it was set)."""
        return ResolvedOptions(
            queue=DEFAULT_QUEUE if self.queue is None else self.queue,
            priority=0 if self.priority is None else self.priority,
            run_at=self.run_at,
            run_in_seconds=_seconds("run_in", self.run_in, allow_zero=True),
            max_attempts=DEFAULT_MAX_ATTEMPTS if self.max_attempts is None else self.max_attempts,
            job_id=self.job_id,
            unique_seconds=_seconds("unique", self.unique, allow_zero=False),
            timeout_seconds=_seconds("timeout", self.timeout, allow_zero=False),
            backoff_seconds=_seconds("retry_backoff", self.retry_backoff, allow_zero=True),
            backoff_max_seconds=_seconds(
                "retry_backoff_max", self.retry_backoff_max, allow_zero=False
            ),
        )


def _check_queue(queue: object) -> None:
    try:
        validate_queue(queue)
    except InvalidName as exc:
        raise InvalidQueueName(str(exc)) from None


def _check_priority(priority: object) -> None:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidJobOptions(f"priority must be an int, got {priority!r}")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidJobOptions(
            f"priority {priority} is out of range: use {MIN_PRIORITY}..{MAX_PRIORITY}"
        )


def _check_max_attempts(max_attempts: object) -> None:
    if (
        isinstance(max_attempts, bool)
        or not isinstance(max_attempts, int)
        or not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT
    ):
        raise InvalidJobOptions(
            f"max_attempts must be an int from 1 to {MAX_ATTEMPTS_LIMIT}, got {max_attempts!r}"
        )


def _check_run_at(run_at: object) -> None:
    if not isinstance(run_at, datetime):
        raise InvalidJobOptions(f"run_at must be a datetime, got {run_at!r}")
    if run_at.tzinfo is None or run_at.utcoffset() is None:
        raise InvalidJobOptions(
            "run_at must be timezone-aware, e.g. datetime.now(timezone.utc); "
            "a naive datetime is ambiguous (or use run_in for a delay)"
        )


def _check_job_id(job_id: object) -> None:
    if not isinstance(job_id, str) or not job_id:
        raise InvalidJobOptions(f"job_id must be a non-empty string, got {job_id!r}")
    if len(job_id) > MAX_JOB_ID_LENGTH:
        raise InvalidJobOptions(f"job_id must be at most {MAX_JOB_ID_LENGTH} characters")
    try:
        check_text("job_id", job_id)
    except ValueError as exc:
        raise InvalidJobOptions(str(exc)) from None


class JobOptionKwargs(TypedDict, total=False):
    """The options ``add_job`` accepts as keywords; the fields of :class:`JobOptions`."""

    queue: str | None
    priority: int | None
    run_at: datetime | None
    run_in: timedelta | None
    max_attempts: int | None
    job_id: str | None
    unique: timedelta | None
    timeout: timedelta | None
    retry_backoff: timedelta | None
    retry_backoff_max: timedelta | None


def _seconds(name: str, value: Any, *, allow_zero: bool) -> float | None:
    if value is None:
        return None
    if not isinstance(value, timedelta):
        raise InvalidJobOptions(f"{name} must be a datetime.timedelta, got {value!r}")
    seconds = value.total_seconds()
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        raise InvalidJobOptions(f"{name} must be a positive duration, got {value!r}")
    if value > MAX_DELAY:
        raise InvalidJobOptions(f"{name} must be at most {MAX_DELAY.days} days, got {value!r}")
    return seconds


@dataclass(frozen=True)
class ResolvedOptions:
    """Options after merging and validation, in the form the SQL layer binds."""

    queue: str
    priority: int
    run_at: datetime | None
    run_in_seconds: float | None
    max_attempts: int
    job_id: str | None
    unique_seconds: float | None
    timeout_seconds: float | None
    backoff_seconds: float | None = None
    backoff_max_seconds: float | None = None
