"""``PgQueueBackend``: a ``django.tasks`` backend that stores each task as a pgqueue job.

```python
TASKS = {"default": {"BACKEND": "pgqueue.contrib.django.backend.PgQueueBackend"}}
```

``enqueue`` inserts the job on Django's own connection of ``PGQUEUE["DATABASE"]``, through
``add_job_with_tx``: inside ``transaction.atomic()`` the job commits or rolls back with the
block (and a nested block's savepoint); outside one, Django's autocommit commits it at once.
``get_result`` reads the job (its status, attempts and errors) and the return value the worker
stored, on the same connection.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from django.apps import apps  # type: ignore[import-untyped]
from django.core import checks  # type: ignore[import-untyped]
from django.core.exceptions import ImproperlyConfigured  # type: ignore[import-untyped]
from django.db import connections  # type: ignore[import-untyped]
from django.utils import timezone  # type: ignore[import-untyped]

import pgqueue

from ...names import validate_queue
from . import _tasks
from .conf import get_config
from .jobs import DjangoTask, builtin_exception_path, load_task

__all__ = ["STATUSES", "PgQueueBackend"]

STATUSES: Mapping[str, str] = {
    "pending": "READY",  # due, scheduled (run_after), or waiting for a retry
    "processing": "RUNNING",
    "completed": "SUCCESSFUL",
    "failed": "FAILED",
    "cancelled": "FAILED",
}
"""pgqueue's job status → the name of the ``TaskResultStatus`` a result reports."""


class PgQueueBackend(_tasks.BaseTaskBackend):  # type: ignore[misc]
    """A ``django.tasks`` backend on pgqueue: jobs in PostgreSQL, run by the pgqueue worker.

    ``manage.py pgqueue worker`` runs them. Supports ``run_after`` (the job's due time),
    priorities (higher runs first, as in pgqueue), async task functions, and ``get_result``
    from any process. ``QUEUES`` in the backend's settings lists the queue names tasks may use
    (Django's rule: default ``["default"]``; an empty list allows any); they must also be valid
    pgqueue queue names.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def validate_task(self, task: Any) -> None:
        """Django's checks, then pgqueue's rule for queue names."""
        super().validate_task(task)
        try:
            validate_queue(task.queue_name)
        except ValueError as exc:
            raise _tasks.InvalidTask(str(exc)) from None

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Insert the task's job in the current transaction of Django's connection.

        Returns a ``TaskResult`` with status ``READY`` whose ``id`` is the job's id (as text).
        Arguments must be JSON values (``TypeError`` otherwise, and nothing is inserted).
        """
        self.validate_task(task)
        args = _tasks.normalize_json(list(args))
        kwargs = _tasks.normalize_json(dict(kwargs))
        config = get_config()
        run_at = task.run_after
        if run_at is not None and timezone.is_naive(run_at):
            run_at = timezone.make_aware(run_at)  # USE_TZ = False: local time
        connection = connections[config.database]
        job = DjangoTask(task=task.module_path, args=args, kwargs=kwargs, backend=self.alias)
        with pgqueue.Client.connect(_native(connection), settings=config.settings) as client:
            handle = client.add_job_with_tx(
                connection,
                job,
                options=config.job_options,
                queue=task.queue_name,
                priority=task.priority,
                run_at=run_at,
            )
        result = _tasks.TaskResult(
            task=task,
            id=str(handle.id),
            status=_tasks.TaskResultStatus.READY,
            enqueued_at=timezone.now(),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        _tasks.task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        """Read the task's job and stored return value; ``TaskResultDoesNotExist`` if none.

        Read on Django's connection, so inside ``atomic()`` a job enqueued in the same block
        is seen. A job deleted by pgqueue's retention (a day after it completed, a week after
        it failed, by default) no longer exists.
        """
        from .models import TaskResultRecord

        try:
            job_id = int(result_id)
        except (TypeError, ValueError):
            raise _tasks.TaskResultDoesNotExist(result_id) from None
        config = get_config()
        connection = connections[config.database]
        with pgqueue.Client.connect(_native(connection), settings=config.settings) as client:
            info = client.get_job(job_id, tx=connection)
        if info is None or info.kind != DjangoTask.kind:
            raise _tasks.TaskResultDoesNotExist(result_id)
        record = TaskResultRecord.objects.using(config.database).filter(job_id=job_id).first()
        return _task_result(info, record, self.alias)

    def check(self, **kwargs: Any) -> Iterator[Any]:
        """Django system checks: the app is installed, ``PGQUEUE`` is valid, PostgreSQL."""
        yield from super().check(**kwargs)
        if not apps.is_installed("pgqueue.contrib.django"):
            yield checks.Error(
                f"the TASKS backend {self.alias!r} needs the app 'pgqueue.contrib.django'",
                hint="add 'pgqueue.contrib.django' to INSTALLED_APPS",
                id="pgqueue.E001",
            )
        try:
            config = get_config()
        except ImproperlyConfigured as exc:
            yield checks.Error(str(exc), id="pgqueue.E002")
            return
        vendor = connections[config.database].vendor
        if vendor != "postgresql":
            yield checks.Error(
                f"PGQUEUE['DATABASE'] is {config.database!r}, a {vendor} database",
                hint="pgqueue needs PostgreSQL (ENGINE 'django.db.backends.postgresql')",
                id="pgqueue.E003",
            )


def _native(connection: Any) -> object:
    # The psycopg connection under Django's: the client's own statements never run on it
    # (every call here passes tx=connection), but a client needs a driver.
    from ...frameworks import native_transaction

    return native_transaction(connection)


def _task_result(info: pgqueue.JobInfo, record: Any, alias: str) -> Any:
    """Build the ``TaskResult`` of a ``django.task`` job from its row and its result row."""
    payload = info.payload
    backend = payload.get("backend") or alias
    task = load_task(payload["task"])
    changes: dict[str, Any] = {}
    if task.queue_name != info.queue:
        changes["queue_name"] = info.queue
    priority = max(-100, min(100, info.priority))
    if task.priority != priority:
        changes["priority"] = priority
    if task.backend != backend:
        changes["backend"] = backend
    if changes:
        # A queue the backend no longer lists, say: report the task as declared.
        with contextlib.suppress(_tasks.InvalidTask):
            task = task.using(**changes)
    status = getattr(_tasks.TaskResultStatus, STATUSES[info.status])
    recorded = {
        entry.get("attempt"): entry.get("exception_class_path")
        for entry in (record.errors if record is not None else [])
    }
    errors = [
        _tasks.TaskError(
            exception_class_path=recorded.get(entry.get("attempt"))
            or builtin_exception_path(entry.get("error")),
            traceback=entry.get("traceback") or entry.get("error") or "",
        )
        for entry in info.errors
    ]
    instances = {a.number: str(a.instance_id or "") for a in info.attempt_history}
    history = [a for a in info.attempt_history if a.started_at is not None]
    result = _tasks.TaskResult(
        task=task,
        id=str(info.id),
        status=status,
        enqueued_at=info.created_at,
        started_at=history[0].started_at if history else None,
        finished_at=info.finished_at
        if info.status in ("completed", "failed", "cancelled")
        else None,
        last_attempted_at=info.claimed_at or (history[-1].started_at if history else None),
        args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}),
        backend=backend,
        errors=errors,
        worker_ids=[instances.get(n, "") for n in range(1, info.attempts + 1)],
    )
    if info.status == "completed" and record is not None:
        object.__setattr__(result, "_return_value", record.return_value)
    return result
