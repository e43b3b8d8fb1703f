"""``AsyncAdmin``: the operator's calls of :class:`~pgqueue.AsyncClient` (list, retry, pause...).

Written once, for asyncio, in pgqueue/_async/admin.py; the ``Admin`` of pgqueue/_sync/admin.py
is generated from it. The client inherits these methods, so they read ``client.list_jobs(...)``.

Every call takes ``tx=``: the caller's connection or session with a transaction open (as
``add_job_with_tx`` takes it), to act inside that transaction; pgqueue never commits it. Without
``tx``, each call runs on the client's own connections, and a bulk action commits batch by batch
(``batch_size`` jobs at a time), so that it never holds many row locks for long.
What the calls accept is checked (``pgqueue/job_filter.py``) before any SQL runs: bad input
raises :class:`~pgqueue.InvalidFilter` or :class:`~pgqueue.InvalidName` and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from typing_extensions import Unpack

from ..admin_codec import ActionRow, queue_stats_build
from ..errors import InvalidFilter, JobActionRefused, JobNotFound
from ..events import AdminAction, EventHub
from ..job_filter import (
    ACTION_STATUSES,
    STATUSES,
    JobFilter,
    JobFilterKwargs,
    Sort,
    action_statuses,
    check_batch_size,
    check_limit,
    check_sort,
    cursor_decode,
    cursor_encode,
    queue_names,
)
from ..names import validate_queue
from ..records import BulkResult, JobInfo, JobPage, QueueStats, WorkerInfo
from ..settings import Settings
from .driver import AsyncDriver
from .store import AsyncStore

__all__ = ["ALL_QUEUES", "AsyncAdmin", "AsyncAdminBase", "Progress"]

ALL_QUEUES = "*"
"""The queue name that means every queue, for ``pause_queue`` and ``resume_queue``."""

Progress = Callable[[int, int], None]
"""Called after each batch of a bulk action with (jobs changed so far, jobs seen so far)."""

FINISHED = ("completed", "failed", "cancelled")
DEFAULT_BATCH = 1000


class AsyncAdminBase:
    """What the admin mixins share: the store, on the caller's ``tx`` if given, and events.

    The client provides ``_store``, ``events`` and ``_tx_driver``.
    """

    _store: AsyncStore
    events: EventHub
    settings: Settings

    def _tx_driver(self, tx: object) -> AsyncDriver:
        raise NotImplementedError  # the client's

    def _on(self, tx: object | None) -> AsyncStore:
        return self._store if tx is None else self._store.on(self._tx_driver(tx))

    def _emit(self, action: str, job_ids: Sequence[int], **detail: Any) -> None:
        if self.events.wants(AdminAction):
            self.events.emit(AdminAction(action, tuple(job_ids), detail))


class AsyncAdmin(AsyncAdminBase):
    """The admin API; :class:`~pgqueue.AsyncClient` inherits it (see the module's doc)."""

    # -- reading ------------------------------------------------------------------------------

    async def get_job(self, job_id: int, *, tx: object | None = None) -> JobInfo | None:
        """Return a job's current state and attempt history, or ``None`` if it does not exist."""
        return await self._on(tx).job_get(job_id)

    async def job_counts(self, *, tx: object | None = None) -> dict[str, int]:
        """Return how many jobs there are in each status (statuses with none are absent)."""
        return await self._on(tx).job_status_counts()

    async def list_jobs(
        self,
        *,
        ids: Iterable[int] | None = None,
        sort: Sort = "-id",
        limit: int = 50,
        cursor: str | None = None,
        tx: object | None = None,
        **job_filter: Unpack[JobFilterKwargs],
    ) -> JobPage:
        """Return one page of the jobs matching the filter, with the cursor of the next page.

        Filter by ``status``, ``queue``, ``kind`` (each a name or a list), ``args`` (a JSON
        object the arguments contain), ``ids``, and time ranges (``created_after``,
        ``scheduled_before``, ``finished_after``...: see :class:`~pgqueue.JobFilter`). ``sort``:
        ``"-id"`` newest first (default), ``"id"``, ``"due"`` soonest due first, ``"-due"``.
        ``limit``: 1 to 1000. Pass the page's ``next_cursor`` as ``cursor`` for the next page.
        """
        found = JobFilter.build(ids, **job_filter)
        sort = check_sort(sort)  # type: ignore[assignment]
        limit = check_limit(limit)
        after = None if cursor is None else cursor_decode(cursor, sort)
        jobs = await self._on(tx).job_list(found, sort, after, limit + 1)
        if len(jobs) <= limit:
            return JobPage(jobs, None)
        last = jobs[limit - 1]
        return JobPage(jobs[:limit], cursor_encode(sort, last.id, last.scheduled_for))

    async def queue_stats(
        self,
        queue: str | Iterable[str] | None = None,
        *,
        completed: bool = False,
        tx: object | None = None,
    ) -> list[QueueStats]:
        """Return each queue's job counts (per kind too), backlog age, pause state and workers.

        ``queue`` limits it to one queue or a few. Completed jobs are counted only with
        ``completed=True``: that count reads every retained completed job, where the others
        read small indexes (see docs/operations.md).
        """
        queues = queue_names(queue)
        store = self._on(tx)
        rows = await store.job_stats(queues, completed)
        queue_rows = await store.queue_list()
        workers = await store.worker_list()
        return queue_stats_build(
            rows,
            queue_rows,
            workers,
            datetime.now(UTC),
            completed=completed,
            queues=queues,
        )

    async def list_workers(self, *, tx: object | None = None) -> list[WorkerInfo]:
        """Return the registered worker processes.

        Each with its host, pid, queues, leadership, heartbeat age and the jobs it runs.
        """
        return await self._on(tx).worker_list()

    # -- queues ---------------------------------------------------------------------------------

    async def pause_queue(self, queue: str, *, tx: object | None = None) -> list[str]:
        """Pause a queue (``"*"``: every queue that exists now); return the queues paused.

        Workers finish the jobs they run and claim nothing more from it, from their next claim
        on, until :meth:`resume_queue`. The pause is stored, so it survives restarts. Jobs are
        still enqueued into a paused queue; they wait.
        """
        store = self._on(tx)
        every = queue == ALL_QUEUES
        names = await store.queue_known_names() if every else [validate_queue(queue)]
        paused = await store.queue_pause(names) if names else []
        self._emit("pause", (), queues=paused)
        return paused

    async def resume_queue(self, queue: str, *, tx: object | None = None) -> list[str]:
        """Resume a paused queue (``"*"``: every paused queue); return the queues resumed.

        Their workers are woken at once and claim again.
        """
        names = None if queue == ALL_QUEUES else [validate_queue(queue)]
        resumed = await self._on(tx).queue_resume(names)
        self._emit("resume", (), queues=resumed)
        return resumed

    # -- acting on jobs -------------------------------------------------------------------------

    async def retry_job(self, job_id: int, *, tx: object | None = None) -> JobInfo:
        """Run a failed, cancelled, completed or scheduled job again now; return it as it is now.

        It is pending and due at once, with one more attempt if it had used its last. A job
        enqueued with ``unique=`` takes its lock again. Raises :class:`~pgqueue.JobNotFound`,
        or :class:`~pgqueue.JobActionRefused` when the job is running or an identical job holds
        its unique lock.
        """
        await self._one("retry", job_id, tx)
        job = await self.get_job(job_id, tx=tx)
        if job is None:  # deleted in between
            raise JobNotFound(f"job {job_id} was deleted as it was retried")
        return job

    async def delete_job(self, job_id: int, *, tx: object | None = None) -> str:
        """Delete a job that is not running; return the status it had.

        Its ``job_id`` and unique lock are free again at once. Raises
        :class:`~pgqueue.JobNotFound`, or :class:`~pgqueue.JobActionRefused` for a running job
        (cancel it, and delete it once it has stopped).
        """
        return await self._one("delete", job_id, tx)

    async def cancel_job(self, job_id: int, *, tx: object | None = None) -> str | None:
        """Cancel a job: a pending one never runs; a running one has its context signalled.

        Returns the status the job had (``"pending"`` or ``"processing"``), or ``None`` when
        it was already finished or does not exist.
        """
        rows = await self._apply(self._on(tx), "cancel", [job_id])
        changed = [row for row in rows if row.changed]
        if not changed:
            return None
        self._emit("cancel", (job_id,), was=changed[0].status)
        return changed[0].status

    async def retry_jobs(
        self,
        ids: Iterable[int] | None = None,
        *,
        all_jobs: bool = False,
        dry_run: bool = False,
        batch_size: int = DEFAULT_BATCH,
        on_progress: Progress | None = None,
        tx: object | None = None,
        **job_filter: Unpack[JobFilterKwargs],
    ) -> BulkResult:
        """Retry jobs by id, or every job matching a filter (see :meth:`retry_job`).

        By filter, without a ``status``: the failed and cancelled ones. A filter (or
        ``all_jobs=True``) is required. ``dry_run`` counts without changing anything.
        """
        return await self._bulk(
            "retry", ids, all_jobs, dry_run, batch_size, on_progress, tx, job_filter
        )

    async def cancel_jobs(
        self,
        ids: Iterable[int] | None = None,
        *,
        all_jobs: bool = False,
        dry_run: bool = False,
        batch_size: int = DEFAULT_BATCH,
        on_progress: Progress | None = None,
        tx: object | None = None,
        **job_filter: Unpack[JobFilterKwargs],
    ) -> BulkResult:
        """Cancel jobs by id, or every pending or running job matching a filter.

        A running job is asked to stop (``changed`` counts it) and ends ``cancelled`` when its
        ``process`` returns or gives up.
        """
        return await self._bulk(
            "cancel", ids, all_jobs, dry_run, batch_size, on_progress, tx, job_filter
        )

    async def delete_jobs(
        self,
        ids: Iterable[int] | None = None,
        *,
        all_jobs: bool = False,
        dry_run: bool = False,
        batch_size: int = DEFAULT_BATCH,
        on_progress: Progress | None = None,
        tx: object | None = None,
        **job_filter: Unpack[JobFilterKwargs],
    ) -> BulkResult:
        """Delete jobs by id, or every job matching a filter; running jobs are never deleted."""
        return await self._bulk(
            "delete", ids, all_jobs, dry_run, batch_size, on_progress, tx, job_filter
        )

    async def purge_jobs(
        self,
        *,
        older_than: timedelta | float,
        queue: str | Iterable[str] | None = None,
        status: str | Iterable[str] | None = None,
        dry_run: bool = False,
        batch_size: int = DEFAULT_BATCH,
        on_progress: Progress | None = None,
        tx: object | None = None,
    ) -> BulkResult:
        """Delete jobs that finished more than ``older_than`` ago, oldest first.

        ``older_than``: a timedelta, or seconds. ``queue``: default every queue; ``status``:
        default completed, failed and cancelled.
        """
        seconds = _seconds(older_than)
        queues = queue_names(queue)
        statuses = list(FINISHED) if status is None else _finished_statuses(status)
        batch_size = check_batch_size(batch_size)
        store = self._on(tx)
        if dry_run:
            n = await store.job_purge_count(seconds, queues, statuses)
            return BulkResult("purge", n, 0, dry_run=True)
        deleted = 0
        while True:
            n = await store.job_purge(seconds, queues, statuses, batch_size)
            deleted += n
            if on_progress is not None:
                on_progress(deleted, deleted)
            if n < batch_size:
                break
        self._emit("purge", (), deleted=deleted, older_than=seconds, queues=queues)
        return BulkResult("purge", deleted, deleted)

    # -- the shared machinery ---------------------------------------------------------------

    async def _one(self, action: str, job_id: int, tx: object | None) -> str:
        rows = await self._apply(self._on(tx), action, [job_id])
        if not rows:
            raise JobNotFound(
                f"no job {job_id}: it never existed, or it was deleted (retention removes "
                "finished jobs)"
            )
        row = rows[0]
        if not row.changed:
            reason = _reason(action, row)
            raise JobActionRefused(
                f"job {job_id} was not {_past(action)}: {reason}",
                job_id=job_id,
                status=row.status,
                reason=reason,
            )
        self._emit(action, (job_id,), was=row.status)
        return row.status

    async def _apply(
        self,
        store: AsyncStore,
        action: str,
        ids: Sequence[int],
        statuses: Sequence[str] | None = None,
    ) -> list[ActionRow]:
        # ``statuses``: what a filter asked for, checked again under each row's lock (a job
        # claimed or finished since its id was read is left alone); by id, whatever the action
        # applies to.
        allowed = sorted(ACTION_STATUSES[action]) if statuses is None else list(statuses)
        if action == "retry":
            return await store.job_retry_many(ids, allowed)
        if action == "cancel":
            return await store.job_cancel_many(ids, allowed)
        return await store.job_delete_many(ids, allowed)

    async def _bulk(
        self,
        action: str,
        ids: Iterable[int] | None,
        all_jobs: bool,
        dry_run: bool,
        batch_size: int,
        on_progress: Progress | None,
        tx: object | None,
        filter_kwargs: Any,
    ) -> BulkResult:
        found = JobFilter.build(ids, **filter_kwargs)
        batch_size = check_batch_size(batch_size)
        if found.empty and not all_jobs:
            raise InvalidFilter(
                f"{action} of every job needs all_jobs=True (--all): pass ids or a filter "
                "(status, queue, kind, args, time ranges) to choose the jobs"
            )
        store = self._on(tx)
        by_id = found.ids is not None and len(found.describe()) == 1
        if by_id:
            assert found.ids is not None
            return await self._bulk_by_id(store, action, found.ids, dry_run, batch_size)
        statuses = action_statuses(action, found)
        if dry_run:
            matched = await store.job_filter_count(found, statuses)
            return BulkResult(action, matched, 0, dry_run=True)
        seen, changed_ids, refused = 0, [], {}
        after = 0
        while True:
            batch = await store.job_filter_ids(found, statuses, after, batch_size)
            if not batch:
                break
            after = batch[-1]
            seen += len(batch)
            for row in await self._apply(store, action, batch, statuses):
                if row.changed:
                    changed_ids.append(row.id)
                else:  # claimed or ended since the batch was read, or a unique lock held
                    refused[row.id] = _reason(action, row, statuses)
            if on_progress is not None:
                on_progress(len(changed_ids), seen)
            if len(batch) < batch_size:
                break
        self._emit(action, changed_ids, filter=found.describe())
        return BulkResult(action, seen, len(changed_ids), refused)

    async def _bulk_by_id(
        self,
        store: AsyncStore,
        action: str,
        ids: Sequence[int],
        dry_run: bool,
        batch_size: int,
    ) -> BulkResult:
        applicable = ACTION_STATUSES[action]
        rows: list[ActionRow] = []
        for start in range(0, len(ids), batch_size):
            chunk = ids[start : start + batch_size]
            if dry_run:
                listed = await store.job_list(JobFilter(ids=tuple(chunk)), "id", None, len(chunk))
                rows += [ActionRow(j.id, j.status, j.status in applicable) for j in listed]
            else:
                rows += await self._apply(store, action, chunk)
        found = {row.id for row in rows}
        changed = [row.id for row in rows if row.changed]
        refused = {row.id: _reason(action, row) for row in rows if not row.changed}
        if not dry_run and changed:
            self._emit(action, changed, ids=list(ids))
        return BulkResult(
            action,
            matched=len(changed) if dry_run else len(rows),
            changed=0 if dry_run else len(changed),
            refused=refused,
            missing=[i for i in ids if i not in found],
            dry_run=dry_run,
        )


def _reason(action: str, row: ActionRow, statuses: Sequence[str] | None = None) -> str:
    if row.status == "processing" and action != "cancel":
        return "it is running: " + (
            "wait for it to end, or cancel it first"
            if action == "retry"
            else "cancel it, and delete it once it has stopped"
        )
    if row.lock_holder is not None and row.lock_holder != row.id:
        return (
            f"an identical job ({row.lock_holder}) holds its unique lock: retry that one, or "
            "delete it first"
        )
    if action == "cancel":
        if row.status == "processing":
            return "it started running after it was selected: cancel it by id to stop it"
        if row.status == "pending":
            return "it is pending, which the filter did not ask for"
        return f"it has already ended ({row.status})"
    if row.status in (ACTION_STATUSES[action] if statuses is None else statuses):
        return "another job retried with it, with the same unique key, took the lock"
    return f"it is {row.status} now, which the filter did not ask for"


def _past(action: str) -> str:
    return {"retry": "retried", "cancel": "cancelled", "delete": "deleted"}[action]


def _finished_statuses(status: str | Iterable[str]) -> list[str]:
    items = [status] if isinstance(status, str) else list(status)
    for item in items:
        if item not in FINISHED:
            known = item in STATUSES
            raise InvalidFilter(
                f"purge deletes finished jobs ({', '.join(FINISHED)}), not {item!r}"
                + ("" if known else f": the statuses are {', '.join(STATUSES)}")
                + (": delete_jobs removes unfinished ones" if known else "")
            )
    if not items:
        raise InvalidFilter("status is an empty list: pass None for every finished status")
    return items


def _seconds(value: timedelta | float) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not (0 <= seconds < 10**10)
    ):
        raise InvalidFilter(
            f"older_than must be a timedelta or a number of seconds, 0 or more, got {value!r}"
        )
    return float(seconds)
