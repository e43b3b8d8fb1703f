"""Value types that describe stored jobs, queues and workers, shared by both clients.

Defined once here (never in ``_async``/``_sync``), so ``pgqueue.Client.get_job`` and
``pgqueue.AsyncClient.get_job`` return the very same class, :class:`pgqueue.JobInfo`, and the
admin API's calls the same records.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .execution import ClaimedJob, Outcome

__all__ = [
    "Attempt",
    "BulkResult",
    "JobInfo",
    "JobPage",
    "JobResult",
    "PeriodicInfo",
    "QueueStats",
    "ResultOutcome",
    "RunningJob",
    "StatusCounts",
    "TickInfo",
    "WorkerInfo",
]


@dataclass(frozen=True)
class Attempt:
    """One attempt at running a job, as :attr:`JobInfo.attempt_history` lists it.

    - ``number``: 1 for the first attempt; ``outcome``: ``"running"``, ``"completed"``,
      ``"failed"`` (the attempt raised, timed out or was rescued; the job may have been retried),
      or ``"cancelled"``.
    - ``started_at``/``finished_at``/``duration`` (seconds of ``process``): ``None`` when
      unknown or not yet ended; ``instance_id``: the worker process that ran it.
    - ``error``/``traceback``: what a failed attempt raised.
    """

    number: int
    outcome: str
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration: float | None = None
    instance_id: uuid.UUID | None = None
    error: str | None = None
    traceback: str | None = None


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
    - ``claimed_by``/``claimed_at``: the worker process (instance id) that claimed the job last
      and when; ``worker_id``: which of its slots. ``None`` for a job never claimed (or retried
      by an operator since).
    - ``attempt_history``: every attempt still on record, oldest first (see :class:`Attempt`):
      the failed ones from ``errors`` (so at most the last 10), then the last one from the row.
    - ``options``: the per-job runtime options (``timeout``, ``backoff``...);
      ``unique_key``: set when enqueued with ``unique=``; ``cancel_requested_at``: when someone
      asked to cancel it; ``last_error_at``: when ``last_error`` was recorded.
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
    claimed_by: uuid.UUID | None = None
    claimed_at: datetime | None = None
    worker_id: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    unique_key: str | None = None
    cancel_requested_at: datetime | None = None
    last_error_at: datetime | None = None
    attempt_history: list[Attempt] = field(default_factory=list)


@dataclass(frozen=True)
class JobPage:
    """One page of :meth:`~pgqueue.Client.list_jobs`: the jobs, and the cursor of the next page.

    ``next_cursor`` is ``None`` on the last page; pass it as ``cursor=`` (with the same
    filter and sort) for the next one. Paging is by key, never by offset: a page costs the same
    however deep it is, and jobs added meanwhile do not shift the pages.
    """

    jobs: list[JobInfo]
    next_cursor: str | None


@dataclass(frozen=True)
class BulkResult:
    """What a retry, cancel, delete or purge did (or, with ``dry_run``, would do).

    - ``action``: ``"retry"``, ``"cancel"``, ``"delete"`` or ``"purge"``.
    - ``matched``: jobs found (by id) or matching the filter in a status the action applies to.
    - ``changed``: jobs changed (retried, cancelled or asked to stop, deleted); 0 in a dry run.
    - ``refused``: job id -> why it was left alone (a running job for retry or delete, a
      finished one for cancel, a unique lock held by another job); ``missing``: ids not found.
    - ``dry_run``: nothing was changed; ``matched`` says how many would be.
    """

    action: str
    matched: int
    changed: int
    refused: dict[int, str] = field(default_factory=dict)
    missing: list[int] = field(default_factory=list)
    dry_run: bool = False


@dataclass(frozen=True)
class StatusCounts:
    """How many jobs of a queue (or of one kind in it) are in each state.

    ``available``: pending and due (waiting for a worker); ``scheduled``: pending, due later;
    ``completed``: ``None`` unless asked for (``queue_stats(completed=True)``): the count grows
    with the retained history. ``oldest_available_at``: when the longest-waiting available job
    fell due (its age is how far behind the workers are).
    """

    available: int = 0
    scheduled: int = 0
    processing: int = 0
    failed: int = 0
    cancelled: int = 0
    completed: int | None = None
    oldest_available_at: datetime | None = None

    @property
    def pending(self) -> int:
        """Pending jobs, due or not (``available + scheduled``)."""
        return self.available + self.scheduled


@dataclass(frozen=True)
class QueueStats:
    """One queue as :meth:`~pgqueue.Client.queue_stats` sees it.

    - ``counts``: the queue's :class:`StatusCounts`; ``kinds``: the same per job kind.
    - ``oldest_available_age``: seconds since the longest-waiting available job fell due
      (``None``: nothing is waiting): how far behind the queue is.
    - ``paused``/``paused_at``: whether an operator paused it (``pause_queue``), since when.
    - ``workers``: live worker processes serving it, and their ``concurrency`` in all.
    - ``unknown_kinds``: kinds with available jobs that no live worker of the queue runs: they
      wait until a worker that registers the kind starts.
    """

    queue: str
    counts: StatusCounts
    kinds: dict[str, StatusCounts]
    oldest_available_age: float | None
    paused: bool
    paused_at: datetime | None
    workers: int
    concurrency: int
    unknown_kinds: list[str]


@dataclass(frozen=True)
class RunningJob:
    """A job a worker process is running (:attr:`WorkerInfo.running`)."""

    id: int
    kind: str
    queue: str
    attempt: int
    max_attempts: int
    started_at: datetime | None
    worker_id: str | None
    cancel_requested: bool


@dataclass(frozen=True)
class WorkerInfo:
    """A worker process registered in the database (:meth:`~pgqueue.Client.list_workers`).

    ``queues`` maps each queue it serves to its concurrency; ``kinds`` the job kinds it runs
    (``None``: written by an older pgqueue, every kind); ``heartbeat_age`` seconds since its last
    heartbeat (a process whose heartbeat is older than the leader's ``rescue_after`` is
    presumed dead and removed); ``is_leader``; ``running`` the jobs it holds now.
    """

    instance_id: uuid.UUID
    hostname: str
    pid: int
    queues: dict[str, int]
    kinds: list[str] | None
    started_at: datetime
    heartbeat_at: datetime
    heartbeat_age: float
    is_leader: bool
    running: list[RunningJob]


for _record in (
    Attempt,
    BulkResult,
    JobInfo,
    JobPage,
    QueueStats,
    RunningJob,
    StatusCounts,
    WorkerInfo,
):
    _record.__module__ = "pgqueue"


@dataclass(frozen=True)
class TickInfo:
    """One tick of a periodic entry in the ledger (:meth:`~pgqueue.Client.cron_history`).

    ``how``: ``scheduled``, ``late`` (a missed tick within its grace), ``backfill``, ``start``
    (``run_on_start``), ``manual`` (``cron_trigger``) or ``skipped`` (overlap: no job).
    ``job_id`` is the job enqueued for it, ``status`` etc. that job as it is now (``None`` once
    retention removed it, or for a skipped tick).
    """

    tick: datetime
    how: str
    job_id: int | None
    enqueued_at: datetime
    status: str | None = None
    attempts: int | None = None
    finished_at: datetime | None = None
    last_error: str | None = None


@dataclass(frozen=True)
class PeriodicInfo:
    """A periodic entry as :meth:`~pgqueue.Client.cron_list` shows it.

    - ``schedule`` (the cron expression, or ``every Ns``), ``timezone``, ``kind``, ``queue``.
    - ``paused``/``paused_at``; ``retired``: no worker has evaluated it for a while (it was
      removed from the code, or no worker with it runs); its history is kept.
    - ``last_tick`` (with ``last_how`` and ``last_job_id``, ``last_job_status``): the newest tick
      acted on; ``last_run``: the newest tick whose job has finished (what to alert on when it
      is ``failed``, or old); ``next_tick``: when it falls due next.
    """

    name: str
    schedule: str
    timezone: str
    kind: str
    queue: str
    paused: bool
    paused_at: datetime | None
    retired: bool
    declared_at: datetime
    seen_age: float
    created_at: datetime
    last_tick: datetime | None
    last_how: str | None
    last_job_id: int | None
    last_job_status: str | None
    last_run: TickInfo | None
    next_tick: datetime | None


PeriodicInfo.__module__ = "pgqueue"
TickInfo.__module__ = "pgqueue"


ResultOutcome = Literal["completed", "retry", "failed", "cancelled", "snoozed"]
"""How a run of a job ended, as :class:`JobResult` says it."""


@dataclass(frozen=True)
class JobResult:
    """How one run of a job ended, as ``pgqueue.testing`` reports it.

    - ``id``: the job's row id; ``None`` from ``perform_job``, which stores nothing.
    - ``kind``, ``queue``, ``attempt`` (1 for a first run), ``args`` (the stored arguments it
      was built from; ``None`` if they are not a JSON object).
    - ``outcome``: ``"completed"``; ``"retry"`` (it raised or timed out, and another attempt is
      scheduled ``retry_in`` seconds later); ``"failed"`` (it raised on its last attempt, raised
      ``Discard``, or could not be built from its arguments); ``"cancelled"`` (it raised
      ``Cancel``); ``"snoozed"`` (it raised ``Retry(in_=...)``: it runs again ``retry_in``
      seconds later, and the attempt is not counted).
    - ``error``: the message a worker stores as the job's ``last_error`` (``Type: message``,
      ``timed out after 2s``, the reason of a ``Cancel`` or ``Discard``), else ``None``.
    - ``exception``: the exception behind a ``retry`` or ``failed`` outcome when the job raised
      one (a timeout is ``pgqueue.execution.ProcessTimeout``); ``None`` for the other outcomes,
      and for ``Cancel``, ``Discard`` and ``Retry``, whose effect is the outcome itself.
    - ``retry_in``: seconds until the next run, for ``retry`` and ``snoozed``; else ``None``.
    - ``duration``: seconds ``process`` ran; ``None`` when it did not run.
    """

    id: int | None
    kind: str
    queue: str
    attempt: int
    outcome: ResultOutcome
    error: str | None = None
    exception: BaseException | None = field(default=None, compare=False)
    retry_in: float | None = None
    duration: float | None = field(default=None, compare=False)
    args: dict[str, Any] | None = None


_OUTCOMES: dict[str, ResultOutcome] = {
    "complete": "completed",
    "retry": "retry",
    "fail": "failed",
    "cancel": "cancelled",
    "snooze": "snoozed",
}


def job_result(row_id: int | None, job: ClaimedJob, outcome: Outcome) -> JobResult:
    """Return the :class:`JobResult` of a run of ``job`` that ended with ``outcome``.

    For ``pgqueue.testing`` (both sides), which never shuts a run down: never ``release``.
    """
    try:
        args = json.loads(job.payload_text)
    except ValueError:  # stored by hand, say: the outcome says what became of it
        args = None
    retries = outcome.action in ("retry", "snooze")
    return JobResult(
        id=row_id,
        kind=job.kind,
        queue=job.queue,
        attempt=job.attempt,
        outcome=_OUTCOMES[outcome.action],
        error=outcome.message or None,
        exception=outcome.exc,
        retry_in=outcome.delay if retries else None,
        duration=job.duration,
        args=args if isinstance(args, dict) else None,
    )
