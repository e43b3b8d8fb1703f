"""The pgqueue jobs behind Django tasks: ``django.task`` runs one, and results are pruned.

A task's job stores the task's module path (``myapp.tasks.send_welcome``), its arguments and
the alias of its ``TASKS`` backend; the worker imports the task, calls it (a coroutine
function through asgiref's ``async_to_sync``, as ``Task.call`` does), stores its return value
in the app's result table, and then returns, so that pgqueue marks the job completed. An
exception fails the attempt as in any pgqueue job: retried with backoff up to
``max_attempts``. ``pgqueue.Retry``, ``Cancel`` and ``Discard`` raised by a task steer its job
as they do in a ``Worker``.
"""

from __future__ import annotations

import builtins
import logging
import os
import socket
from dataclasses import dataclass, field
from typing import Any

from django.db import close_old_connections, connections  # type: ignore[import-untyped]
from django.utils import timezone  # type: ignore[import-untyped]
from django.utils.module_loading import import_string  # type: ignore[import-untyped]

import pgqueue

from . import _tasks
from .conf import get_config

__all__ = [
    "RESULT_ERRORS_KEPT",
    "DjangoTask",
    "PruneResults",
    "exception_class_path",
    "load_task",
]

RESULT_ERRORS_KEPT = 10
"""How many failed attempts' exception classes a result row keeps (as pgqueue's history)."""

logger = logging.getLogger("pgqueue.django")

# How this process appears in a running task's TaskContext (worker_ids); get_result reports
# the pgqueue instance id of each attempt instead, which the job does not know.
_WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"


def exception_class_path(exc_type: type[BaseException]) -> str:
    """``module.QualName`` of an exception class, as ``TaskError.exception_class_path``."""
    return f"{exc_type.__module__}.{exc_type.__qualname__}"


def load_task(path: str) -> Any:
    """Import the ``Task`` at ``path`` (``module.function``, a task's ``module_path``).

    Raises ``ImportError`` when it cannot be imported (a worker older than the code that
    enqueued it: the attempt fails and is retried), ``TypeError`` when it is not a task.
    """
    found = import_string(path)
    if not isinstance(found, _tasks.Task):
        raise TypeError(f"{path} is a {type(found).__name__}, not a task (decorate it with @task)")
    return found


@dataclass
class DjangoTask(pgqueue.Worker):
    """Run one Django task: ``task`` is its module path, with ``args``, ``kwargs``, ``backend``.

    Enqueued by :class:`~pgqueue.contrib.django.backend.PgQueueBackend` and by the periodic
    entries of ``PGQUEUE["PERIODIC"]``; run by ``manage.py pgqueue worker``.
    """

    kind = "django.task"

    task: str
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    backend: str = "default"

    def process(self, ctx: pgqueue.JobContext) -> None:
        """Call the task, store its return value, and return (the job is then completed)."""
        # As Django does around a request: drop connections that are broken or too old.
        close_old_connections()
        try:
            self._run(ctx)
        finally:
            close_old_connections()

    def _run(self, ctx: pgqueue.JobContext) -> None:
        task = load_task(self.task)
        if task.backend != self.backend:
            task = task.using(backend=self.backend)
        now = timezone.now()
        result = _tasks.TaskResult(
            task=task,
            id=str(ctx.id),
            status=_tasks.TaskResultStatus.RUNNING,
            enqueued_at=None,
            started_at=now,
            finished_at=None,
            last_attempted_at=now,
            args=self.args,
            kwargs=self.kwargs,
            backend=self.backend,
            errors=[],
            # TaskContext.attempt is len(worker_ids): one entry per attempt, this one last
            worker_ids=[""] * (ctx.attempt - 1) + [_WORKER_ID],
        )
        sender = type(task.get_backend())
        _tasks.task_started.send(sender=sender, task_result=result)
        try:
            if task.takes_context:
                value = task.call(_tasks.TaskContext(task_result=result), *self.args, **self.kwargs)
            else:
                value = task.call(*self.args, **self.kwargs)
        except pgqueue.JobOutcome:
            raise  # Retry, Cancel, Discard: pgqueue's to handle
        except Exception as exc:
            _store_error(ctx, exc)
            if ctx.is_last_attempt:
                object.__setattr__(result, "status", _tasks.TaskResultStatus.FAILED)
                object.__setattr__(result, "finished_at", timezone.now())
                _tasks.task_finished.send(sender=sender, task_result=result)
            raise
        try:
            value = _tasks.normalize_json(value)
        except (TypeError, ValueError) as exc:
            # Running it again would return the same: fail the job for good.
            raise pgqueue.Discard(
                f"the task returned a value that cannot be stored as JSON: {exc}"
            ) from exc
        _store_return_value(ctx.id, value)
        object.__setattr__(result, "status", _tasks.TaskResultStatus.SUCCESSFUL)
        object.__setattr__(result, "finished_at", timezone.now())
        object.__setattr__(result, "_return_value", value)
        _tasks.task_finished.send(sender=sender, task_result=result)


def _store_return_value(job_id: int, value: Any) -> None:
    from .models import TaskResultRecord

    # Written before the job is marked completed: a worker that dies in between leaves a
    # value for a job that runs again (and writes it again), never a completed job without it.
    TaskResultRecord.objects.using(get_config().database).update_or_create(
        job_id=job_id, defaults={"return_value": value, "finished_at": timezone.now()}
    )


def _store_error(ctx: pgqueue.JobContext, exc: Exception) -> None:
    from .models import TaskResultRecord

    entry = {"attempt": ctx.attempt, "exception_class_path": exception_class_path(type(exc))}
    try:
        record, _ = TaskResultRecord.objects.using(get_config().database).get_or_create(
            job_id=ctx.id
        )
        record.errors = [*record.errors, entry][-RESULT_ERRORS_KEPT:]
        record.save(update_fields=["errors"])
    except Exception:
        # The class is a nicety of get_result; the failure itself is recorded by pgqueue.
        logger.warning("could not store the exception class of job %d", ctx.id, exc_info=True)


def builtin_exception_path(error: str | None) -> str:
    """Return the class path of a stored ``Type: message`` error no worker recorded.

    A builtin exception's name gives ``builtins.Name``; anything else ``builtins.Exception``.
    """
    name = (error or "").split(":", 1)[0].strip()
    found = getattr(builtins, name, None) if name.isidentifier() else None
    if isinstance(found, type) and issubclass(found, BaseException):
        return f"builtins.{name}"
    return "builtins.Exception"


@dataclass
class PruneResults(pgqueue.Worker):
    """Delete the stored task results whose pgqueue job no longer exists.

    pgqueue's retention deletes finished jobs (after a day when completed, a week when failed,
    by default); their results go with them at the next run of this job, which the app's
    registry schedules hourly (``PGQUEUE["PRUNE_RESULTS"]``).
    """

    kind = "django.prune_results"

    def process(self, ctx: pgqueue.JobContext) -> None:
        """Delete the orphaned rows, in one statement."""
        from .models import TaskResultRecord

        config = get_config()
        connection = connections[config.database]
        quote = connection.ops.quote_name
        jobs = f"{quote(config.settings.schema)}.{quote(config.settings.prefix + 'jobs')}"
        close_old_connections()
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    f"DELETE FROM {quote(TaskResultRecord._meta.db_table)} AS r "
                    f"WHERE NOT EXISTS (SELECT 1 FROM {jobs} AS j WHERE j.id = r.job_id)"
                )
                deleted = cursor.rowcount
        finally:
            close_old_connections()
        if deleted:
            ctx.logger.info("deleted %d task result(s) whose job is gone", deleted)
