"""pgqueue: a PostgreSQL-backed background job queue for sync and asyncio Python.

Define job types by subclassing :class:`Worker`, enqueue and run them with :class:`Client`
(sync, threads) or :class:`AsyncClient` (asyncio), on psycopg 3, SQLAlchemy 2 or asyncpg
(asyncio only).
"""

from ._async.client import AsyncClient
from ._async.driver import AsyncAdvisoryLock, AsyncDriver, AsyncListener, AsyncSupportsCopy
from ._sync.client import Client
from ._sync.driver import AdvisoryLock, Driver, Listener, SupportsCopy
from .driver import Notification
from .errors import (
    ConfigurationError,
    ConnectionLost,
    DatabaseError,
    DriverNotInstalled,
    DuplicateJob,
    DuplicateJobError,
    DuplicateKind,
    InvalidFilter,
    InvalidJobOptions,
    InvalidName,
    InvalidQueueName,
    JobActionRefused,
    JobIdConflict,
    JobNotFound,
    JobSerializationError,
    MigrationError,
    PayloadTooLarge,
    PgQueueError,
    SchemaNotMigrated,
    UnknownJobKind,
)
from .job_filter import JobFilter
from .jobs import CancelSignal, JobContext, JobHandle, Worker, WorkerRegistry
from .options import JobOptions
from .outcomes import Cancel, Discard, JobOutcome, Retry
from .periodic import InvalidSchedule, Periodic
from .queries import migrations_script, migrations_statements
from .records import (
    Attempt,
    BulkResult,
    JobInfo,
    JobPage,
    PeriodicInfo,
    QueueStats,
    RunningJob,
    StatusCounts,
    TickInfo,
    WorkerInfo,
)
from .runtime_config import RuntimeConfig
from .settings import Settings

__version__ = "0.1.0.dev0"

__all__ = [
    "AdvisoryLock",
    "AsyncAdvisoryLock",
    "AsyncClient",
    "AsyncDriver",
    "AsyncListener",
    "AsyncSupportsCopy",
    "Attempt",
    "BulkResult",
    "Cancel",
    "CancelSignal",
    "Client",
    "ConfigurationError",
    "ConnectionLost",
    "DatabaseError",
    "Discard",
    "Driver",
    "DriverNotInstalled",
    "DuplicateJob",
    "DuplicateJobError",
    "DuplicateKind",
    "InvalidFilter",
    "InvalidJobOptions",
    "InvalidName",
    "InvalidQueueName",
    "InvalidSchedule",
    "JobActionRefused",
    "JobContext",
    "JobFilter",
    "JobHandle",
    "JobIdConflict",
    "JobInfo",
    "JobNotFound",
    "JobOptions",
    "JobOutcome",
    "JobPage",
    "JobSerializationError",
    "Listener",
    "MigrationError",
    "Notification",
    "PayloadTooLarge",
    "Periodic",
    "PeriodicInfo",
    "PgQueueError",
    "QueueStats",
    "Retry",
    "RunningJob",
    "RuntimeConfig",
    "SchemaNotMigrated",
    "Settings",
    "StatusCounts",
    "SupportsCopy",
    "TickInfo",
    "UnknownJobKind",
    "Worker",
    "WorkerInfo",
    "WorkerRegistry",
    "migrations_script",
    "migrations_statements",
]
