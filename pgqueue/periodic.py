"""Periodic jobs: :class:`Periodic` entries and the ticks of their schedules.

Pure and shared by both sides. An entry names a job (a :class:`~pgqueue.Worker` instance with
its arguments), a schedule (a 5-field cron expression, an ``@hourly``-style alias, or an
interval), a time zone and the policies for missed ticks and overlaps. Its ticks are instants,
computed the same way by every process from the schedule alone (never from when a process
started), and stored in UTC: the tick ledger (``cron_ticks``) keyed on (name, tick) is what
makes one job per tick, whichever processes evaluate the schedule.

Cron expressions are read by `cronsim <https://pypi.org/project/cronsim/>`_: small, no
dependencies, maintained for Healthchecks (which lives on evaluating cron expressions right),
zoneinfo-aware, and matching Debian cron at daylight-saving changes (a daily job in the hour
that repeats runs once; one in the hour that is skipped runs at the first valid instant after
it). croniter, the other choice, depends on python-dateutil and was unmaintained for a while.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from .errors import ConfigurationError
from .jobs import Worker
from .names import validate_kind
from .options import JobOptions

__all__ = [
    "ALIASES",
    "DEFAULT_GRACE_MAX",
    "LATE_AFTER",
    "InvalidSchedule",
    "Overlap",
    "Periodic",
    "next_tick",
    "plan_ticks",
]

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
"""The cron aliases pgqueue reads, and the expression each stands for."""

DEFAULT_GRACE_MAX = timedelta(minutes=10)
"""The longest default grace period: a missed tick older than min(interval, this) is skipped."""

Overlap = Literal["allow", "skip"]
"""What to do at a tick while the entry's previous job is still pending or running."""

# Interval ticks are counted from here, so every process computes the same ones.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


class InvalidSchedule(ConfigurationError, ValueError):
    """A periodic entry's schedule, time zone, name or policy cannot work."""


InvalidSchedule.__module__ = "pgqueue"


@dataclass(frozen=True)
class Periodic:
    """A job enqueued on a schedule: exactly one job per tick, whatever runs the schedule.

    - ``name``: stable and unique; the tick ledger and the admin API know the entry by it
      (renaming it makes a new entry).
    - ``job``: the job to enqueue at each tick, with its arguments.
    - ``cron`` (5 fields, or ``@hourly``, ``@daily``, ``@midnight``, ``@weekly``, ``@monthly``,
      ``@yearly``/``@annually``) or ``every`` (a timedelta of at least a second): the schedule.
      Interval ticks are counted from 1970-01-01 UTC, so every process agrees on them.
    - ``timezone``: the IANA zone the cron expression is read in (default UTC).
    - ``options``: the job's options (queue, priority, timeout...), as for ``add_job``.
    - ``grace``: how late a missed tick may still be enqueued (default min(interval, 10 min));
      ``backfill``: enqueue every missed tick of that window instead, oldest first.
    - ``overlap``: ``"allow"`` (default) or ``"skip"`` a tick while the previous job of the
      entry is pending or running.
    - ``jitter``: delay each tick's job by a stable pseudo-random amount up to this much.
    - ``run_on_start``: also enqueue one job each time a worker process starts (one per
      process start, not one per deploy: see docs/periodic.md).
    """

    name: str
    job: Worker
    cron: str | None = None
    every: timedelta | None = None
    timezone: str = "UTC"
    options: JobOptions | None = None
    grace: timedelta | None = None
    backfill: timedelta | None = None
    overlap: Overlap = "allow"
    jitter: timedelta | None = None
    run_on_start: bool = False
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)
    _expression: str | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            validate_kind(self.name)
        except ValueError:
            raise InvalidSchedule(
                f"invalid periodic entry name {self.name!r}: use up to 128 letters, digits and "
                "'_', '.', ':', '-', starting with a letter or '_'"
            ) from None
        if not isinstance(self.job, Worker):
            raise InvalidSchedule(
                f"{self.name}: job must be a pgqueue.Worker instance with its arguments, "
                f"got {self.job!r}"
            )
        if (self.cron is None) == (self.every is None):
            raise InvalidSchedule(f"{self.name}: give exactly one of cron= and every=")
        try:
            zone = ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError, TypeError):
            raise InvalidSchedule(
                f"{self.name}: unknown time zone {self.timezone!r}: use an IANA name such as "
                "'Europe/Paris' or 'UTC'"
            ) from None
        object.__setattr__(self, "_zone", zone)
        expression = None
        if self.cron is not None:
            expression = ALIASES.get(self.cron.strip().lower(), self.cron.strip())
            if expression.startswith("@"):
                raise InvalidSchedule(
                    f"{self.name}: unknown cron alias {self.cron!r}: use one of "
                    f"{', '.join(ALIASES)}, or 5 fields"
                )
            try:
                # cronsim also reads 6 fields (seconds first); pgqueue's cron is 5 fields
                if len(expression.split()) != 5:
                    raise CronSimError("Wrong number of fields")
                next(CronSim(expression, datetime(2000, 1, 1, tzinfo=zone)))
            except CronSimError as exc:
                raise InvalidSchedule(
                    f"{self.name}: bad cron expression {self.cron!r} ({exc}): use 5 fields, "
                    "minute hour day-of-month month day-of-week, e.g. '*/15 * * * *'"
                ) from None
            except StopIteration:
                raise InvalidSchedule(
                    f"{self.name}: the cron expression {self.cron!r} never matches"
                ) from None
        object.__setattr__(self, "_expression", expression)
        if self.every is not None:
            _positive(self.name, "every", self.every, minimum=timedelta(seconds=1))
        for what in ("grace", "backfill", "jitter"):
            value = getattr(self, what)
            if value is not None:
                _positive(self.name, what, value, minimum=timedelta(0))
        if self.overlap not in ("allow", "skip"):
            raise InvalidSchedule(
                f"{self.name}: overlap must be 'allow' or 'skip', got {self.overlap!r}"
            )
        if self.options is not None and not isinstance(self.options, JobOptions):
            raise InvalidSchedule(f"{self.name}: options must be a pgqueue.JobOptions")

    # -- the schedule ---------------------------------------------------------------------------

    @property
    def spec(self) -> str:
        """The schedule as text: the cron expression as given, or ``every <seconds>s``."""
        if self.cron is not None:
            return self.cron
        assert self.every is not None
        return f"every {_seconds_text(self.every)}"

    def ticks_after(self, after: datetime) -> Iterator[datetime]:
        """Yield the ticks strictly after ``after``, in order, as UTC datetimes."""
        after = after.astimezone(UTC)
        if self.every is not None:
            tick = _interval_tick(self.every // _MICROSECOND, after, following=True)
            while True:
                yield tick
                tick += self.every
        assert self._expression is not None
        for tick in CronSim(self._expression, after.astimezone(self._zone)):
            tick_utc = tick.astimezone(UTC)
            if tick_utc > after:
                yield tick_utc

    def ticks_between(self, start: datetime, end: datetime) -> list[datetime]:
        """Return the ticks in ``(start, end]``, oldest first."""
        out = []
        for tick in self.ticks_after(start):
            if tick > end:
                break
            out.append(tick)
        return out

    def last_tick(self, at: datetime) -> datetime | None:
        """Return the latest tick at or before ``at`` (``None`` if none in the last 50 years)."""
        at = at.astimezone(UTC)
        if self.every is not None:
            return _interval_tick(self.every // _MICROSECOND, at, following=False)
        assert self._expression is not None
        # cronsim's reverse iteration starts before its start; step a second past ``at``
        start = (at + timedelta(seconds=1)).astimezone(self._zone).replace(microsecond=0)
        found = None
        try:
            for tick in CronSim(self._expression, start, reverse=True):
                tick_utc = tick.astimezone(UTC)
                if tick_utc <= at:
                    found = tick_utc
                    break
        except StopIteration:  # pragma: no cover - cronsim ends iteration by returning
            return None
        if found is None:
            return None
        # going back in wall-clock time, cronsim misses a tick in the first pass of an hour
        # that repeats (fall back) when ``at`` is in its second pass: step forward from there
        for tick in self.ticks_after(found):
            if tick > at:
                break
            found = tick
        return found

    def interval(self, at: datetime) -> timedelta:
        """Return the time between the tick at or before ``at`` and the next one."""
        if self.every is not None:
            return self.every
        last = self.last_tick(at) or at
        following = next(self.ticks_after(last))
        return following - last

    def grace_at(self, at: datetime) -> timedelta:
        """Return how late a missed tick may be enqueued (``grace``, else min(interval, 10m))."""
        if self.grace is not None:
            return self.grace
        return min(self.interval(at), DEFAULT_GRACE_MAX)

    def jitter_for(self, tick: datetime) -> float:
        """Return the tick's delay in seconds: stable for (name, tick), below ``jitter``."""
        if not self.jitter:
            return 0.0
        digest = hashlib.sha256(f"{self.name}|{tick.isoformat()}".encode()).digest()
        fraction = int.from_bytes(digest[:8], "big") / 2**64
        return round(fraction * self.jitter.total_seconds(), 3)

    def definition(self) -> str:
        """Return a fingerprint of what the entry enqueues and when (to spot two versions)."""
        job = self.job
        text = json.dumps(
            {
                "kind": job.kind,
                "schedule": self.spec,
                "timezone": self.timezone,
                "args": job.to_payload(),
                "options": repr(self.options),
            },
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _interval_tick(step: int, at: datetime, *, following: bool) -> datetime:
    """Return the tick of a ``step`` microseconds interval at or before ``at``, or after it.

    In whole microseconds, as ``timedelta`` counts: float seconds lose the last digits, and
    then a tick could come out at or before the instant it must follow (every 1.1 s, say).
    """
    n = (at.astimezone(UTC) - _EPOCH) // _MICROSECOND // step + (1 if following else 0)
    return _EPOCH + n * step * _MICROSECOND


def _positive(name: str, what: str, value: object, *, minimum: timedelta) -> None:
    if not isinstance(value, timedelta) or value < minimum:
        raise InvalidSchedule(
            f"{name}: {what} must be a datetime.timedelta of at least "
            f"{_seconds_text(minimum)}, got {value!r}"
        )


def _seconds_text(value: timedelta) -> str:
    # every digit, to the microsecond: ``next_tick`` reads the schedule back from this text,
    # and the declaration's fingerprint includes it (``:g`` kept only 6 significant digits)
    text = f"{value.total_seconds():.6f}".rstrip("0").rstrip(".")
    return f"{text}s"


def next_tick(schedule: str, timezone: str, after: datetime) -> datetime | None:
    """Return the first tick after ``after`` of a stored schedule (``Periodic.spec``), in UTC.

    ``None`` when the schedule cannot be read (written by a newer pgqueue, say).
    """
    try:
        zone = ZoneInfo(timezone)
        if schedule.startswith("every ") and schedule.endswith("s"):
            step = round(float(schedule[len("every ") : -1]) * 1_000_000)
            if step <= 0:
                return None
            return _interval_tick(step, after, following=True)
        expression = ALIASES.get(schedule.strip().lower(), schedule.strip())
        for tick in CronSim(expression, after.astimezone(zone)):
            if tick.astimezone(UTC) > after:
                return tick.astimezone(UTC)
    except (ValueError, OverflowError, CronSimError, ZoneInfoNotFoundError, StopIteration):
        return None
    return None


LATE_AFTER = timedelta(seconds=5)
"""A tick enqueued more than this after its time is recorded as ``late`` (or ``backfill``)."""


def plan_ticks(
    entry: Periodic, last: datetime, now: datetime
) -> tuple[list[tuple[datetime, str]], datetime]:
    """Return the ticks of ``entry`` to act on between ``last`` (acted on) and ``now``.

    Each with how to record it, oldest first, and the new ``last``. The missed-tick policy:
    with ``backfill``, every tick of that window (the older ones as ``backfill``); otherwise
    the most recent tick only, when it is at most ``grace`` old (``late`` when it is not on
    time). Ticks before the window are passed over, never enqueued.
    """
    window = entry.backfill if entry.backfill is not None else entry.grace_at(now)
    start = max(last, now - window - timedelta(microseconds=1))
    due = entry.ticks_between(start, now)
    if not due:
        return [], max(last, start)
    newest = due[-1]
    on_time = now - newest <= LATE_AFTER
    if entry.backfill is None:
        return [(newest, "scheduled" if on_time else "late")], newest
    planned = [(tick, "backfill") for tick in due[:-1]]
    planned.append((newest, "scheduled" if on_time else "backfill"))
    return planned, newest


Periodic.__module__ = "pgqueue"
