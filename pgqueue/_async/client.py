"""``AsyncClient``: enqueue jobs and manage the schema.

Written once, for asyncio, in pgqueue/_async/client.py; the sync client in
pgqueue/_sync/client.py is generated from it by tools/async_to_sync.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Literal, Protocol

from typing_extensions import Unpack

from ..adapter_registry import (
    adapter_for_native,
    connect_options,
    load_adapter,
    resolve_driver_name,
)
from ..enqueue import PreparedJob, call_options, prepare
from ..errors import (
    ConfigurationError,
    DuplicateJob,
    DuplicateJobError,
    InvalidJobOptions,
    JobIdConflict,
)
from ..events import EventHub, JobsEnqueued, LogSubscriber
from ..frameworks import native_transaction
from ..jobs import JobHandle, Worker, WorkerRegistry
from ..options import JobOptionKwargs, JobOptions
from ..runtime_config import RuntimeConfig
from ..settings import Settings
from ..tracing import NO_SEND, SendSpan
from .admin import AsyncAdmin
from .driver import AsyncDriver
from .periodic_admin import AsyncPeriodicAdmin
from .runtime import AsyncRuntime
from .schema import schema_migrate, schema_uninstall, schema_version
from .store import AsyncStore

__all__ = ["AsyncClient", "AsyncInsertHook"]

# Rows per job_insert_many statement: large enough to amortise the round trip, small enough to
# keep the arrays of one statement to a few MB.
INSERT_CHUNK = 5000
# From this many jobs, add_jobs loads them with COPY when the driver can. Measured, not guessed
# (`make bench-copy-threshold`, docs/benchmarks.md): COPY was faster in every driver mode at
# 1,000 jobs and above (one tie at 2,000), the INSERT of arrays at 500 on asyncpg.
COPY_MIN = 1000

JobSpec = Worker | tuple[Worker, JobOptions | None]
"""An item of ``add_jobs``: a job, or a job with options for that job alone."""

OnConflict = Literal["raise", "ignore"]
"""What ``add_job`` does with a duplicate: raise, or return the existing job's handle."""


class AsyncInsertHook(Protocol):
    """What :attr:`AsyncClient.insert_hook` holds: called after an enqueue's insert."""

    async def __call__(self, driver: AsyncDriver, handles: list[JobHandle]) -> None:
        """Act on ``handles`` (those with ``inserted=False`` are duplicates), on ``driver``.

        ``driver`` is the one the jobs were inserted on: the client's own, or the caller's
        transaction for ``add_job_with_tx``.
        """
        ...


def _check_on_conflict(value: str) -> None:
    if value not in ("raise", "ignore"):
        raise InvalidJobOptions(f"on_conflict must be 'raise' or 'ignore', got {value!r}")


class _Refused(Exception):
    """Raised inside a keyed insert's transaction to roll it back: the job is a duplicate."""

    def __init__(self, conflict: str) -> None:
        super().__init__(conflict)
        self.conflict = conflict


def _conflict(error: DuplicateJobError, existing: JobHandle | None, on_conflict: str) -> JobHandle:
    if existing is not None and on_conflict in ("ignore", "report"):
        return existing
    raise error


class AsyncClient(AsyncAdmin, AsyncPeriodicAdmin):
    """Enqueues and runs jobs through an :class:`AsyncDriver`, and answers the operator.

    Build one with :meth:`connect` from a URL or a driver-native pool/connection, or pass a
    driver to the constructor. ``registry``, when given, restricts enqueueing to known kinds
    and is what :meth:`start` runs. Use it as a context manager (``with``; ``async with`` on
    the asyncio side), or call :meth:`close`. The admin calls (``list_jobs``,
    ``retry_jobs``, ``pause_queue``, ``queue_stats``...) are inherited from
    :class:`~pgqueue._async.admin.AsyncAdmin`, the periodic entries' (``cron_list``,
    ``cron_pause``, ``cron_trigger``...) from ``AsyncPeriodicAdmin``.
    """

    def __init__(
        self,
        driver: AsyncDriver,
        *,
        registry: WorkerRegistry | None = None,
        settings: Settings | None = None,
        poll_only: bool = False,
    ) -> None:
        self.driver = driver
        self.registry = registry
        self.settings = settings or Settings()
        self.poll_only = poll_only
        """True: the workers never LISTEN (they poll every ``poll_interval``) and elect their
        leader by a lease in the instances table instead of a session advisory lock. Set by
        :meth:`connect` for ``pgbouncer=True`` without ``listen_dsn``; see docs/deployment.md."""
        self._store = AsyncStore(driver, self.settings)
        self._runtime: AsyncRuntime | None = None
        self.events = EventHub()
        """Where the client and its workers emit :mod:`pgqueue.events`; subscribe here."""
        self.log_subscription = self.events.subscribe(LogSubscriber(), *LogSubscriber.TYPES)
        """Call it to stop the default logging of job failures, rescues and leadership."""
        self.insert_hook: AsyncInsertHook | None = None
        """Called after every enqueue with the driver and the handles (``None``: nothing is).

        ``pgqueue.testing``'s inline mode sets it to run the jobs at once. When set, an
        enqueue returns only after the hook did; what it raises, the enqueue raises.
        """

    @classmethod
    async def connect(
        cls,
        target: str | object | None = None,
        *,
        driver: str | None = None,
        registry: WorkerRegistry | None = None,
        settings: Settings | None = None,
        pgbouncer: bool | None = None,
        listen_dsn: str | None = None,
        poll_only: bool | None = None,
    ) -> AsyncClient:
        """Create a client from a database URL or a driver-native pool or connection.

        ``target`` is a ``postgresql://`` URL (default: ``$PGQUEUE_DSN``, then
        ``$DATABASE_URL``), or an object of the driver library such as a psycopg
        ``AsyncConnectionPool`` (of the same sync or asyncio flavour as the client), which the
        client uses but never closes. ``driver`` names the driver (default: the URL's
        ``postgresql+<driver>://`` scheme, then ``$PGQUEUE_DRIVER``, then ``"psycopg"``).

        Behind a transaction pooler (PgBouncer ``pool_mode = transaction``): ``pgbouncer=True``
        makes the pool pgqueue opens prepare no statements (a pool handed in must be set up
        so, or it is refused), and ``listen_dsn`` is a URL straight to PostgreSQL for the two
        sessions that must outlive a transaction: the LISTEN session and the leader's
        advisory lock. Without ``listen_dsn``, ``pgbouncer=True`` means ``poll_only``: no
        LISTEN (workers poll every ``poll_interval``) and a leader elected by a lease.
        ``poll_only=True`` asks for that anywhere. Left out, ``pgbouncer`` and ``listen_dsn``
        come from ``$PGQUEUE_PGBOUNCER`` and ``$PGQUEUE_LISTEN_DSN``. docs/deployment.md says
        more.
        """
        options = connect_options(pgbouncer=pgbouncer, listen_dsn=listen_dsn)
        if target is None or isinstance(target, str):
            url = target or os.environ.get("PGQUEUE_DSN") or os.environ.get("DATABASE_URL")
            if not url:
                raise ConfigurationError(
                    "no database to connect to: pass a URL such as "
                    "postgresql://user@localhost/app, or set PGQUEUE_DSN"
                )
            name, connect_url = resolve_driver_name(url, driver)
            assert connect_url is not None  # an adapter reads a URL as a URL
            drv = await load_adapter(name).async_connect(connect_url, **options)
        else:
            drv = adapter_for_native(target).async_from_native(target, **options)
        if poll_only is None:
            poll_only = "pgbouncer" in options and "session_url" not in options
        return cls(drv, registry=registry, settings=settings, poll_only=poll_only)

    async def close(self) -> None:
        """Stop the workers if running, then close what the client's driver opened.

        Pools or connections handed in stay open.
        """
        await self.stop()
        await self.driver.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- schema -----------------------------------------------------------------------------

    async def migrate(self) -> list[int]:
        """Create or upgrade pgqueue's tables; return the versions applied now.

        Idempotent and safe to run from several processes at once.
        """
        return await schema_migrate(self.driver, self.settings)

    async def schema_version(self) -> int | None:
        """Return the installed schema version, or ``None`` when pgqueue is not installed."""
        return await schema_version(self.driver, self.settings)

    async def uninstall(self) -> None:
        """Drop pgqueue's tables, with every job in them; the opposite of :meth:`migrate`.

        Only pgqueue's own tables (and the function its trigger calls) go. The schema goes too
        when it is not ``public`` and nothing else is left in it. Stop every worker first.
        """
        await schema_uninstall(self.driver, self.settings)

    # -- running workers --------------------------------------------------------------------

    @property
    def runtime(self) -> AsyncRuntime | None:
        """The running worker runtime, if :meth:`start` was called."""
        return self._runtime

    async def start(
        self,
        queues: Mapping[str, int] | None = None,
        *,
        config: RuntimeConfig | None = None,
        until_empty: bool = False,
    ) -> None:
        """Start running jobs of the registry's kinds, in the background.

        ``queues`` maps queue names to how many jobs of that queue may run at once (default
        ``{"default": 10}``). Returns once the workers are started; :meth:`stop` ends them.
        With ``until_empty=True`` the workers also request their own stop once their queues
        are empty, as :meth:`run` describes: ``runtime.wait_stopping()`` returns then, and
        :meth:`stop` still ends them.
        """
        if self.registry is None:
            raise ConfigurationError(
                "this client has no registry: create it with registry=WorkerRegistry(...) to "
                "tell it which job classes to run"
            )
        if self._runtime is not None:
            raise ConfigurationError("the workers are already started: call stop() first")
        runtime = AsyncRuntime(
            self.driver,
            self.registry,
            self.settings,
            queues or {"default": 10},
            config or RuntimeConfig(),
            events=self.events,
            until_empty=until_empty,
            poll_only=self.poll_only,
        )
        # set first: a Ctrl-C the moment start() returns still finds the runtime to stop
        self._runtime = runtime
        try:
            await runtime.start()
        except BaseException:
            self._runtime = None
            raise

    async def stop(self, timeout: float | None = None) -> None:
        """Stop the workers: no new claims, running jobs get ``timeout`` seconds to finish.

        Jobs still running after that are cut off and go back to pending without losing an
        attempt. Idempotent; does nothing when the workers are not running.
        """
        runtime = self._runtime
        if runtime is None:
            return
        await runtime.stop(timeout)
        self._runtime = None

    async def run(
        self,
        queues: Mapping[str, int] | None = None,
        *,
        config: RuntimeConfig | None = None,
        until_empty: bool = False,
    ) -> int:
        """Start the workers and block until a stop is requested, then stop them.

        With ``until_empty=True`` the workers stop by themselves as soon as no job of
        ``queues`` (of the registry's kinds) is due and none is running or waiting for its
        outcome to be written in this client; ``run`` returns after that graceful stop, every
        outcome written. Jobs scheduled for later, retries waiting out their backoff among
        them, are not waited for (like procrastinate's ``run_worker(wait=False)``); a job
        retried or snoozed with no delay is due at once, so it runs, and so do the jobs that
        its jobs enqueue, due now, in these queues. A paused queue has nothing due. A stop
        requested meanwhile (``runtime.request_stop()``, Ctrl-C) ends it as usual.

        Returns how many runs of jobs it recorded the outcome of: runs that completed, were
        retried, failed, snoozed or were cancelled (a run cut off by a stop and handed back
        to pending does not count). A ``KeyboardInterrupt`` or ``SystemExit`` raised by a
        job's ``process`` stops the workers at once and is raised again from here once they
        have stopped.
        """
        await self.start(queues, config=config, until_empty=until_empty)
        runtime = self._runtime
        assert runtime is not None
        try:
            while not await runtime.wait_stopping(0.5):
                pass
        finally:
            await self.stop(0.0 if runtime._immediate else None)
        if runtime.fatal is not None:
            raise runtime.fatal
        return runtime.runs_recorded

    # -- enqueue ----------------------------------------------------------------------------

    def _prepare(self, job: Worker, options: JobOptions | None) -> PreparedJob:
        return prepare(job, options, settings=self.settings, registry=self.registry)

    async def add_job(
        self,
        job: Worker,
        *,
        options: JobOptions | None = None,
        on_conflict: OnConflict = "raise",
        **option_kwargs: Unpack[JobOptionKwargs],
    ) -> JobHandle:
        """Enqueue one job in its own transaction and return its handle.

        Keyword options override ``options``, which overrides the job class's ``job_options``
        and the client's defaults; see :class:`JobOptions` for each option. A ``job_id`` that is
        taken raises :class:`JobIdConflict`, a held ``unique`` lock :class:`DuplicateJob`; with
        ``on_conflict="ignore"`` the existing job's handle is returned instead
        (``inserted=False``).
        """
        _check_on_conflict(on_conflict)
        prepared = self._prepare(job, call_options(options, option_kwargs))
        with self._send([prepared], False) as send:
            if prepared.keyed:
                handle = await self._insert_keyed(self.driver, prepared, on_conflict)
            else:
                handle = (await self._insert(self.driver, [prepared]))[0]
            send.sent((handle,))
        if self.events.wants(JobsEnqueued) and handle.inserted:
            self.events.emit(JobsEnqueued((handle,)))
        if self.insert_hook is not None:
            await self.insert_hook(self.driver, [handle])
        return handle

    async def add_job_with_tx(
        self,
        tx: object,
        job: Worker,
        *,
        options: JobOptions | None = None,
        on_conflict: OnConflict = "raise",
        **option_kwargs: Unpack[JobOptionKwargs],
    ) -> JobHandle:
        """Enqueue one job inside the caller's transaction ``tx``.

        ``tx`` is the driver library's connection (or session) with the transaction open. The
        job is visible to workers only once the caller commits; a rollback leaves nothing (nor
        its unique lock). pgqueue never commits or rolls back ``tx``, and a refused duplicate
        leaves ``tx`` usable.
        """
        _check_on_conflict(on_conflict)
        prepared = self._prepare(job, call_options(options, option_kwargs))
        driver = self._tx_driver(tx)
        with self._send([prepared], True) as send:
            if prepared.keyed:
                handle = await self._insert_keyed(driver, prepared, on_conflict)
            else:
                handle = (await self._insert(driver, [prepared]))[0]
            send.sent((handle,))
        if self.events.wants(JobsEnqueued) and handle.inserted:
            self.events.emit(JobsEnqueued((handle,), in_transaction=True))
        if self.insert_hook is not None:
            await self.insert_hook(driver, [handle])
        return handle

    async def add_jobs(
        self, jobs: Iterable[JobSpec], *, options: JobOptions | None = None
    ) -> list[JobHandle]:
        """Enqueue many jobs in one transaction (all or none); return handles in input order.

        Each item is a job or a ``(job, JobOptions)`` pair; ``options`` applies to every item
        under its own options. Any number of jobs: large batches go through ``COPY`` when the
        driver offers it, else in chunks of array parameters, so PostgreSQL's bind-parameter
        limit never applies.
        """
        prepared = self._prepare_many(jobs, options)
        with self._send(prepared, False) as send:
            if any(job.keyed for job in prepared):
                async with self.driver.with_tx() as tx:
                    handles = await self._insert_mixed(tx, prepared)
            elif len(prepared) >= COPY_MIN and self._store.supports_copy:
                handles = await self._store.job_copy(prepared)
            else:
                handles = await self._insert(self.driver, prepared)
            send.sent(handles)
        self._emit_enqueued(handles, False)
        if self.insert_hook is not None:
            await self.insert_hook(self.driver, handles)
        return handles

    async def add_jobs_with_tx(
        self, tx: object, jobs: Iterable[JobSpec], *, options: JobOptions | None = None
    ) -> list[JobHandle]:
        """Enqueue many jobs inside the caller's transaction ``tx`` (like add_job_with_tx).

        All or nothing: when the jobs take several statements they run in a savepoint (or, on
        a connection in autocommit mode outside a transaction, in a transaction of their own),
        so a failure part-way leaves none of them in ``tx``.
        """
        prepared = self._prepare_many(jobs, options)
        driver = self._tx_driver(tx)
        with self._send(prepared, True) as send:
            if any(job.keyed for job in prepared):
                async with driver.with_tx() as savepoint:
                    handles = await self._insert_mixed(savepoint, prepared)
            else:
                handles = await self._insert(driver, prepared)
            send.sent(handles)
        self._emit_enqueued(handles, True)
        if self.insert_hook is not None:
            await self.insert_hook(driver, handles)
        return handles

    def _send(self, prepared: Sequence[PreparedJob], in_transaction: bool) -> SendSpan:
        # the enqueue's span when a tracer is installed (pgqueue.otel); it writes the trace
        # context into the jobs' options before they are inserted
        tracer = self.events.tracer
        if tracer is None or not prepared:
            return NO_SEND
        return tracer.send(prepared, in_transaction)

    def _emit_enqueued(self, handles: list[JobHandle], in_transaction: bool) -> None:
        if self.events.wants(JobsEnqueued):
            inserted = [h for h in handles if h.inserted]
            if inserted:
                self.events.emit(JobsEnqueued(inserted, in_transaction))

    async def _insert_mixed(
        self, driver: AsyncDriver, jobs: Sequence[PreparedJob]
    ) -> list[JobHandle]:
        # Plain jobs in bulk, jobs with a job_id or unique lock one by one; duplicates are
        # reported in their handles (inserted=False), the rest is inserted.
        handles: list[JobHandle | None] = [None] * len(jobs)
        plain = [i for i, job in enumerate(jobs) if not job.keyed]
        if plain:
            inserted = await self._insert(driver, [jobs[i] for i in plain])
            for i, handle in zip(plain, inserted, strict=True):
                handles[i] = handle
        for i, job in enumerate(jobs):
            if job.keyed:
                handles[i] = await self._insert_keyed(driver, job, "report")
        return [h for h in handles if h is not None]

    async def _insert_keyed(
        self, driver: AsyncDriver, job: PreparedJob, on_conflict: str
    ) -> JobHandle:
        # The job insert and its unique lock run in one transaction: ours (add_job), or a
        # savepoint of the caller's (add_job_with_tx); on an autocommit connection outside any
        # transaction, a transaction of its own, so a refused duplicate is never, even for a
        # moment, a committed job that a worker could run. A refusal rolls that back: the
        # caller's transaction stays usable.
        try:
            async with self._store.on(driver).transaction() as tx:
                handle = await tx.job_insert_keyed(job)
                if handle is None:
                    raise _Refused("job_id")
                if job.unique_key is not None and not await tx.unique_lock_take(job, handle.id):
                    raise _Refused("unique")
        except _Refused as refused:
            return await self._refuse(driver, job, refused.conflict, on_conflict)
        return handle

    async def _refuse(
        self, driver: AsyncDriver, job: PreparedJob, conflict: str, on_conflict: str
    ) -> JobHandle:
        store = self._store.on(driver)
        error: DuplicateJobError
        if conflict == "job_id":
            existing = await store.job_by_key(job.key)
            error = JobIdConflict(
                f"a job with job_id {job.key!r} already exists: a job id stays taken until "
                "retention removes the finished job. Choose another job_id, or pass "
                "on_conflict='ignore' to get the existing job",
                existing,
            )
        else:
            existing = await store.job_by_unique_key(job.unique_key)
            error = DuplicateJob(
                f"an identical {job.kind!r} job (same queue, kind and arguments) holds "
                "its unique lock until it completes or the lock expires. Pass "
                "on_conflict='ignore' to get the existing job",
                existing,
            )
        return _conflict(error, existing, on_conflict)

    def _prepare_many(
        self, jobs: Iterable[JobSpec], options: JobOptions | None
    ) -> list[PreparedJob]:
        prepared = []
        for item in jobs:
            job, own = item if isinstance(item, tuple) else (item, None)
            merged = options.merged_with(own) if options is not None else own
            prepared.append(self._prepare(job, merged))
        return prepared

    def _tx_driver(self, tx: object) -> AsyncDriver:
        # A framework's connection object (Django's) stands for the library connection it wraps.
        obj = native_transaction(tx)
        return adapter_for_native(obj).async_wrap_transaction(obj)

    async def _insert(self, driver: AsyncDriver, jobs: Sequence[PreparedJob]) -> list[JobHandle]:
        store = self._store.on(driver)
        if len(jobs) == 1:
            return [await store.job_insert(jobs[0])]
        if len(jobs) <= INSERT_CHUNK:
            return await store.job_insert_many(jobs)
        # Several statements: one transaction (or savepoint, inside a caller's transaction)
        # keeps the batch all-or-nothing.
        handles: list[JobHandle] = []
        async with store.transaction() as tx:
            for start in range(0, len(jobs), INSERT_CHUNK):
                handles += await tx.job_insert_many(jobs[start : start + INSERT_CHUNK])
        return handles
