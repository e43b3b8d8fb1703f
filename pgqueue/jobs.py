"""Defining jobs: the ``Worker`` base class, ``JobContext`` and ``WorkerRegistry``."""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Awaitable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, cast

from .errors import DuplicateKind, JobSerializationError, UnknownJobKind
from .names import validate_kind
from .options import JobOptions

if TYPE_CHECKING:  # periodic.py imports this module
    from .periodic import Periodic

__all__ = ["CancelSignal", "JobContext", "JobHandle", "Worker", "WorkerRegistry"]

W = TypeVar("W", bound="type[Worker]")

_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def snake_case(name: str) -> str:
    """Convert a class name to snake_case: ``SendHTTPEmail`` -> ``send_http_email``."""
    return _CAMEL_BOUNDARY.sub("_", name).lower()


class CancelSignal(Protocol):
    """The flag a running job polls to learn it should stop (``threading.Event``-like)."""

    def is_set(self) -> bool:
        """Return True once cancellation (shutdown, timeout or ``cancel``) was requested."""
        ...


class Worker:
    """Base class of a job type. Its fields are the job's arguments.

    Subclass it as a ``@dataclass`` (pydantic models and msgspec Structs also work) and
    implement ``process``, sync or ``async``::

        @dataclass
        class SendEmail(pgqueue.Worker):
            kind = "send_email"  # optional; defaults to the class name in snake_case
            to: str
            subject: str

            def process(self, ctx: pgqueue.JobContext) -> None: ...

    On a pydantic model, annotate both class settings as ``ClassVar`` (``kind: ClassVar[str] =
    "send_email"``): pydantic refuses plain class attributes.

    ``job_options`` may hold per-type defaults (queue, priority, max_attempts, timeout...) that
    ``add_job`` arguments override. Each claimed job gets a fresh instance built from its
    stored arguments; instances are never shared between jobs or threads.
    """

    kind: ClassVar[str]
    job_options: ClassVar[JobOptions | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" not in cls.__dict__:
            cls.kind = snake_case(cls.__name__)
        validate_kind(cls.kind)

    def process(self, ctx: JobContext) -> Awaitable[None] | None:
        """Do the job. Return normally for success; raise to fail (and be retried)."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement process(self, ctx)")

    def to_payload(self) -> dict[str, Any]:
        """Return the job's arguments as a JSON-ready dict."""
        names = _init_fields(type(self))
        if names is not None:
            return {name: getattr(self, name) for name in names}
        dump = getattr(self, "model_dump", None)
        if callable(dump):  # pydantic v2
            result: dict[str, Any] = dump(mode="json")
            return result
        if hasattr(type(self), "__struct_fields__"):  # msgspec.Struct
            import msgspec

            builtins: dict[str, Any] = msgspec.to_builtins(self)
            return builtins
        raise JobSerializationError(
            f"cannot read the arguments of {type(self).__qualname__}: declare it as a @dataclass "
            "(or a pydantic model / msgspec Struct) so its fields are the job's arguments"
        )

    @classmethod
    def from_payload(cls: type[Any], payload: Mapping[str, Any]) -> Any:
        """Build a fresh instance from stored arguments."""
        validate = getattr(cls, "model_validate", None)
        if callable(validate):
            return validate(payload)
        if hasattr(cls, "__struct_fields__"):
            import msgspec

            return msgspec.convert(payload, cls)
        return cls(**payload)


_INIT_FIELDS: dict[type[Any], tuple[str, ...] | None] = {}


def _init_fields(cls: type[Any]) -> tuple[str, ...] | None:
    """Return the init fields of a dataclass job class (None for other classes), cached."""
    # dataclasses.fields() rebuilds its answer on every call; a job class's fields are fixed.
    try:
        return _INIT_FIELDS[cls]
    except KeyError:
        pass
    names = None
    if dataclasses.is_dataclass(cls) and not hasattr(cls, "model_dump"):
        names = tuple(f.name for f in dataclasses.fields(cls) if f.init)
    _INIT_FIELDS[cls] = names
    return names


@dataclass(frozen=True)
class JobContext:
    """What a running job knows about itself, passed to ``Worker.process``.

    ``id`` is the job's row id (the ``id`` of its :class:`JobHandle` and ``JobInfo``): unique
    for the job's whole life, the idempotency key to give the services you call. ``job_id`` is
    the caller-chosen id it was enqueued with (``add_job(job_id=...)``), or ``None``: the same
    name, and meaning, as ``JobHandle.job_id`` and ``JobInfo.job_id``. A job enqueued by a
    periodic entry has the entry's name in ``periodic`` and its tick (UTC) in ``tick``: a job
    can be idempotent per tick; both are ``None`` for other jobs.
    """

    id: int
    job_id: str | None
    kind: str
    queue: str
    attempt: int
    max_attempts: int
    scheduled_for: datetime
    cancelled: CancelSignal
    logger: logging.LoggerAdapter[logging.Logger]
    periodic: str | None = None
    tick: datetime | None = None

    @property
    def is_last_attempt(self) -> bool:
        """True when a failure of this attempt will mark the job failed for good."""
        return self.attempt >= self.max_attempts


@dataclass(frozen=True)
class JobHandle:
    """What ``add_job`` returns: the job's id and where and when it will run.

    ``inserted`` is False when the enqueue was a duplicate (``on_conflict="ignore"``, or an
    item of ``add_jobs``): the handle then describes the job that already exists, and
    ``conflict`` says why: ``"job_id"`` or ``"unique"``.
    """

    id: int
    kind: str
    queue: str
    scheduled_for: datetime
    job_id: str | None = None
    inserted: bool = True
    conflict: str | None = None

    @classmethod
    def unchecked(
        cls, id: int, kind: str, queue: str, scheduled_for: datetime, job_id: str | None
    ) -> JobHandle:
        """Build the handle of an inserted job without the frozen dataclass's per-field setattr.

        Bulk enqueues build one handle per job; this is about three times cheaper.
        """
        handle = object.__new__(cls)
        handle.__dict__.update(
            id=id,
            kind=kind,
            queue=queue,
            scheduled_for=scheduled_for,
            job_id=job_id,
            inserted=True,
            conflict=None,
        )
        return handle


class WorkerRegistry:
    """The job types a client may enqueue and a worker may run, by kind."""

    def __init__(self, *workers: type[Worker] | Worker) -> None:
        self._by_kind: dict[str, type[Worker]] = {}
        self._periodic: dict[str, Periodic] = {}
        for worker in workers:
            self.register(worker)

    def schedule(self, entry: Periodic) -> Periodic:
        """Add a periodic entry, and register its job's class.

        Workers with this registry enqueue the entry's jobs on its ticks. Raises
        :class:`~pgqueue.InvalidSchedule` for a name used twice.
        """
        from .periodic import InvalidSchedule, Periodic  # periodic.py imports this module

        if not isinstance(entry, Periodic):
            raise InvalidSchedule(f"schedule() takes a pgqueue.Periodic, got {entry!r}")
        if entry.name in self._periodic:
            raise InvalidSchedule(
                f"a periodic entry named {entry.name!r} is already scheduled: names are unique"
            )
        if entry.options is not None and (
            entry.options.job_id is not None
            or entry.options.unique is not None
            or entry.options.run_at is not None
            or entry.options.run_in is not None
        ):
            raise InvalidSchedule(
                f"{entry.name}: job_id and unique are not for periodic jobs (the tick ledger "
                "already makes one job per tick), nor run_at and run_in (the job is due at "
                "its tick, plus jitter)"
            )
        self.register(entry.job)
        self._periodic[entry.name] = entry
        return entry

    @property
    def periodic(self) -> list[Periodic]:
        """The periodic entries added with :meth:`schedule`, in that order."""
        return list(self._periodic.values())

    def register(self, worker: W | Worker) -> W:
        """Register a job class (or an instance, meaning its class); usable as a decorator.

        Raises :class:`DuplicateKind` if another class already uses the same kind.
        """
        cls: Any = worker if isinstance(worker, type) else type(worker)
        if not (isinstance(cls, type) and issubclass(cls, Worker)):
            raise TypeError(f"{cls!r} is not a pgqueue.Worker subclass")
        if not (
            dataclasses.is_dataclass(cls)
            or callable(getattr(cls, "model_validate", None))
            or hasattr(cls, "__struct_fields__")
        ):
            raise TypeError(
                f"{cls.__qualname__} must be a @dataclass (or a pydantic model / msgspec Struct) "
                "so that its fields can be stored as the job's arguments"
            )
        kind = validate_kind(cls.kind)
        existing = self._by_kind.get(kind)
        if existing is not None and existing is not cls:
            raise DuplicateKind(
                f"kind {kind!r} is already registered by {existing.__module__}."
                f"{existing.__qualname__}: give {cls.__qualname__} another kind = '...'"
            )
        self._by_kind[kind] = cls
        return cast(W, cls)

    def get(self, kind: str) -> type[Worker]:
        """Return the class registered for ``kind``, or raise :class:`UnknownJobKind`."""
        try:
            return self._by_kind[kind]
        except KeyError:
            known = ", ".join(sorted(self._by_kind)) or "none"
            raise UnknownJobKind(
                f"no job class is registered for kind {kind!r}: register it with "
                f"registry.register(...) (known kinds: {known})"
            ) from None

    def build(self, kind: str, payload: Mapping[str, Any]) -> Worker:
        """Return a fresh instance of ``kind``'s class built from ``payload``."""
        instance: Worker = self.get(kind).from_payload(payload)
        return instance

    def kinds(self) -> list[str]:
        """Return the registered kinds, sorted."""
        return sorted(self._by_kind)

    def __contains__(self, kind: object) -> bool:
        return kind in self._by_kind

    def __iter__(self) -> Iterator[type[Worker]]:
        return iter(self._by_kind.values())

    def __len__(self) -> int:
        return len(self._by_kind)
