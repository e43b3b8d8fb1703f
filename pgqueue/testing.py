"""Helpers for testing code that enqueues and runs pgqueue jobs, on the real database.

- :func:`perform_job` runs one job through a worker's execution path (its timeout,
  ``Retry``/``Cancel``/``Discard``, error capture) without a database, and returns a
  :class:`JobResult`; :func:`aperform_job` is the same for async tests.
- :func:`drain` runs a client's due jobs in this process, recording each outcome as a worker
  does; :func:`enqueued_jobs`, :func:`assert_enqueued` and :func:`refute_enqueued` look at
  what is pending.
- :class:`QueueTester` (a ``Client``) and :class:`AsyncQueueTester` (an ``AsyncClient``) hold
  all of that for one client, and add the ``inline`` mode, where each enqueue runs its jobs
  at once.

The pytest plugin ``pgqueue.pytest_plugin`` (loaded by pytest when pgqueue is installed)
provides fixtures built on these. docs/testing.md shows them at work.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from ._async.testing import AsyncQueueTester
from ._async.testing import perform_job as aperform_job
from ._sync.testing import (
    DRAIN_MAX_RUNS,
    KindSpec,
    Mode,
    QueueTester,
    assert_enqueued,
    drain,
    enqueued_jobs,
    refute_enqueued,
)
from ._sync.testing import perform_job as _perform_job
from .execution import ProcessTimeout
from .jobs import Worker, WorkerRegistry
from .records import JobResult, ResultOutcome
from .runtime_config import RuntimeConfig

__all__ = [
    "DRAIN_MAX_RUNS",
    "AsyncQueueTester",
    "JobResult",
    "KindSpec",
    "Mode",
    "ProcessTimeout",
    "QueueTester",
    "ResultOutcome",
    "aperform_job",
    "assert_enqueued",
    "drain",
    "enqueued_jobs",
    "perform_job",
    "refute_enqueued",
]


def perform_job(
    job_or_class: Worker | type[Worker],
    args: Mapping[str, Any] | None = None,
    *,
    attempt: int = 1,
    max_attempts: int | None = None,
    timeout: float | timedelta | None = None,
    registry: WorkerRegistry | None = None,
    config: RuntimeConfig | None = None,
) -> JobResult:
    """Run one job through a worker's execution path, without a database; return its result.

    ``job_or_class``: a job (``SendEmail(to=...)``), or a job class with its ``args`` as a
    dict. The job is encoded as ``add_job`` would encode it (arguments that cannot be stored
    raise ``JobSerializationError`` here too; with ``registry``, a kind it lacks raises
    ``UnknownJobKind``), rebuilt from that JSON and run as attempt ``attempt`` of
    ``max_attempts`` (default: the job's options, else 25) with the job's timeout (or
    ``timeout``, in seconds or as a ``timedelta``). The context's ``id`` is 0.

    A sync ``process`` runs in this thread, an ``async`` one in an event loop of its own (as a
    sync worker runs it). Called where an event loop is running (an async test), the whole run
    moves to a helper thread, so that an ``async`` job still gets its loop; there,
    ``await aperform_job(...)`` runs an ``async`` job on the test's own loop instead.
    """
    kwargs: dict[str, Any] = {
        "attempt": attempt,
        "max_attempts": max_attempts,
        "timeout": timeout,
        "registry": registry,
        "config": config,
    }
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop here: the common case
        return _perform_job(job_or_class, args, **kwargs)
    with concurrent.futures.ThreadPoolExecutor(1, "pgqueue-perform-job") as helper:
        return helper.submit(_perform_job, job_or_class, args, **kwargs).result()
