"""Value types that describe stored jobs, shared by the sync and asyncio clients.

Defined once here (never in ``_async``/``_sync``), so ``pgqueue.Client.get_job`` and
``pgqueue.AsyncClient.get_job`` return the very same class, :class:`pgqueue.JobInfo`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["JobInfo"]


@dataclass(frozen=True)
class JobInfo:
    """A job's row as ``get_job`` reads it.

    - ``id``: the row id (``JobHandle.id``, ``ctx.id``); ``job_id``: the caller-chosen id it was
      enqueued with, or ``None``.
    - ``payload``: the job's arguments; ``status``: ``pending``, ``processing``, ``completed``,
      ``failed`` or ``cancelled``.
    - ``attempts``: attempts started so far (a running attempt included), of ``max_attempts``.
    - ``last_error``: the last failure (``Type: message``); ``errors``: the history of failed
      attempts (the last 10), each a dict with ``attempt``, ``at``, ``error``, ``traceback``
      and, once the attempt ran, ``started_at`` and ``duration``.
    - ``duration``: how long the last attempt's ``process`` ran, in seconds (``None`` until an
      attempt has ended).
    """

    id: int
    kind: str
    queue: str
    payload: dict[str, Any]
    status: str
    priority: int
    attempts: int
    max_attempts: int
    created_at: datetime
    scheduled_for: datetime
    finished_at: datetime | None
    last_error: str | None
    errors: list[dict[str, Any]]
    job_id: str | None
    duration: float | None = None


JobInfo.__module__ = "pgqueue"
