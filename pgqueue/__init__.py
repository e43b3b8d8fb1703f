"""pgqueue: a PostgreSQL-backed background job queue for sync and asyncio Python.

Define job types by subclassing :class:`Worker`, enqueue them with :class:`Client` (sync) or
:class:`AsyncClient` (asyncio), on psycopg 3 (and, in later releases, SQLAlchemy 2 or asyncpg).
"""

from ._async.client import AsyncClient
from ._async.driver import AsyncAdvisoryLock, AsyncDriver, AsyncListener, AsyncSupportsCopy
from ._sync.client import Client
from ._sync.driver import AdvisoryLock, Driver, Listener, SupportsCopy
from .drivers import Notification
from .errors import (
    ConfigurationError,
    ConnectionLost,
    DatabaseError,
    DriverNotInstalled,
    DuplicateJob,
    DuplicateJobError,
    DuplicateKind,
    InvalidJobOptions,
    InvalidName,
    JobIdConflict,
    JobSerializationError,
    MigrationError,
    PayloadTooLarge,
    PgQueueError,
    SchemaNotMigrated,
    UnknownJobKind,
)
from .jobs import CancelSignal, JobContext, JobHandle, Worker, WorkerRegistry
from .options import JobOptions
from .queries import migrations_script
from .settings import Settings

__version__ = "0.1.0.dev0"

__all__ = [
    "AdvisoryLock",
    "AsyncAdvisoryLock",
    "AsyncClient",
    "AsyncDriver",
    "AsyncListener",
    "AsyncSupportsCopy",
    "CancelSignal",
    "Client",
    "ConfigurationError",
    "ConnectionLost",
    "DatabaseError",
    "Driver",
    "DriverNotInstalled",
    "DuplicateJob",
    "DuplicateJobError",
    "DuplicateKind",
    "InvalidJobOptions",
    "InvalidName",
    "JobContext",
    "JobHandle",
    "JobIdConflict",
    "JobOptions",
    "JobSerializationError",
    "Listener",
    "MigrationError",
    "Notification",
    "PayloadTooLarge",
    "PgQueueError",
    "SchemaNotMigrated",
    "Settings",
    "SupportsCopy",
    "UnknownJobKind",
    "Worker",
    "WorkerRegistry",
    "migrations_script",
]
