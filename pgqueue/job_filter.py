"""Which jobs an admin call means: :class:`JobFilter`, sort orders, cursors and action rules.

Pure and shared by both clients. Everything a user passes is checked here, before any SQL runs,
so bad input raises :class:`~pgqueue.InvalidFilter` (or :class:`~pgqueue.InvalidName` for a
queue or kind that breaks the naming rules) and changes nothing. The values then travel as bound
parameters of the ``job_filter`` fragment of ``sql/admin.sql``; none is ever part of the SQL.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypedDict, get_args

from .errors import InvalidFilter
from .names import validate_kind, validate_queue

__all__ = [
    "ACTION_STATUSES",
    "DEFAULT_ACTION_STATUSES",
    "MAX_BATCH_SIZE",
    "MAX_LIMIT",
    "STATUSES",
    "JobFilter",
    "JobFilterKwargs",
    "Sort",
    "action_statuses",
    "check_batch_size",
    "check_limit",
    "check_sort",
    "cursor_decode",
    "cursor_encode",
    "queue_names",
]

STATUSES = ("pending", "processing", "completed", "failed", "cancelled")
"""Every status a job can have."""

Sort = Literal["-id", "id", "due", "-due"]
"""The orders of ``list_jobs``: newest first (``"-id"``, the default), oldest first (``"id"``),
soonest due first (``"due"``), latest due first (``"-due"``)."""

SORTS: tuple[str, ...] = get_args(Sort)

MAX_LIMIT = 1000
"""The largest page ``list_jobs`` returns."""

MAX_BATCH_SIZE = 10_000
"""The largest batch a bulk action changes in one transaction."""

ACTION_STATUSES: dict[str, frozenset[str]] = {
    "retry": frozenset({"failed", "cancelled", "completed", "pending"}),
    "cancel": frozenset({"pending", "processing"}),
    "delete": frozenset({"pending", "completed", "failed", "cancelled"}),
}
"""The statuses each bulk action applies to (a running job is never retried or deleted)."""

DEFAULT_ACTION_STATUSES: dict[str, tuple[str, ...]] = {
    "retry": ("failed", "cancelled"),
    "cancel": ("pending", "processing"),
    "delete": ("pending", "completed", "failed", "cancelled"),
}
"""What a bulk action acts on when its filter names no status: a retry by filter re-runs failed
and cancelled jobs, never completed ones unless ``status="completed"`` says so."""


class JobFilterKwargs(TypedDict, total=False):
    """The filter keywords of ``list_jobs`` and the bulk actions (see :class:`JobFilter`)."""

    status: str | Iterable[str] | None
    queue: str | Iterable[str] | None
    kind: str | Iterable[str] | None
    args: Mapping[str, Any] | None
    created_after: datetime | timedelta | None
    created_before: datetime | timedelta | None
    scheduled_after: datetime | timedelta | None
    scheduled_before: datetime | timedelta | None
    finished_after: datetime | timedelta | None
    finished_before: datetime | timedelta | None


@dataclass(frozen=True)
class JobFilter:
    """Which jobs a listing or a bulk action covers; every field ``None`` means "any".

    - ``status``/``queue``/``kind``: one name or several (a job matches any of them).
    - ``args``: a JSON object the job's arguments contain (PostgreSQL's ``@>``):
      ``{"user_id": 42}`` matches every job whose arguments have ``user_id`` 42, whatever else
      they hold.
    - ``created_*``, ``scheduled_*`` (the due time), ``finished_*``: ``_after`` is inclusive,
      ``_before`` exclusive. A ``datetime`` (with a time zone; a naive one is read as UTC) or a
      ``timedelta``, meaning that long before now.
    - ``ids``: these job ids only.
    """

    status: tuple[str, ...] | None = None
    queue: tuple[str, ...] | None = None
    kind: tuple[str, ...] | None = None
    args: dict[str, Any] | None = None
    ids: tuple[int, ...] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    scheduled_after: datetime | None = None
    scheduled_before: datetime | None = None
    finished_after: datetime | None = None
    finished_before: datetime | None = None

    @classmethod
    def build(cls, ids: Iterable[int] | None = None, **kwargs: Any) -> JobFilter:
        """Check and normalise the keywords of :class:`JobFilterKwargs` (and ``ids``)."""
        known = {f.name for f in fields(cls)} - {"ids"}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise InvalidFilter(
                f"unknown filter {', '.join(unknown)}: filter by {', '.join(sorted(known))}"
            )
        now = datetime.now(UTC)
        values: dict[str, Any] = {
            "status": _names(kwargs.get("status"), "status", _check_status),
            "queue": _names(kwargs.get("queue"), "queue", validate_queue),
            "kind": _names(kwargs.get("kind"), "kind", validate_kind),
            "args": _args(kwargs.get("args")),
            "ids": _ids(ids),
        }
        for name in known - {"status", "queue", "kind", "args"}:
            values[name] = _moment(kwargs.get(name), name, now)
        return cls(**values)

    @property
    def empty(self) -> bool:
        """Whether the filter matches every job."""
        return all(getattr(self, f.name) is None for f in fields(self))

    def params(self) -> tuple[Any, ...]:
        """Return the ``job_filter`` fragment's parameters, $1-$11."""
        return (
            _list(self.status),
            _list(self.queue),
            _list(self.kind),
            None if self.args is None else json.dumps(self.args, allow_nan=False),
            _list(self.ids),
            self.created_after,
            self.created_before,
            self.scheduled_after,
            self.scheduled_before,
            self.finished_after,
            self.finished_before,
        )

    def describe(self) -> dict[str, Any]:
        """Return the fields that are set, for an event or a log line."""
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None
        }


JobFilter.__module__ = "pgqueue"


def action_statuses(action: str, job_filter: JobFilter) -> list[str]:
    """Return the statuses a bulk ``action`` acts on under ``job_filter``.

    A status the action cannot apply to (``retry`` of ``processing`` jobs) is an error, so that
    a filter never silently means less than it says.
    """
    applicable = ACTION_STATUSES[action]
    if job_filter.status is None:
        return list(DEFAULT_ACTION_STATUSES[action])
    refused = [s for s in job_filter.status if s not in applicable]
    if refused:
        raise InvalidFilter(
            f"{action} does not apply to {' or '.join(refused)} jobs: it applies to "
            f"{', '.join(s for s in STATUSES if s in applicable)}"
            + (" (stop or cancel a running job first)" if "processing" in refused else "")
        )
    return list(job_filter.status)


def queue_names(queue: object) -> list[str] | None:
    """Check a queue name or a list of them (``None``: every queue), as the filter does."""
    names = _names(queue, "queue", validate_queue)
    return None if names is None else list(names)


def check_limit(limit: object) -> int:
    """Return a valid page size (1 to :data:`MAX_LIMIT`)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidFilter(f"limit must be a whole number from 1 to {MAX_LIMIT}, got {limit!r}")
    return limit


def check_batch_size(size: object) -> int:
    """Return a valid bulk batch size (1 to :data:`MAX_BATCH_SIZE`)."""
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_BATCH_SIZE:
        raise InvalidFilter(
            f"batch_size must be a whole number from 1 to {MAX_BATCH_SIZE}, got {size!r}"
        )
    return size


def check_sort(sort: object) -> str:
    """Return a valid sort order (see :data:`Sort`)."""
    if sort not in SORTS:
        raise InvalidFilter(f"unknown sort {sort!r}: use one of {', '.join(SORTS)}")
    assert isinstance(sort, str)
    return sort


def cursor_encode(sort: str, last_id: int, last_due: datetime) -> str:
    """Return the opaque cursor of the page after a row (``last_id``, due ``last_due``)."""
    raw = json.dumps([sort, last_id, last_due.isoformat()]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def cursor_decode(cursor: str, sort: str) -> tuple[int, datetime | None]:
    """Read a cursor made by :func:`cursor_encode` for ``sort``: the last id (and due time)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        made_for, last_id, last_due = json.loads(raw)
        due = datetime.fromisoformat(last_due)
        if not isinstance(last_id, int) or isinstance(last_id, bool) or made_for not in SORTS:
            raise ValueError
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise InvalidFilter(
            "this cursor is not one list_jobs returned: pass the next_cursor of the previous "
            "page, or no cursor for the first page"
        ) from None
    if made_for != sort:
        raise InvalidFilter(
            f"this cursor belongs to a listing sorted by {made_for!r}, not {sort!r}: list "
            "again from the first page"
        )
    return last_id, due if sort in ("due", "-due") else None


# -- checks -------------------------------------------------------------------------------------


def _check_status(value: object) -> str:
    if value not in STATUSES:
        raise InvalidFilter(f"unknown status {value!r}: use one of {', '.join(STATUSES)}")
    assert isinstance(value, str)
    return value


def _names(value: object, what: str, check: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, Iterable) or isinstance(items, bytes | Mapping):
        raise InvalidFilter(f"{what} must be a name or a list of names, got {value!r}")
    checked = tuple(dict.fromkeys(check(item) for item in items))
    if not checked:
        raise InvalidFilter(f"{what} is an empty list: pass None to match any {what}")
    return checked


def _args(value: object) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidFilter(
            f'args must be a JSON object such as {{"user_id": 42}}, got {type(value).__name__}'
        )
    try:
        # The round trip checks that it is JSON PostgreSQL can store (no NaN, no \u0000).
        text = json.dumps(dict(value), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidFilter(f"args is not valid JSON: {exc}") from None
    if "\\u0000" in text:
        raise InvalidFilter(
            "args contains a NUL character (\\u0000), which PostgreSQL cannot store"
        )
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _ids(value: Iterable[int] | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidFilter(f"ids must be a list of job ids, got {value!r}")
    out = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or not 0 < item < 2**63:
            raise InvalidFilter(f"job ids are positive whole numbers, got {item!r}")
        out.append(item)
    return tuple(dict.fromkeys(out))


def _moment(value: object, what: str, now: datetime) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        try:
            return now - value
        except OverflowError:
            raise InvalidFilter(
                f"{what} is {value!r} before now, which is before the year 1: use a shorter "
                "time (or a datetime)"
            ) from None
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        raise InvalidFilter(
            f"{what} takes a datetime or a timedelta (that long ago), not a number: "
            f"timedelta(seconds={value!r})?"
        )
    raise InvalidFilter(f"{what} must be a datetime or a timedelta, got {value!r}")


def _list(value: tuple[Any, ...] | None) -> list[Any] | None:
    return None if value is None else list(value)
