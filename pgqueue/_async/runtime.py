"""The worker runtime: claim, run, retry, heartbeat, lead, shut down.

Written once, for asyncio, in pgqueue/_async/runtime.py; the runtime on threads in
pgqueue/_sync/runtime.py is generated from it. One runtime per client, started by
``client.start()``. It runs:

- one fetch loop per queue, claiming up to the queue's free slots in one statement;
- one flusher, which writes how jobs ended in batches: a job's slot is free for the next claim
  as soon as its ``process`` returns, and one statement records many outcomes;
- one listener (a dedicated LISTEN session) that wakes the fetch loops and relays cancel
  requests, reconnecting with backoff (and re-checking the queues) when its session dies;
- a heartbeat loop that keeps this instance's row fresh and picks up missed cancel requests;
- a leader loop: whoever holds the leader advisory lock rescues the jobs of dead instances,
  removes finished jobs past retention and expires unique locks.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ConfigurationError, ConnectionLost, DatabaseError
from ..events import EventHub, LogSubscriber
from ..execution import (
    ClaimedJob,
    Outcome,
    Running,
    StuckRuns,
    is_coroutine_function,
    is_data_refusal,
    log_outcome,
    outcome_for_bad_payload,
    outcome_for_error,
    outcome_unrecordable,
    outcome_unrunnable,
    signal_stop,
)
from ..jobs import WorkerRegistry
from ..names import validate_queue
from ..runtime_config import RuntimeConfig
from ..settings import Settings
from ..store_codec import InstanceIdentity
from .compat import Event, JobPool, call_process, join, spawn, wait_all, wait_event
from .driver import AsyncAdvisoryLock, AsyncDriver
from .store import AsyncStore

__all__ = ["AsyncRuntime"]

logger = logging.getLogger("pgqueue")

# How long a listener wait may block, so the loop notices shutdown promptly.
_LISTEN_WAIT = 0.5
# After stop's timeout, how long cut-off jobs get to hand their job back.
_STOP_GRACE = 2.0
_IMMEDIATE_GRACE = 0.2
# Bound on maintenance rounds per leader tick, so one tick cannot run for ever.
_MAX_MAINTENANCE_ROUNDS = 20
# Most outcomes one job_finish_many statement records.
_FLUSH_MAX = 1000
# First pause before retrying a failed flush (doubling up to listener_reconnect_max).
_FLUSH_RETRY = 0.1


_RunKey = tuple[int, Any]  # (job id, lease)
# A kind found waiting with no worker for it is warned about again after this many checks.
_UNKNOWN_KIND_REWARN = 10


class AsyncRuntime:
    """Runs the jobs of ``queues`` (name -> concurrency) for one client."""

    def __init__(
        self,
        driver: AsyncDriver,
        registry: WorkerRegistry,
        settings: Settings,
        queues: Mapping[str, int],
        config: RuntimeConfig,
        *,
        events: EventHub | None = None,
    ) -> None:
        if not queues:
            raise ConfigurationError("start() needs at least one queue, e.g. {'default': 10}")
        for name, concurrency in queues.items():
            validate_queue(name)
            if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
                raise ConfigurationError(
                    f"concurrency of queue {name!r} must be an int >= 1, got {concurrency!r}"
                )
        if len(registry) == 0:
            raise ConfigurationError("the registry is empty: register the job classes to run")
        self.driver = driver
        self.registry = registry
        self.settings = settings
        self.config = config
        if events is None:  # a runtime built on its own (tests): log as a client would
            events = EventHub()
            events.subscribe(LogSubscriber(), *LogSubscriber.TYPES)
        self.events = events
        self.queues = dict(queues)
        self.instance_id = uuid.uuid4()
        self._store = AsyncStore(driver, settings)
        self._kinds = registry.kinds()
        self._identity = InstanceIdentity(
            self.instance_id, socket.gethostname(), os.getpid(), self.queues, self._kinds
        )
        self._stuck = StuckRuns()
        self._fatal: BaseException | None = None
        # (queue, kind) of waiting jobs no live worker runs -> when last warned (monotonic)
        self._unknown_warned: dict[tuple[str, str], float] = {}
        self._stopping = Event()
        self._stopped = Event()
        self._immediate = False
        self._stop_started = False
        self._wake = {name: Event() for name in self.queues}
        # Runs are keyed by job id *and* lease: one process can hold two runs of a job, when a
        # claim of it was lost (a crash) or it was rescued while this process stalled, and the
        # job came back to this process while the old run went on. Only the newest lease's
        # outcome can be recorded, and each run must report its own.
        self._active: dict[str, set[_RunKey]] = {name: set() for name in self.queues}
        self._running: dict[_RunKey, Running] = {}
        # outcomes waiting for the flusher; appended from job tasks (threads on the sync side)
        self._outbox: list[tuple[ClaimedJob, Outcome]] = []
        self._outbox_wake = Event()
        self._flush_final = Event()
        self._flusher: Any = None
        self._pool: JobPool | None = None
        self._lock: AsyncAdvisoryLock | None = None
        # tasks here, threads on the sync side
        self._loops: list[Any] = []
        self._fetchers: list[Any] = []

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """True while this instance holds the leader lock."""
        return self._lock is not None

    @property
    def running_jobs(self) -> int:
        """How many jobs this instance is running now."""
        return len(self._running)

    @property
    def fatal(self) -> BaseException | None:
        """The ``KeyboardInterrupt`` or ``SystemExit`` a job raised, which stopped this runtime.

        ``run()`` and ``pgqueue worker`` raise it again once the runtime has stopped.
        """
        return self._fatal

    @property
    def stuck_jobs(self) -> int:
        """How many runs overran their timeout, ignored cancellation, and still run.

        Their attempts are recorded as timed out and their slots are free; their code goes on
        (a thread, or a coroutine that swallowed its ``CancelledError``). Each is logged with
        its job id when it gets stuck and when it ends.
        """
        return len(self._stuck)

    async def start(self) -> None:
        """Register this instance and start the loops."""
        # a missing or outdated schema raises SchemaNotMigrated, which says what to run
        await self._store.instance_register(self._identity)
        self._pool = JobPool(sum(self.queues.values()))
        self._flusher = spawn(self._flush_loop, name="pgqueue-flusher")
        self._loops = [
            spawn(self._listen_loop, name="pgqueue-listener"),
            spawn(self._heartbeat_loop, name="pgqueue-heartbeat"),
            spawn(self._leader_loop, name="pgqueue-leader"),
        ]
        self._fetchers = [
            spawn(self._fetch_loop, name, concurrency, name=f"pgqueue-fetch-{name}")
            for name, concurrency in self.queues.items()
        ]
        logger.info(
            "pgqueue instance %s started: queues %s, kinds %s",
            self.instance_id,
            self.queues,
            ", ".join(self._kinds),
        )

    def request_stop(self, immediate: bool = False) -> None:
        """Ask the runtime to stop (safe from a signal handler); ``stop()`` does the work."""
        self._immediate = self._immediate or immediate
        self._stopping.set()
        for wake in self._wake.values():
            wake.set()

    async def wait_stopping(self, timeout: float | None = None) -> bool:
        """Wait until a stop is requested; return whether it was."""
        return await wait_event(self._stopping, timeout)

    async def stop(self, timeout: float | None = None) -> None:
        """Stop claiming, let running jobs finish for ``timeout`` seconds, then cut them off.

        Cut-off jobs go back to pending without losing an attempt. Idempotent: a second call
        waits for the first to finish.
        """
        if self._stop_started:
            await wait_event(self._stopped, None)
            return
        self._stop_started = True
        try:
            await self._shutdown(self.config.shutdown_timeout if timeout is None else timeout)
        finally:
            self._stopped.set()

    async def _shutdown(self, timeout: float) -> None:
        self.request_stop()
        for fetcher in self._fetchers:
            await join(fetcher, None)
        # Let running jobs finish, in short steps so a second signal can cut the wait short.
        remaining = timeout
        while self._running and remaining > 0 and not self._immediate:
            step = min(remaining, 0.1)
            await wait_all([r.handle for r in list(self._running.values())], step)
            remaining -= step
        cut_off = list(self._running.values())
        for running in cut_off:
            signal_stop(running, "shutdown")
        if cut_off:
            logger.warning("stop: cutting off %d running job(s)", len(cut_off))
            await wait_all(
                [r.handle for r in cut_off], _IMMEDIATE_GRACE if self._immediate else _STOP_GRACE
            )
        # Jobs whose code does not return (a blocked thread) are handed back all the same;
        # taking them out of _running means that, if they ever return, nothing more is written.
        for key in list(self._running):
            abandoned = self._running.pop(key, None)
            if abandoned is not None:
                self._active[abandoned.job.queue].discard(key)
                self._finish(abandoned.job, Outcome("release"))
        for loop in self._loops:
            await join(loop, None)
        self._flush_final.set()
        self._outbox_wake.set()
        if self._flusher is not None:
            await join(self._flusher, None)
        if self._outbox:
            logger.warning(
                "stop: could not record how %d job(s) ended (ids %s); they will be rescued and "
                "run again",
                len(self._outbox),
                ", ".join(str(job.id) for job, _ in self._outbox[:20]),
            )
        await self._resign()
        try:
            await self._store.instance_unregister(self.instance_id)
        except DatabaseError as exc:
            logger.warning("stop: could not unregister instance %s: %s", self.instance_id, exc)
        if self._pool is not None:
            self._pool.shutdown()
        logger.info("pgqueue instance %s stopped", self.instance_id)

    # -- claiming -------------------------------------------------------------------------

    async def _fetch_loop(self, queue: str, concurrency: int) -> None:
        wake = self._wake[queue]
        worker_id = f"{socket.gethostname()}:{os.getpid()}:{queue}"
        error_delay = 0.1
        # leases of claims that failed with the connection: they may have committed
        unsure: list[uuid.UUID] = []
        while not self._stopping.is_set():
            wake.clear()
            wait = self.config.poll_interval
            free = concurrency - len(self._active[queue])
            # no new claim until we know what the lost ones took
            failed = bool(unsure) and not await self._release_unsure(queue, unsure)
            if not failed and free > 0:
                lease = uuid.uuid4()
                try:
                    claim = await self._store.job_claim(
                        queue, self._kinds, free, self.instance_id, lease, worker_id
                    )
                    for job in claim.jobs:
                        self._launch(job)
                    due = claim.next_due
                    # Fewer due jobs than free slots: sleep until a notification, a slot
                    # frees up, or the next scheduled job falls due (if before the next poll).
                    if due is not None and due > 0:
                        wait = min(wait, due)
                    error_delay = 0.1
                except DatabaseError as exc:
                    logger.warning("queue %s: claim failed (%s); retrying", queue, exc)
                    if isinstance(exc, ConnectionLost):
                        unsure.append(lease)
                    failed = True
            if failed:
                wait = error_delay
                error_delay = min(error_delay * 2, self.config.listener_reconnect_max)
            await wait_event(wake, wait)

    async def _release_unsure(self, queue: str, leases: list[uuid.UUID]) -> bool:
        """Hand back what failed claims may have taken; True once done (``leases`` emptied)."""
        try:
            released = await self._store.job_release_unsure_claims(self.instance_id, leases)
        except DatabaseError as exc:
            logger.warning(
                "queue %s: could not check claims that failed (%s); retrying", queue, exc
            )
            return False
        if released:
            logger.warning(
                "queue %s: a claim whose reply was lost had taken job(s) %s; handed back",
                queue,
                ", ".join(map(str, released)),
            )
        leases.clear()
        return True

    def _launch(self, job: ClaimedJob) -> None:
        assert self._pool is not None
        running = Running(job)
        key = (job.id, job.lease)
        self._running[key] = running
        self._active[job.queue].add(key)
        running.handle = self._pool.submit(self._execute, running)

    # -- running a job --------------------------------------------------------------------

    async def _execute(self, running: Running) -> None:
        job = running.job
        # if this task itself dies, hand the job back; None: leave it to a rescue
        outcome: Outcome | None = Outcome("release")
        try:
            try:
                outcome = await self._run(running)
            except Exception as exc:  # describing the job's error failed, say: still charged
                outcome = outcome_for_error(job, exc, self.config)
            log_outcome(job, outcome)
        except (KeyboardInterrupt, SystemExit) as exc:
            # process() asked for the whole worker to end. As after a crash, its job gets no
            # outcome (a rescue returns it, the attempt counted) and the worker stops at once;
            # run() and `pgqueue worker` raise the exception again once it has stopped.
            outcome = None
            if self._fatal is None:
                self._fatal = exc
            logger.error(
                "job %s (%s) raised %s: stopping this worker now; the job is left for a rescue",
                job.id,
                job.kind,
                type(exc).__name__,
            )
            self.request_stop(immediate=True)
        finally:
            # Only while the job is still in _running: a shutdown that gave up on it has
            # already handed it back, and a late outcome must not follow.
            key = (job.id, job.lease)
            if self._running.pop(key, None) is not None:
                self._active[job.queue].discard(key)
                if outcome is not None:
                    self._finish(job, outcome)
                self._wake[job.queue].set()

    async def _run(self, running: Running) -> Outcome:
        """Run one claimed job's ``process`` and return how it ended."""
        job = running.job
        refused = outcome_unrunnable(job)
        if refused is not None:
            return refused
        try:
            worker = self.registry.build(job.kind, json.loads(job.payload_text))
        except Exception as exc:
            return outcome_for_bad_payload(job, exc)
        ctx = job.context(running.cancel)
        running.is_coroutine = is_coroutine_function(worker.process)
        assert self._pool is not None
        started = time.monotonic()
        try:
            await call_process(self._pool, running, worker.process, ctx, self._stuck)
        except Exception as exc:
            job.duration = time.monotonic() - started
            return outcome_for_error(job, exc, self.config)
        job.duration = time.monotonic() - started
        return Outcome("complete")

    # -- recording outcomes ---------------------------------------------------------------

    def _finish(self, job: ClaimedJob, outcome: Outcome) -> None:
        """Queue ``job``'s outcome for the flusher (never blocks: called as a job ends)."""
        self._outbox.append((job, outcome))
        self._outbox_wake.set()

    async def _flush_loop(self) -> None:
        # Outcomes are written as soon as the flusher is free: while one statement is in
        # flight, the outcomes of jobs that end meanwhile gather for the next. A failed write
        # is retried with backoff; the jobs stay ours meanwhile (the heartbeat goes on).
        delay = _FLUSH_RETRY
        while True:
            self._outbox_wake.clear()
            if self._outbox:
                if await self._flush_outbox():
                    delay = _FLUSH_RETRY
                    continue
                if self._flush_final.is_set():
                    return
                await wait_event(self._flush_final, delay * random.uniform(0.8, 1.2))
                delay = min(delay * 2, self.config.listener_reconnect_max)
                continue
            if self._flush_final.is_set():
                return
            await wait_event(self._outbox_wake, None)

    async def _flush_outbox(self) -> bool:
        """Write up to _FLUSH_MAX outcomes in one statement; False (and kept) if it failed.

        When the database refuses the batch for what one outcome carries, the outcomes are
        written one by one, and one that is refused on its own is replaced by a plain failure:
        one job's bad outcome never holds back the others'.
        """
        # Single consumer: job tasks (threads) only append, so the first items stay put.
        batch = self._outbox[:_FLUSH_MAX]
        del self._outbox[: len(batch)]
        try:
            written = await self._store.job_finish_many(batch)
        except Exception as exc:
            if is_data_refusal(exc):
                if len(batch) > 1:
                    logger.warning(
                        "the database refused a batch of %d job outcomes (%s); writing them "
                        "one by one",
                        len(batch),
                        exc,
                    )
                return await self._flush_singly(batch)
            logger.warning("could not record how %d job(s) ended (%s); will retry", len(batch), exc)
            self._outbox[:0] = batch
            return False
        self._check_written(batch, written)
        return True

    async def _flush_singly(self, batch: list[tuple[ClaimedJob, Outcome]]) -> bool:
        """Write outcomes one statement each; False (the rest kept) on a passing failure."""
        for i, (job, outcome) in enumerate(batch):
            item = [(job, outcome)]
            try:
                written = await self._store.job_finish_many(item)
            except Exception as exc:
                if not is_data_refusal(exc):
                    logger.warning(
                        "could not record how %d job(s) ended (%s); will retry",
                        len(batch) - i,
                        exc,
                    )
                    self._outbox[:0] = batch[i:]
                    return False
                logger.error(
                    "job %s (%s): the database refused its outcome (%s): %s; recording it as "
                    "failed instead",
                    job.id,
                    job.kind,
                    outcome.action,
                    exc,
                )
                item = [(job, outcome_unrecordable(job, exc))]
                try:
                    written = await self._store.job_finish_many(item)
                except Exception as again:
                    if not is_data_refusal(again):
                        self._outbox[:0] = [item[0], *batch[i + 1 :]]
                        return False
                    logger.error(
                        "job %s: not even its failure could be recorded (%s); it stays "
                        "'processing' until this process stops and its jobs are rescued",
                        job.id,
                        again,
                    )
                    continue
            self._check_written(item, written)
        return True

    def _check_written(
        self, batch: Sequence[tuple[ClaimedJob, Outcome]], written: set[int]
    ) -> None:
        if len(written) < len(batch):
            for job, outcome in batch:
                if job.id not in written:
                    logger.info(
                        "job %s: no longer ours (rescued, cancelled or handed back meanwhile); "
                        "its %s was not recorded",
                        job.id,
                        outcome.action,
                    )

    # -- wake-up --------------------------------------------------------------------------

    async def _listen_loop(self) -> None:
        delay = 0.1
        while not self._stopping.is_set():
            listener = None
            try:
                listener = await self.driver.listener(self.settings.channel)
                delay = 0.1
                # Notifications sent while we were not listening are lost: look for work.
                for wake in self._wake.values():
                    wake.set()
                while not self._stopping.is_set():
                    for note in await listener.wait(min(_LISTEN_WAIT, self.config.poll_interval)):
                        self._on_notification(note.payload)
            except DatabaseError as exc:
                if not self._stopping.is_set():
                    logger.warning("listener lost (%s); reconnecting in %.1fs", exc, delay)
            finally:
                if listener is not None:
                    with contextlib.suppress(DatabaseError):
                        await listener.close()
            if await wait_event(self._stopping, delay * random.uniform(0.8, 1.2)):
                break
            delay = min(delay * 2, self.config.listener_reconnect_max)

    def _on_notification(self, payload: str) -> None:
        if payload.startswith("q:"):
            wake = self._wake.get(payload[2:])
            if wake is not None:
                wake.set()
        elif payload.startswith("c:") and payload[2:].isdigit():
            for running in self._runs_of(int(payload[2:])):
                signal_stop(running, "cancel")

    def _runs_of(self, job_id: int) -> list[Running]:
        # a copy: job tasks (threads on the sync side) remove their runs meanwhile
        return [r for (i, _), r in list(self._running.items()) if i == job_id]

    # -- heartbeat and leadership ---------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        next_kind_check = 0.0  # at the first beat
        while not await wait_event(self._stopping, self.config.heartbeat_interval):
            try:
                for job_id in await self._store.instance_heartbeat(self._identity):
                    for running in self._runs_of(job_id):
                        signal_stop(running, "cancel")
                if time.monotonic() >= next_kind_check:
                    next_kind_check = time.monotonic() + self.config.unknown_kind_interval
                    await self._check_unknown_kinds()
            except DatabaseError as exc:
                logger.warning("heartbeat failed: %s", exc)

    async def _check_unknown_kinds(self) -> None:
        """Warn about due jobs of our queues whose kind no live worker runs.

        They would wait silently for a worker that knows their kind. Each (queue, kind) is
        warned about when first found, then every _UNKNOWN_KIND_REWARN checks while it waits.
        """
        waiting = await self._store.job_unknown_kinds(list(self.queues), self._kinds)
        now = time.monotonic()
        again = self.config.unknown_kind_interval * _UNKNOWN_KIND_REWARN
        found = set()
        for queue, kind, count in ((w.queue, w.kind, w.count) for w in waiting):
            found.add((queue, kind))
            last = self._unknown_warned.get((queue, kind))
            if last is not None and now - last < again:
                continue
            self._unknown_warned[(queue, kind)] = now
            logger.warning(
                "%d due job(s) of kind %r wait in queue %r, and no running worker registers "
                "that kind: start a worker whose registry has it (or cancel the jobs)",
                count,
                kind,
                queue,
            )
        for key in set(self._unknown_warned) - found:
            del self._unknown_warned[key]

    async def _leader_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                await self._lead_once()
            except DatabaseError as exc:
                logger.warning("leader duties failed: %s", exc)
                await self._resign()
            if await wait_event(self._stopping, self.config.leader_interval):
                break

    async def _lead_once(self) -> None:
        if self._lock is None:
            # The lock's session is ended by the server once idle for this long, so a leader
            # that stalls (SIGSTOP, swapped out, a blocked event loop) loses the lead about when
            # its heartbeat goes stale, instead of holding it, and every rescue, for ever.
            idle = max(self.config.rescue_after, 2 * self.config.leader_interval)
            self._lock = await self.driver.try_advisory_lock(
                self.settings.advisory_key("leader"), idle
            )
            if self._lock is None:
                return
            logger.info("instance %s is now the leader", self.instance_id)
            await self._store.instance_set_leader(self.instance_id)
        elif not await self._lock.is_held():
            logger.warning("instance %s lost the leader lock", self.instance_id)
            await self._resign()
            return
        await self.maintain()

    async def maintain(self) -> None:
        """Run the leader's duties once: rescue, retention cleanup, unique-lock expiry."""
        store, config = self._store, self.config
        stale = await store.instance_remove_stale(config.rescue_after)
        if stale:
            logger.warning("instances presumed dead: %s", ", ".join(map(str, stale)))
        for _ in range(_MAX_MAINTENANCE_ROUNDS):
            rescued = await store.job_rescue(config.cleanup_batch)
            if rescued:
                logger.warning("rescued %d job(s) of dead instances", len(rescued))
            if len(rescued) < config.cleanup_batch:
                break
        for _ in range(_MAX_MAINTENANCE_ROUNDS):
            removed = await store.job_cleanup(
                config.completed_retention, config.failed_retention, config.cleanup_batch
            )
            if removed < config.cleanup_batch:
                break
        await store.unique_lock_expire(config.cleanup_batch)

    async def _resign(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            await lock.release()
            with contextlib.suppress(DatabaseError):
                await self._store.instance_resign(self.instance_id)
