"""The exceptions pgqueue raises.

Everything derives from :class:`PgQueueError`, so ``except pgqueue.PgQueueError`` catches all of
them. Messages say what went wrong *and* what to do about it.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ConfigurationError",
    "ConnectionLost",
    "DatabaseError",
    "DriverNotInstalled",
    "DuplicateJob",
    "DuplicateJobError",
    "DuplicateKind",
    "InvalidFilter",
    "InvalidJobOptions",
    "InvalidName",
    "InvalidQueueName",
    "JobActionRefused",
    "JobIdConflict",
    "JobNotFound",
    "JobSerializationError",
    "MigrationError",
    "PayloadTooLarge",
    "PgQueueError",
    "SchemaNotMigrated",
    "UnknownJobKind",
]


class PgQueueError(Exception):
    """Base class of every error raised by pgqueue."""


class ConfigurationError(PgQueueError):
    """A setting or a combination of settings cannot work."""


class DriverNotInstalled(ConfigurationError):
    """The database library behind the requested driver is not installed."""


class InvalidName(ConfigurationError, ValueError):
    """A schema, table prefix, queue name or job kind does not follow the naming rules."""


class DuplicateKind(ConfigurationError):
    """Two job classes were registered under the same kind."""


class UnknownJobKind(PgQueueError, LookupError):
    """A job's kind is not in the registry of the client or worker that handles it."""


class InvalidJobOptions(PgQueueError, ValueError):
    """Enqueue options are out of range or contradict each other."""


class InvalidQueueName(InvalidJobOptions, InvalidName):
    """A job's ``queue`` option breaks the naming rules.

    A bad option like any other (:class:`InvalidJobOptions`), and a bad name
    (:class:`InvalidName`), so code that catches either catches it.
    """


class JobSerializationError(PgQueueError, ValueError):
    """A job's arguments cannot be stored as PostgreSQL JSON."""


class PayloadTooLarge(JobSerializationError):
    """A job's serialized arguments exceed the configured size limit."""


class DatabaseError(PgQueueError):
    """An error reported by PostgreSQL or by the driver, in a driver-independent form.

    ``sqlstate`` is PostgreSQL's five-character error code when the server sent one (for example
    ``"23505"`` for a unique violation) and ``constraint_name`` the constraint involved, when
    there is one; the driver's own exception is chained as ``__cause__``.
    """

    def __init__(
        self, message: str, sqlstate: str | None = None, constraint_name: str | None = None
    ) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.constraint_name = constraint_name


class ConnectionLost(DatabaseError):
    """The database session went away (server restart, terminated backend, network cut)."""


class SchemaNotMigrated(DatabaseError):
    """pgqueue's tables are missing: ``migrate()`` has not been run on this schema."""


class MigrationError(DatabaseError):
    """A migration could not be applied."""


class DuplicateJobError(PgQueueError):
    """Base of the errors raised when an enqueue is refused because the job already exists.

    ``existing`` is the handle of the job that caused the refusal, when it could be read (it
    may finish and be removed at any moment).
    """

    def __init__(self, message: str, existing: Any = None) -> None:
        super().__init__(message)
        self.existing = existing


class JobIdConflict(DuplicateJobError):
    """A job with the same caller-chosen ``job_id`` still exists."""


class DuplicateJob(DuplicateJobError):
    """An identical job (same queue, kind and arguments) holds its ``unique`` lock."""


class InvalidFilter(PgQueueError, ValueError):
    """An admin call's filter, sort, limit or cursor is not one pgqueue can use."""


class JobNotFound(PgQueueError, LookupError):
    """No job has the given id (it never existed, or retention or an operator deleted it)."""


class JobActionRefused(PgQueueError):
    """An admin action does not apply to the job as it is now (a running job cannot be retried).

    ``job_id`` names the job, ``status`` the status it had, ``reason`` why it was left alone.
    """

    def __init__(self, message: str, *, job_id: int, status: str, reason: str) -> None:
        super().__init__(message)
        self.job_id = job_id
        self.status = status
        self.reason = reason
