"""The table of task results: what ``get_result`` reads beside the pgqueue job itself.

pgqueue's job row has no room for a return value, so the worker writes one row here per job
of a task: the return value when the task returns (before the job is marked completed), and
the exception class of each failed attempt (pgqueue's own row keeps the message and the
traceback). Rows whose job is gone (pgqueue's retention deleted it) are deleted by the
hourly ``pgqueue.django.prune-results`` periodic entry.
"""

from __future__ import annotations

from django.db import models  # type: ignore[import-untyped]

__all__ = ["TaskResultRecord"]


class TaskResultRecord(models.Model):  # type: ignore[misc]
    """One pgqueue job's task result: its return value and its attempts' exception classes.

    ``job_id`` is the pgqueue job's row id (the ``TaskResult.id``, as an int);
    ``return_value`` the task's return value as JSON (``None`` until it returned);
    ``errors`` a list of ``{"attempt": n, "exception_class_path": "module.Class"}``, the last
    10; ``finished_at`` when the task returned.
    """

    job_id = models.BigIntegerField(primary_key=True)
    return_value = models.JSONField(null=True, default=None)
    errors = models.JSONField(default=list)
    finished_at = models.DateTimeField(null=True, default=None)

    class Meta:
        """The table's name: fixed, whatever the app's label."""

        db_table = "pgqueue_django_results"
        verbose_name = "task result"

    def __str__(self) -> str:
        return f"result of job {self.job_id}"
