"""Testing jobs: :class:`AsyncQueueTester` and the functions it is built on.

Written once, for asyncio, in pgqueue/_async/testing.py; the ``QueueTester`` of
pgqueue/_sync/testing.py is generated from it. Import both from :mod:`pgqueue.testing`, which
documents them (and docs/testing.md shows them at work).

Every job run here goes through the worker's own path, ``job_run`` of the runtime's executor:
built from its stored arguments, wrapped by the client's tracer, its ``process`` called with
the job's timeout, its end turned into an outcome as a worker's is. ``drain`` and the inline
mode claim and record on the client's own driver, so they also work on a client bound to a
transaction that the test rolls back.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager, suppress
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from ..enqueue import prepare
from ..errors import ConfigurationError, DatabaseError
from ..execution import ClaimedJob, Running, StuckRuns, read_options
from ..jobs import JobHandle, Worker, WorkerRegistry
from ..options import JobOptions
from ..records import JobInfo, JobResult, job_result
from ..runtime_config import RuntimeConfig
from ..settings import Settings
from ..store_codec import InstanceIdentity
from .client import AsyncClient
from .compat import JobPool
from .driver import AsyncDriver
from .runtime.executor import job_emit_finished, job_emit_started, job_run
from .store import AsyncStore

__all__ = [
    "DRAIN_MAX_RUNS",
    "AsyncQueueTester",
    "assert_enqueued",
    "drain",
    "enqueued_jobs",
    "perform_job",
    "refute_enqueued",
]

Mode = Literal["manual", "inline"]
"""``manual``: enqueued jobs wait for ``drain``; ``inline``: each enqueue runs its jobs at once."""

DRAIN_MAX_RUNS = 10_000
"""How many runs ``drain`` makes, without a ``limit``, before it decides a job loops."""

# Lines of the listing in an assertion's message; more jobs are counted, not listed.
_LISTED = 20

KindSpec = type[Worker] | str
"""A job kind: its ``Worker`` class, or the kind's name."""


def _kind_names(kind: KindSpec | Iterable[KindSpec] | None) -> list[str] | None:
    if kind is None:
        return None
    names = []
    for item in [kind] if isinstance(kind, str | type) else kind:
        name = item.kind if isinstance(item, type) and issubclass(item, Worker) else item
        if not isinstance(name, str):
            raise TypeError(f"kind must be a pgqueue.Worker subclass or a kind name, got {item!r}")
        names.append(name)
    return names


def _describe(jobs: list[JobInfo]) -> str:
    lines = [
        f"  #{job.id} {job.kind} (queue {job.queue!r}, {job.status}) args "
        + json.dumps(job.payload, ensure_ascii=False, sort_keys=True)
        for job in jobs[:_LISTED]
    ]
    if len(jobs) > _LISTED:
        lines.append(f"  ... and {len(jobs) - _LISTED} more")
    return "\n".join(lines)


def _criteria(
    kinds: list[str] | None, queue: Any, args: Mapping[str, Any] | None, jobs: str
) -> str:
    parts = [f"pending {jobs}"]
    if kinds is not None:
        parts.append(f"of kind {' or '.join(repr(k) for k in kinds)}")
    if queue is not None:
        parts.append(f"in queue {queue!r}")
    if args is not None:
        parts.append(f"with args containing {json.dumps(args, ensure_ascii=False)}")
    return " ".join(parts)


class AsyncQueueTester:
    """Runs and inspects the jobs of one :class:`AsyncClient` in a test.

    ``mode="manual"`` (the default): enqueued jobs wait until :meth:`drain` runs them.
    ``mode="inline"``: each ``add_job``, ``add_jobs``, ``add_job_with_tx`` and
    ``add_jobs_with_tx`` of the client runs the jobs it inserted before it returns, on the
    driver it inserted them on (in the caller's transaction, for the ``_with_tx`` calls). A job
    that fails does not make the enqueue raise, as with a worker: its :class:`JobResult` (in
    :attr:`results`) says how it ended. With ``propagate=True`` the enqueue raises what the job
    raised, when the job ended ``retry`` or ``failed`` because of an exception.

    ``registry`` (default: the client's) says how to build the jobs; ``config`` gives the
    retry backoff. Call :meth:`close` (the pytest fixtures do) to take the inline hook off the
    client. It can also be used as a context manager (``with tester:``) that does so on exit.
    """

    def __init__(
        self,
        client: AsyncClient,
        *,
        mode: Mode = "manual",
        registry: WorkerRegistry | None = None,
        config: RuntimeConfig | None = None,
        propagate: bool = False,
    ) -> None:
        if not isinstance(client, AsyncClient):
            raise TypeError(
                f"{type(self).__name__} needs a {AsyncClient.__name__}, got {type(client).__name__}"
            )
        self.client = client
        self.registry = registry if registry is not None else client.registry
        self.config = config or RuntimeConfig()
        self.propagate = propagate
        self.results: list[JobResult] = []
        """Every run this tester made (inline and :meth:`drain`), in the order they ended."""
        self._hook = self._run_inserted
        self._mode: Mode = "manual"
        self.mode = mode

    @property
    def mode(self) -> Mode:
        """``"manual"`` or ``"inline"``; settable (switching to inline needs a registry)."""
        return self._mode

    @mode.setter
    def mode(self, mode: Mode) -> None:
        if mode not in ("manual", "inline"):
            raise ValueError(f"mode must be 'manual' or 'inline', got {mode!r}")
        client = self.client
        if mode == "inline":
            self._require_registry()
            if client.insert_hook is not None and client.insert_hook is not self._hook:
                raise ConfigurationError(
                    "the client already has an insert_hook (another tester in inline mode?)"
                )
            client.insert_hook = self._hook
        elif client.insert_hook is self._hook:
            client.insert_hook = None
        self._mode = mode

    def close(self) -> None:
        """Go back to manual mode: the client's enqueues no longer run jobs."""
        self.mode = "manual"

    def __enter__(self) -> AsyncQueueTester:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _require_registry(self) -> WorkerRegistry:
        if self.registry is None:
            raise ConfigurationError(
                "running jobs needs a registry: build the client with "
                "registry=WorkerRegistry(...), or pass registry= to the tester"
            )
        return self.registry

    # -- running jobs -------------------------------------------------------------------------

    async def perform_job(
        self,
        job_or_class: Worker | type[Worker],
        args: Mapping[str, Any] | None = None,
        *,
        attempt: int = 1,
        max_attempts: int | None = None,
        timeout: float | timedelta | None = None,
    ) -> JobResult:
        """:func:`perform_job` with this tester's registry and config (no database)."""
        return await perform_job(
            job_or_class,
            args,
            attempt=attempt,
            max_attempts=max_attempts,
            timeout=timeout,
            registry=self.registry,
            config=self.config,
        )

    async def drain(
        self,
        queue: str | Iterable[str] | None = None,
        *,
        with_scheduled: bool = False,
        limit: int | None = None,
    ) -> list[JobResult]:
        """Run the due jobs of ``queue`` (a name, several, or ``None``: every queue) until none is.

        One at a time, in the order a worker claims them (priority, then due time, then id),
        queue after queue in name order, the queue list read again after each job: jobs that
        the jobs enqueue run too. Each outcome is recorded as a worker records it, so a job
        that fails is scheduled for its retry, and that retry is not due yet.

        With ``with_scheduled=True``, whenever nothing is due the scheduled jobs (delayed
        enqueues, retries, snoozes) are made due, keeping their order, and the drain goes on:
        a failing job runs until it fails for good. ``limit`` stops after that many runs;
        without it, :data:`DRAIN_MAX_RUNS` runs raise ``RuntimeError`` (a job that snoozes or
        enqueues itself forever). Paused queues are not drained. Returns the results in run
        order (also appended to :attr:`results`).
        """
        registry = self._require_registry()
        kinds = registry.kinds()
        queues = None if queue is None else [queue] if isinstance(queue, str) else list(queue)
        cap = DRAIN_MAX_RUNS if limit is None else limit
        store = AsyncStore(self.client.driver, self.client.settings)
        results: list[JobResult] = []
        async with self._session(store, {q: 1 for q in queues or ()}) as (instance_id, pool):
            made_due = False
            while len(results) < cap:
                job = await self._claim_next(store, queues, kinds, instance_id)
                if job is None:
                    if with_scheduled and not made_due and await store.job_make_due(queues, kinds):
                        made_due = True  # once more only, if that claim finds nothing
                        continue
                    return results
                made_due = False
                results.append(await self._run(store, job, instance_id, pool))
        if limit is None:
            raise RuntimeError(
                f"drain ran {DRAIN_MAX_RUNS} jobs and stopped: a job that snoozes or enqueues "
                "itself forever? Pass limit= to run a given number of jobs"
            )
        return results

    async def _claim_next(
        self,
        store: AsyncStore,
        queues: list[str] | None,
        kinds: list[str],
        instance_id: uuid.UUID,
    ) -> ClaimedJob | None:
        names = queues if queues is not None else await store.queue_known_names()
        for name in names:
            claim = await store.job_claim(name, kinds, 1, instance_id, uuid.uuid4(), _worker_id())
            if claim.jobs:
                return claim.jobs[0]
        return None

    async def _run_inserted(self, driver: AsyncDriver, handles: list[JobHandle]) -> None:
        """Run the jobs an enqueue just inserted, on ``driver`` (the inline mode's insert hook)."""
        ids = [handle.id for handle in handles if handle.inserted]
        if not ids:
            return
        kinds = self._require_registry().kinds()
        store = AsyncStore(driver, self.client.settings)
        async with self._session(store, {}) as (instance_id, pool):
            jobs = await store.job_claim_by_ids(ids, kinds, instance_id, uuid.uuid4(), _worker_id())
            for job in jobs:
                result = await self._run(store, job, instance_id, pool)
                if self.propagate and result.exception is not None:
                    raise result.exception

    @asynccontextmanager
    async def _session(
        self, store: AsyncStore, queues: dict[str, int]
    ) -> AsyncIterator[tuple[uuid.UUID, JobPool]]:
        # A throwaway worker instance: claims name a live instance, and a leader elsewhere
        # would otherwise rescue the jobs while they run.
        registry = self._require_registry()
        instance_id = uuid.uuid4()
        identity = InstanceIdentity(
            instance_id, socket.gethostname(), os.getpid(), queues, registry.kinds()
        )
        await store.instance_register(identity)
        pool = JobPool(1)
        try:
            yield instance_id, pool
        except BaseException:
            # in a transaction the error aborted, this fails too: the error says more
            with suppress(DatabaseError):
                await store.instance_unregister(instance_id)
            raise
        else:
            await store.instance_unregister(instance_id)
        finally:
            pool.shutdown()

    async def _run(
        self, store: AsyncStore, job: ClaimedJob, instance_id: uuid.UUID, pool: JobPool
    ) -> JobResult:
        """Run one claimed job as a worker does, record its outcome, return its result."""
        registry = self._require_registry()
        events = self.client.events
        running = Running(job)
        job_emit_started(events, running, instance_id)
        outcome = await job_run(running, registry, self.config, pool, StuckRuns(), events.tracer)
        job_emit_finished(events, running, outcome, instance_id)
        await store.job_finish_many([(job, outcome)])
        result = job_result(job.id, job, outcome)
        self.results.append(result)
        return result

    # -- what is enqueued ---------------------------------------------------------------------

    async def enqueued_jobs(
        self,
        kind: KindSpec | Iterable[KindSpec] | None = None,
        queue: str | Iterable[str] | None = None,
        args: Mapping[str, Any] | None = None,
        status: str | Iterable[str] | None = "pending",
    ) -> list[JobInfo]:
        """Return the jobs matching every filter given, oldest first.

        ``kind``: a ``Worker`` class or a kind name (or a list); ``args``: a JSON object the
        arguments contain (``{"to": "a@example.com"}`` matches whatever else they hold);
        ``status``: ``"pending"`` (due or scheduled, the default), another status, a list,
        or ``None`` for any.
        """
        found: list[JobInfo] = []
        cursor = None
        while True:
            page = await self.client.list_jobs(
                kind=_kind_names(kind),
                queue=queue,
                args=args,
                status=status,
                sort="id",
                limit=1000,
                cursor=cursor,
            )
            found += page.jobs
            cursor = page.next_cursor
            if cursor is None:
                return found

    async def assert_enqueued(
        self,
        *,
        kind: KindSpec | Iterable[KindSpec] | None = None,
        queue: str | Iterable[str] | None = None,
        args: Mapping[str, Any] | None = None,
        count: int | None = None,
    ) -> list[JobInfo]:
        """Assert that pending jobs match (``count`` of them exactly, if given); return them.

        The ``AssertionError`` says what was expected and lists the pending jobs there are.
        """
        matching = await self.enqueued_jobs(kind, queue, args)
        if (count is None and matching) or (count is not None and len(matching) == count):
            return matching
        kinds = _kind_names(kind)
        if count is None:
            expected = "a " + _criteria(kinds, queue, args, "job")
        else:
            expected = f"{count} " + _criteria(kinds, queue, args, "job" if count == 1 else "jobs")
        pending = await self.enqueued_jobs()
        listing = "pending jobs:\n" + _describe(pending) if pending else "no job is pending"
        raise AssertionError(f"expected {expected}, found {len(matching) or 'none'}\n{listing}")

    async def refute_enqueued(
        self,
        *,
        kind: KindSpec | Iterable[KindSpec] | None = None,
        queue: str | Iterable[str] | None = None,
        args: Mapping[str, Any] | None = None,
    ) -> None:
        """Assert that no pending job matches; the ``AssertionError`` lists those that do."""
        matching = await self.enqueued_jobs(kind, queue, args)
        if matching:
            what = _criteria(_kind_names(kind), queue, args, "job")
            raise AssertionError(
                f"expected no {what}, found {len(matching)}:\n{_describe(matching)}"
            )


def _worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:pgqueue.testing"


async def perform_job(
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
    """
    if isinstance(job_or_class, type):
        if not issubclass(job_or_class, Worker):
            raise TypeError(f"expected a pgqueue.Worker subclass, got {job_or_class!r}")
        job = job_or_class.from_payload(dict(args or {}))
    elif args is not None:
        raise TypeError("pass args only with a job class: a job instance carries its own")
    else:
        job = job_or_class
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise ValueError(f"attempt must be an int from 1, got {attempt!r}")
    if isinstance(timeout, int | float):
        timeout = timedelta(seconds=timeout)
    options = None
    if max_attempts is not None or timeout is not None:
        options = JobOptions(max_attempts=max_attempts, timeout=timeout)
    prepared = prepare(job, options, settings=Settings(), registry=registry)
    claimed = ClaimedJob(
        id=0,
        kind=prepared.kind,
        queue=prepared.queue,
        payload_text=prepared.payload,
        attempt=attempt,
        max_attempts=prepared.max_attempts,
        scheduled_for=datetime.now(UTC),
        priority=prepared.priority,
        lease=None,
        job_id=prepared.key,
    )
    read_options(claimed, prepared.options)
    builder = registry if registry is not None else WorkerRegistry(type(job))
    pool = JobPool(1)
    try:
        outcome = await job_run(
            Running(claimed), builder, config or RuntimeConfig(), pool, StuckRuns()
        )
    finally:
        pool.shutdown()
    return job_result(None, claimed, outcome)


async def drain(
    client: AsyncClient,
    queue: str | Iterable[str] | None = None,
    *,
    with_scheduled: bool = False,
    limit: int | None = None,
) -> list[JobResult]:
    """Run the due jobs of ``client`` until none is: :meth:`AsyncQueueTester.drain`."""
    tester = AsyncQueueTester(client)
    return await tester.drain(queue, with_scheduled=with_scheduled, limit=limit)


async def enqueued_jobs(
    client: AsyncClient,
    kind: KindSpec | Iterable[KindSpec] | None = None,
    queue: str | Iterable[str] | None = None,
    args: Mapping[str, Any] | None = None,
    status: str | Iterable[str] | None = "pending",
) -> list[JobInfo]:
    """Return ``client``'s jobs matching the filters: :meth:`AsyncQueueTester.enqueued_jobs`."""
    return await AsyncQueueTester(client).enqueued_jobs(kind, queue, args, status)


async def assert_enqueued(
    client: AsyncClient,
    *,
    kind: KindSpec | Iterable[KindSpec] | None = None,
    queue: str | Iterable[str] | None = None,
    args: Mapping[str, Any] | None = None,
    count: int | None = None,
) -> list[JobInfo]:
    """Assert that pending jobs match: :meth:`AsyncQueueTester.assert_enqueued`."""
    tester = AsyncQueueTester(client)
    return await tester.assert_enqueued(kind=kind, queue=queue, args=args, count=count)


async def refute_enqueued(
    client: AsyncClient,
    *,
    kind: KindSpec | Iterable[KindSpec] | None = None,
    queue: str | Iterable[str] | None = None,
    args: Mapping[str, Any] | None = None,
) -> None:
    """Assert that no pending job matches: :meth:`AsyncQueueTester.refute_enqueued`."""
    await AsyncQueueTester(client).refute_enqueued(kind=kind, queue=queue, args=args)
