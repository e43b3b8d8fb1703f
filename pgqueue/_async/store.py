"""``AsyncStore``: the one layer between pgqueue's logic and its SQL.

Written once, for asyncio, in pgqueue/_async/store.py; the ``Store`` of pgqueue/_sync/store.py
is generated from it.

The store is the only code that names a statement of ``sql/queries.sql``, binds its parameters
and decodes its rows (with ``pgqueue/store_codec.py``, its pure half), and it maps database errors
to pgqueue's (a missing table is :class:`~pgqueue.SchemaNotMigrated`). The client, the runtime,
the schema functions, and later the admin API and cron, call its methods and see typed records.
A store is bound to one driver: ``store.on(tx)`` is the same store inside a transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, NoReturn

from ..admin_codec import (
    ActionRow,
    QueueRow,
    StatRow,
    action_rows,
    running_jobs,
    stat_rows,
    workers_build,
)
from ..enqueue import PreparedJob
from ..errors import DatabaseError, JobIdConflict, SchemaNotMigrated
from ..execution import ClaimedJob, Outcome
from ..job_filter import JobFilter
from ..jobs import JobHandle
from ..queries import Migration, Queries, migrations_for, queries_for
from ..records import JobInfo, WorkerInfo
from ..settings import Settings
from ..store_codec import (
    COPY_COLUMNS,
    Claim,
    InstanceIdentity,
    RescuedJob,
    UnknownKind,
    claim_decode,
    claim_kinds,
    copy_records,
    existing_handle,
    finish_params,
    handles_for_records,
    handles_from_rows,
    insert_keyed_params,
    insert_many_params,
    insert_params,
    job_info,
)
from .driver import AsyncDriver, AsyncSupportsCopy
from .store_periodic import AsyncPeriodicStore

__all__ = ["AsyncStore"]

# SQLSTATEs that mean pgqueue's schema is missing or older than this code.
_NOT_MIGRATED = ("42P01", "42703")  # undefined_table, undefined_column


class AsyncStore(AsyncPeriodicStore):
    """pgqueue's statements as typed methods, run on one driver for one installation.

    Method names follow the statements' (entity first: ``job_claim``, ``instance_heartbeat``).
    Every method raises :class:`~pgqueue.DatabaseError` (or a more precise subclass) for what
    the database refuses, never a driver library's exception.
    """

    __slots__ = ("_q", "driver", "settings")

    def __init__(self, driver: AsyncDriver, settings: Settings) -> None:
        self.driver = driver
        self.settings = settings
        self._q: Queries = queries_for(settings)

    def on(self, driver: AsyncDriver) -> AsyncStore:
        """Return this store bound to ``driver`` (a transaction's, say)."""
        return AsyncStore(driver, self.settings)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncStore]:
        """Run the block in a transaction (a savepoint inside one); yield the store bound to it."""
        async with self.driver.with_tx() as tx:
            yield AsyncStore(tx, self.settings)

    @property
    def supports_copy(self) -> bool:
        """Whether the driver can bulk-load with ``COPY`` (see :meth:`job_copy`)."""
        return isinstance(self.driver, AsyncSupportsCopy)

    # -- running statements -----------------------------------------------------------------

    async def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return await self.driver.query(sql, params)
        except DatabaseError as exc:
            self._raise_translated(exc)

    async def _exec(self, sql: str, params: Sequence[Any] = ()) -> None:
        try:
            await self.driver.exec(sql, params)
        except DatabaseError as exc:
            self._raise_translated(exc)

    def _raise_translated(self, exc: DatabaseError) -> NoReturn:
        """Raise pgqueue's precise error for ``exc``, or ``exc`` itself with its own cause.

        (``raise exc from exc`` would replace the library's exception, which callers read,
        with the error itself.)
        """
        translated = self._translate(exc)
        if translated is exc:
            raise exc
        raise translated from exc

    def _translate(self, exc: DatabaseError) -> DatabaseError | JobIdConflict:
        if exc.sqlstate in _NOT_MIGRATED and not isinstance(exc, SchemaNotMigrated):
            return SchemaNotMigrated(
                f"pgqueue's tables in schema {self.settings.schema!r} (prefix "
                f"{self.settings.prefix!r}) are missing or older than this version of pgqueue: "
                "run client.migrate() or `pgqueue migrate` (or `pgqueue worker --migrate`) "
                f"first ({str(exc).splitlines()[0] if str(exc) else exc.sqlstate})",
                exc.sqlstate,
            )
        if exc.sqlstate == "23505" and exc.constraint_name == self.settings.prefix + "jobs_key_idx":
            return JobIdConflict(
                "a job with this job_id already exists (it keeps the id until retention removes "
                "it): choose another job_id, or look the existing job up"
            )
        return exc

    # -- schema -------------------------------------------------------------------------------

    async def migration_prepare(self) -> set[int]:
        """In a transaction: take the migration lock, create the schema and the version table.

        Returns the versions already applied.
        """
        lock = self.settings.advisory_key("migrate")
        await self.driver.query(self._q.migration_lock, (lock,))
        await self.driver.exec(self._q.schema_create)
        await self.driver.exec(self._q.migration_table_create)
        return {int(row[0]) for row in await self.driver.query(self._q.migration_applied_list)}

    async def migration_apply(self, migration: Migration) -> None:
        """Run one migration's SQL and record its version (inside the migration transaction)."""
        await self.driver.exec(migration.sql)
        await self.driver.exec(self._q.migration_record, (migration.version, migration.name))

    async def schema_version(self) -> int | None:
        """Return the newest applied migration version, or ``None`` if pgqueue is not installed."""
        rows = await self.driver.query(
            self._q.migration_table_exists, (self._q.table("migrations"),)
        )
        if not rows[0][0]:
            return None
        version = (await self.driver.query(self._q.migration_current_version))[0][0]
        return None if version is None else int(version)

    async def schema_require_current(self) -> None:
        """Raise :class:`~pgqueue.SchemaNotMigrated` unless every migration is applied.

        A worker checks this at start: on an older schema its statements would fail one by one
        (the claim first, every poll), where this says once what to run.
        """
        version = await self.schema_version()
        latest = migrations_for(self.settings)[-1].version
        if version is None or version < latest:
            state = "missing" if version is None else f"at version {version}"
            raise SchemaNotMigrated(
                f"pgqueue's tables in schema {self.settings.schema!r} (prefix "
                f"{self.settings.prefix!r}) are {state}, and this version of pgqueue needs "
                f"version {latest}: run client.migrate() or `pgqueue migrate` (or "
                "`pgqueue worker --migrate`) first"
            )

    async def schema_uninstall(self) -> None:
        """Drop pgqueue's tables; then the schema itself, unless it is ``public`` or not empty."""
        async with self.transaction() as tx:
            await tx.driver.query(self._q.migration_lock, (self.settings.advisory_key("migrate"),))
            await tx.driver.exec(self._q.schema_tables_drop)
            await tx.driver.exec(self._q.schema_function_drop)
            if self.settings.schema == "public":
                return
            try:
                async with tx.transaction() as inner:  # a savepoint: its failure is expected
                    await inner.driver.exec(self._q.schema_drop_if_empty)
            except DatabaseError as exc:
                if (
                    exc.sqlstate != "2BP01"
                ):  # dependent_objects_still_exist: other things live there
                    raise

    # -- enqueue ------------------------------------------------------------------------------

    async def job_insert(self, job: PreparedJob) -> JobHandle:
        """Insert one job (no ``job_id``, no unique lock) and wake its queue's workers."""
        rows = await self._query(self._q.job_insert, insert_params(job, self.settings.channel))
        return handles_from_rows((job,), rows)[0]

    async def job_insert_keyed(self, job: PreparedJob) -> JobHandle | None:
        """Insert a job with a ``job_id`` or unique key; ``None`` when the ``job_id`` is taken."""
        rows = await self._query(
            self._q.job_insert_keyed, insert_keyed_params(job, self.settings.channel)
        )
        return handles_from_rows((job,), rows)[0] if rows else None

    async def unique_lock_take(self, job: PreparedJob, job_row_id: int) -> bool:
        """Take ``job``'s unique lock for the inserted row ``job_row_id``; False if it is held."""
        rows = await self._query(
            self._q.unique_lock_take, (job.unique_key, job_row_id, job.unique_seconds)
        )
        return bool(rows)

    async def job_by_key(self, key: str | None) -> JobHandle | None:
        """Return the job holding caller-chosen id ``key`` (as a refused duplicate's handle)."""
        rows = await self._query(self._q.job_by_key, (key,))
        return existing_handle(rows[0], "job_id") if rows else None

    async def job_by_unique_key(self, unique_key: str | None) -> JobHandle | None:
        """Return the job holding unique lock ``unique_key`` (as a refused duplicate's handle)."""
        rows = await self._query(self._q.job_by_unique_key, (unique_key,))
        return existing_handle(rows[0], "unique") if rows else None

    async def job_insert_many(self, jobs: Sequence[PreparedJob]) -> list[JobHandle]:
        """Insert plain jobs in one statement; handles in input order."""
        rows = await self._query(
            self._q.job_insert_many, insert_many_params(jobs, self.settings.channel)
        )
        return handles_from_rows(jobs, rows)

    async def job_copy(self, jobs: Sequence[PreparedJob]) -> list[JobHandle]:
        """Bulk-load plain jobs with ``COPY`` (the driver must support it); handles in order.

        Ids first (a sequence gap if the COPY fails is harmless), then one COPY in its own
        transaction, then the wake-up that INSERT statements send by themselves.
        """
        driver = self.driver
        assert isinstance(driver, AsyncSupportsCopy)
        q, settings = self._q, self.settings
        ((ids, now),) = await self._query(q.job_reserve_ids, (q.table("jobs"), len(jobs)))
        records = copy_records(jobs, ids, now)
        try:
            await driver.copy_records(
                settings.schema, settings.prefix + "jobs", COPY_COLUMNS, records
            )
        except DatabaseError as exc:
            self._raise_translated(exc)
        queues = sorted({job.queue for job in jobs})
        await self._query(q.job_notify_queues, (settings.channel, queues))
        return handles_for_records(jobs, records)

    # -- inspecting and cancelling --------------------------------------------------------------

    async def job_get(self, job_id: int) -> JobInfo | None:
        """Return one job's row, or ``None``."""
        rows = await self._query(self._q.job_get, (job_id,))
        return job_info(rows[0]) if rows else None

    async def job_status_counts(self) -> dict[str, int]:
        """Return how many jobs there are in each status (statuses with none are absent)."""
        rows = await self._query(self._q.job_status_counts)
        return {str(status): int(count) for status, count in rows}

    # -- running jobs -------------------------------------------------------------------------

    async def job_claim(
        self,
        queue: str,
        kinds: list[str],
        limit: int,
        instance_id: uuid.UUID,
        lease: uuid.UUID,
        worker_id: str,
    ) -> Claim:
        """Claim up to ``limit`` due jobs of ``queue`` of ``kinds`` under ``lease``."""
        rows = await self._query(
            self._q.job_claim, (queue, claim_kinds(kinds), limit, instance_id, lease, worker_id)
        )
        return claim_decode(rows, lease, queue)

    async def job_finish_many(self, batch: Sequence[tuple[ClaimedJob, Outcome]]) -> set[int]:
        """Record how a batch of jobs ended; return the ids written (the others are not ours)."""
        rows = await self._query(self._q.job_finish_many, finish_params(batch))
        return {int(row[0]) for row in rows}

    async def job_claim_by_ids(
        self,
        ids: Sequence[int],
        kinds: list[str],
        instance_id: uuid.UUID,
        lease: uuid.UUID,
        worker_id: str,
    ) -> list[ClaimedJob]:
        """Claim the pending jobs ``ids`` of ``kinds``, due or not (``pgqueue.testing``).

        The jobs come back in the order of ``ids``; those not pending are left out.
        """
        rows = await self._query(
            self._q.job_claim_by_ids, (list(ids), instance_id, lease, worker_id, kinds)
        )
        jobs = claim_decode(rows, lease, "").jobs
        for job, row in zip(jobs, rows, strict=True):
            job.queue = str(row[9])  # job_claim's rows are of one queue; these name theirs
        order = {job_id: i for i, job_id in enumerate(ids)}
        return sorted(jobs, key=lambda job: order[job.id])

    async def job_make_due(self, queues: list[str] | None, kinds: list[str]) -> int:
        """Make the scheduled pending jobs of ``queues`` (``None``: all) due now, in order.

        Returns how many moved (``pgqueue.testing``'s ``drain(with_scheduled=True)``).
        """
        return len(await self._query(self._q.job_make_due, (queues, kinds)))

    async def job_release_unsure_claims(
        self, instance_id: uuid.UUID, leases: Sequence[uuid.UUID]
    ) -> list[int]:
        """Hand back what claims with ``leases`` (whose replies were lost) took; their ids."""
        rows = await self._query(self._q.job_release_unsure_claims, (instance_id, list(leases)))
        return [int(row[0]) for row in rows]

    # -- instances and leadership -----------------------------------------------------------

    async def instance_register(self, identity: InstanceIdentity) -> None:
        """Register (or refresh) a worker instance."""
        await self._exec(self._q.instance_register, identity.params())

    async def instance_heartbeat(self, identity: InstanceIdentity) -> list[int]:
        """Refresh the instance's heartbeat; return its running jobs someone asked to cancel."""
        rows = await self._query(self._q.instance_heartbeat, identity.params())
        return [int(row[0]) for row in rows]

    async def instance_unregister(self, instance_id: uuid.UUID) -> None:
        """Remove the instance's row (a clean stop)."""
        await self._exec(self._q.instance_unregister, (instance_id,))

    async def instance_resign(self, instance_id: uuid.UUID) -> None:
        """Mark the instance as no longer the leader."""
        await self._exec(self._q.instance_resign, (instance_id,))

    async def instance_set_leader(self, instance_id: uuid.UUID) -> None:
        """Mark the instance as the leader (and no other)."""
        await self._exec(self._q.instance_set_leader, (instance_id,))

    async def instance_lead(self, instance_id: uuid.UUID, fresh_within: float) -> bool:
        """Take or keep the leader's lease (``poll_only``); return whether this instance has it.

        Another instance keeps it while its heartbeat is newer than ``fresh_within`` seconds.
        """
        async with self.transaction() as tx:
            await tx._exec(self._q.instance_lead_lock, (self.settings.advisory_key("lease"),))
            rows = await tx._query(self._q.instance_lead, (instance_id, fresh_within))
        return bool(rows[0][0])

    async def instance_remove_stale(self, older_than: float, leader: uuid.UUID) -> list[uuid.UUID]:
        """Remove instances whose heartbeat is older than ``older_than`` seconds; their ids.

        ``leader``, the instance asking, is never removed: it is alive.
        """
        rows = await self._query(self._q.instance_remove_stale, (older_than, leader))
        return [row[0] for row in rows]

    # -- maintenance --------------------------------------------------------------------------

    async def job_rescue(self, limit: int) -> list[RescuedJob]:
        """Take back up to ``limit`` jobs of instances that no longer exist."""
        rows = await self._query(self._q.job_rescue, (limit, self.settings.channel))
        return [RescuedJob(int(row[0]), str(row[1])) for row in rows]

    async def job_cleanup(self, completed_after: float, failed_after: float, limit: int) -> int:
        """Remove up to ``limit`` finished jobs past retention; return how many."""
        rows = await self._query(self._q.job_cleanup, (completed_after, failed_after, limit))
        return len(rows)

    async def unique_lock_expire(self, limit: int) -> None:
        """Remove up to ``limit`` expired unique locks."""
        await self._exec(self._q.unique_lock_expire, (limit,))

    async def job_unknown_kinds(self, queues: list[str], kinds: list[str]) -> list[UnknownKind]:
        """Due jobs of ``queues`` whose kind no live instance runs (``kinds``: ours)."""
        rows = await self._query(self._q.job_unknown_kinds, (queues, kinds))
        return [UnknownKind(str(q), str(k), int(n)) for q, k, n in rows]

    # -- the admin API (sql/admin.sql) ------------------------------------------------------------

    async def job_list(
        self,
        job_filter: JobFilter,
        sort: str,
        after: tuple[int, Any] | None,
        limit: int,
    ) -> list[JobInfo]:
        """Return a page of jobs matching ``job_filter`` in ``sort`` order.

        ``after``: the id and due time of the previous page's last row (``None``: first page).
        """
        statement = {
            "-id": self._q.job_list_id_desc,
            "id": self._q.job_list_id_asc,
            "due": self._q.job_list_due_asc,
            "-due": self._q.job_list_due_desc,
        }[sort]
        last_id, last_due = after if after is not None else (None, None)
        rows = await self._query(statement, (*job_filter.params(), last_id, last_due, limit))
        return [job_info(row) for row in rows]

    async def job_filter_ids(
        self, job_filter: JobFilter, statuses: list[str], after_id: int, limit: int
    ) -> list[int]:
        """Return the ids of up to ``limit`` jobs matching the filter in ``statuses``."""
        rows = await self._query(
            self._q.job_filter_ids, (*job_filter.params(), after_id, statuses, limit)
        )
        return [int(row[0]) for row in rows]

    async def job_filter_count(self, job_filter: JobFilter, statuses: list[str]) -> int:
        """Return how many jobs match the filter in ``statuses``."""
        rows = await self._query(self._q.job_filter_count, (*job_filter.params(), statuses))
        return int(rows[0][0])

    async def job_retry_many(self, ids: Sequence[int], statuses: Sequence[str]) -> list[ActionRow]:
        """Retry jobs ``ids`` that are in ``statuses`` now; one row per id found."""
        rows = await self._query(
            self._q.job_retry_many, (list(ids), self.settings.channel, list(statuses))
        )
        return action_rows(rows)

    async def job_cancel_many(self, ids: Sequence[int], statuses: Sequence[str]) -> list[ActionRow]:
        """Cancel jobs ``ids`` in ``statuses`` (ask running ones to stop); a row per id found."""
        rows = await self._query(
            self._q.job_cancel_many, (list(ids), self.settings.channel, list(statuses))
        )
        return action_rows(rows)

    async def job_delete_many(self, ids: Sequence[int], statuses: Sequence[str]) -> list[ActionRow]:
        """Delete jobs ``ids`` in ``statuses`` (never running ones); one row per id found."""
        rows = await self._query(self._q.job_delete_many, (list(ids), list(statuses)))
        return action_rows(rows)

    async def job_purge(
        self, older_than: float, queues: list[str] | None, statuses: list[str], limit: int
    ) -> int:
        """Delete up to ``limit`` jobs finished more than ``older_than`` seconds ago; how many."""
        rows = await self._query(self._q.job_purge, (older_than, queues, statuses, limit))
        return len(rows)

    async def job_purge_count(
        self, older_than: float, queues: list[str] | None, statuses: list[str]
    ) -> int:
        """Return how many jobs :meth:`job_purge` would delete in all."""
        rows = await self._query(self._q.job_purge_count, (older_than, queues, statuses))
        return int(rows[0][0])

    async def job_stats(self, queues: list[str] | None, completed: bool) -> list[StatRow]:
        """Return the job counts per queue, kind and state (``completed`` only if asked)."""
        return stat_rows(await self._query(self._q.job_stats, (queues, completed)))

    async def queue_list(self) -> list[QueueRow]:
        """Return every queue with a row (paused now, or once)."""
        rows = await self._query(self._q.queue_list)
        return [QueueRow(str(name), paused_at, updated_at) for name, paused_at, updated_at in rows]

    async def queue_known_names(self) -> list[str]:
        """Return every queue that has a row, a worker serving it, or unfinished jobs."""
        return [str(row[0]) for row in await self._query(self._q.queue_known_names)]

    async def queue_pause(self, queues: Sequence[str]) -> list[str]:
        """Pause ``queues``; return their names."""
        rows = await self._query(self._q.queue_pause, (list(queues),))
        return sorted(str(row[0]) for row in rows)

    async def queue_resume(self, queues: Sequence[str] | None) -> list[str]:
        """Resume ``queues`` (``None``: all) and wake their workers; return those resumed."""
        rows = await self._query(
            self._q.queue_resume,
            (None if queues is None else list(queues), self.settings.channel),
        )
        return [str(row[0]) for row in rows]

    async def worker_list(self) -> list[WorkerInfo]:
        """Return every registered worker process, with the jobs it runs."""
        instances = await self._query(self._q.instance_list)
        running = running_jobs(await self._query(self._q.job_running_list))
        return workers_build(instances, running)

    # -- the web dashboard (sql/web.sql) ----------------------------------------------------

    async def session_read_limits(self, timeout_ms: int) -> None:
        """Make the open transaction read only, each statement cancelled after ``timeout_ms``."""
        await self._query(self._q.session_read_limits, (str(int(timeout_ms)),))

    async def job_finished_per_minute(self, minutes: int) -> list[tuple[datetime, int, int, int]]:
        """Return the jobs finished in each of the last ``minutes`` minutes, oldest first.

        One ``(minute, completed, failed, cancelled)`` per minute, the current one last.
        """
        rows = await self._query(self._q.job_finished_per_minute, (minutes,))
        return [(row[0], int(row[1]), int(row[2]), int(row[3])) for row in rows]

    async def web_activity(self) -> tuple[object, ...]:
        """Return a value that changes when jobs, queues, periodic entries or workers change.

        Jobs added, started or finished; queues or periodic entries paused or resumed; worker
        processes that come, go or change leader.
        """
        rows = await self._query(self._q.web_activity)
        return tuple(rows[0])
