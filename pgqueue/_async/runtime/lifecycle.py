"""The runtime's lifecycle: builds the parts, starts them, and stops them in order.

``AsyncRuntime`` is what ``client.start()`` creates: one per client. It owns no loop of its
own; it wires the parts of this package together (they share the run table, the wake-up
events and the stop event) and knows the order of a clean stop: stop claiming, let running
jobs finish (or cut them off), stop the loops, write the last outcomes, stand down as leader,
unregister.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Mapping
from typing import Any

from ...errors import ConfigurationError, DatabaseError
from ...events import EventHub, LogSubscriber, WorkerStarted, WorkerStopped
from ...jobs import WorkerRegistry
from ...names import validate_queue
from ...runtime_config import RuntimeConfig
from ...runtime_state import RunTable, WorkerHealth
from ...settings import Settings
from ...store_codec import InstanceIdentity
from ..compat import Event, join, spawn, wait_event
from ..driver import AsyncDriver
from ..store import AsyncStore
from .executor import AsyncJobExecutor
from .fetcher import AsyncFetcher
from .heartbeat import AsyncHeartbeat
from .leader import AsyncLeader
from .listener import AsyncListener
from .scheduler import AsyncScheduler
from .until_empty import EmptyWatch
from .writer import AsyncOutcomeWriter

__all__ = ["AsyncRuntime"]

logger = logging.getLogger("pgqueue")


def _check_queues(queues: Mapping[str, int]) -> None:
    if not queues:
        raise ConfigurationError("start() needs at least one queue, e.g. {'default': 10}")
    for name, concurrency in queues.items():
        validate_queue(name)
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigurationError(
                f"concurrency of queue {name!r} must be an int >= 1, got {concurrency!r}"
            )


class AsyncRuntime:
    """Runs the jobs of ``queues`` (name -> concurrency) for one client.

    With ``until_empty=True`` it requests its own stop once no job of ``queues`` is due and
    none runs here (``client.run(until_empty=True)``).
    """

    def __init__(
        self,
        driver: AsyncDriver,
        registry: WorkerRegistry,
        settings: Settings,
        queues: Mapping[str, int],
        config: RuntimeConfig,
        *,
        events: EventHub | None = None,
        until_empty: bool = False,
        poll_only: bool = False,
    ) -> None:
        _check_queues(queues)
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
        self.poll_only = poll_only
        self.instance_id = uuid.uuid4()
        self._store = store = AsyncStore(driver, settings)
        self._kinds = registry.kinds()
        self._identity = InstanceIdentity(
            self.instance_id, socket.gethostname(), os.getpid(), self.queues, self._kinds
        )
        self._stopping = Event()
        self._stopped = Event()
        self._started = False
        self._immediate = False  # read by the client: stop without waiting for jobs
        self._stop_started = False
        self._wake = {name: Event() for name in self.queues}
        self._runs = RunTable(self.queues)
        self._watch = EmptyWatch(self._wake, self._on_empty) if until_empty else None
        self._writer = AsyncOutcomeWriter(store, config, self._watch)
        self._executor = AsyncJobExecutor(
            registry=registry,
            config=config,
            runs=self._runs,
            writer=self._writer,
            wake=self._wake,
            events=events,
            instance_id=self.instance_id,
            size=sum(self.queues.values()),
            on_fatal=lambda: self.request_stop(immediate=True),
        )
        self._fetchers = [
            AsyncFetcher(
                name,
                concurrency,
                store=store,
                kinds=self._kinds,
                instance_id=self.instance_id,
                config=config,
                runs=self._runs,
                wake=self._wake[name],
                stopping=self._stopping,
                launch=self._executor.launch,
                watch=self._watch,
            )
            for name, concurrency in self.queues.items()
        ]
        self._listener = AsyncListener(
            driver=driver,
            channel=settings.channel,
            config=config,
            wake=self._wake,
            runs=self._runs,
            stopping=self._stopping,
            events=events,
            instance_id=self.instance_id,
        )
        self._heartbeat = AsyncHeartbeat(
            store=store,
            identity=self._identity,
            config=config,
            runs=self._runs,
            stopping=self._stopping,
        )
        self._leader = AsyncLeader(
            driver=driver,
            store=store,
            settings=settings,
            config=config,
            stopping=self._stopping,
            events=events,
            instance_id=self.instance_id,
            poll_only=poll_only,
        )
        # periodic entries: every process evaluates them (the tick ledger dedups)
        self._scheduler = (
            AsyncScheduler(
                store=store,
                entries=registry.periodic,
                registry=registry,
                settings=settings,
                config=config,
                instance_id=self.instance_id,
                stopping=self._stopping,
            )
            if registry.periodic and config.periodic
            else None
        )
        # tasks here, threads on the sync side
        self._flusher: Any = None
        self._loops: list[Any] = []
        self._fetch_tasks: list[Any] = []

    @property
    def is_leader(self) -> bool:
        """True while this instance holds the leader lock."""
        return self._leader.is_leader

    @property
    def running_jobs(self) -> int:
        """How many jobs this instance is running now."""
        return len(self._runs)

    def health(self) -> WorkerHealth:
        """Return what the liveness and readiness probes answer now (see ``WorkerHealth``)."""
        clock = self._heartbeat.clock
        now = time.monotonic()
        heartbeat_age = now - clock.pass_at
        database_age = None if clock.ok_at is None else now - clock.ok_at
        stopping = self._stopping.is_set()
        alive = self._started and not self._stopped.is_set()
        # A pass may wait for a pooled connection while the database is down (psycopg_pool:
        # 30 s), and that is not a wedged process: only a loop silent for longer is.
        alive = alive and heartbeat_age < max(2 * self.config.rescue_after, 60.0)
        connected = database_age is not None and clock.error is None
        fresh = database_age is not None and database_age < 2 * self.config.heartbeat_interval + 5
        error = clock.error
        if error is None and database_age is not None and not fresh:
            # a beat still waiting for a connection has not failed yet, but it is late
            error = f"no heartbeat has reached the database for {database_age:.0f}s"
        return WorkerHealth(
            alive=alive,
            ready=alive and not stopping and connected and fresh,
            stopping=stopping,
            heartbeat_age=heartbeat_age,
            database_age=database_age,
            database_error=error,
            listener_connected=self._listener.connected,
            leader=self._leader.is_leader,
            running=len(self._runs),
        )

    @property
    def until_empty(self) -> bool:
        """True when this runtime stops by itself once its queues are empty (``until_empty``)."""
        return self._watch is not None

    @property
    def runs_recorded(self) -> int:
        """How many runs of jobs this runtime recorded the outcome of (what ``run()`` returns).

        Runs that completed, were retried, failed, snoozed or were cancelled count; a run cut
        off by a stop and handed back to pending does not.
        """
        return self._writer.recorded

    def running_by_queue(self) -> dict[str, int]:
        """How many jobs this instance runs now, per queue it serves."""
        return {name: self._runs.busy(name) for name in self.queues}

    @property
    def fatal(self) -> BaseException | None:
        """The ``KeyboardInterrupt`` or ``SystemExit`` a job raised, which stopped this runtime.

        ``run()`` and ``pgqueue worker`` raise it again once the runtime has stopped.
        """
        return self._executor.fatal

    @property
    def stuck_jobs(self) -> int:
        """How many runs overran their timeout, ignored cancellation, and still run.

        Their attempts are recorded as timed out and their slots are free; their code goes on
        (a thread, or a coroutine that swallowed its ``CancelledError``). Each is logged with
        its job id when it gets stuck and when it ends.
        """
        return len(self._executor.stuck)

    async def start(self) -> None:
        """Register this instance and start the loops."""
        # a missing or outdated schema raises SchemaNotMigrated, which says what to run
        await self._store.schema_require_current()
        await self._store.instance_register(self._identity)
        self._heartbeat.clock.ok()
        self._started = True
        try:
            self._executor.open()
            self._flusher = spawn(self._writer.run, name="pgqueue-flusher")
            self._loops = [
                spawn(self._heartbeat.run, name="pgqueue-heartbeat"),
                spawn(self._leader.run, name="pgqueue-leader"),
            ]
            if not self.poll_only:  # poll_only: the fetchers poll, the heartbeat relays cancels
                self._loops.append(spawn(self._listener.run, name="pgqueue-listener"))
            if self._scheduler is not None:
                self._loops.append(spawn(self._scheduler.run, name="pgqueue-scheduler"))
            self._fetch_tasks = [
                spawn(fetcher.run, name=f"pgqueue-fetch-{fetcher.queue}")
                for fetcher in self._fetchers
            ]
            logger.info(
                "pgqueue instance %s started: queues %s, kinds %s",
                self.instance_id,
                self.queues,
                ", ".join(self._kinds),
            )
            if self.events.wants(WorkerStarted):
                self.events.emit(WorkerStarted(self.instance_id, dict(self.queues), self._kinds))
        except BaseException:
            # Ctrl-C (or a cancellation) while starting: what was started stops at once, or
            # its threads would keep the process alive with nobody left to stop them
            await self.stop(0.0)
            raise

    def request_stop(self, immediate: bool = False) -> None:
        """Ask the runtime to stop (safe from a signal handler); ``stop()`` does the work."""
        self._immediate = self._immediate or immediate
        self._stopping.set()
        for wake in self._wake.values():
            wake.set()

    def _on_empty(self) -> None:
        logger.info(
            "pgqueue instance %s: no job of queues %s is due and none runs here: stopping "
            "(until_empty)",
            self.instance_id,
            ", ".join(self.queues),
        )
        self.request_stop()

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

    async def maintain(self) -> None:
        """Run the leader's duties once: rescue, retention cleanup, unique-lock expiry."""
        await self._leader.maintain()

    async def _shutdown(self, timeout: float) -> None:
        self.request_stop()
        for task in self._fetch_tasks:
            await join(task, None)
        await self._executor.drain(timeout, lambda: self._immediate)
        for loop in self._loops:
            await join(loop, None)
        self._writer.close()
        if self._flusher is not None:
            await join(self._flusher, None)
        unrecorded = self._writer.unrecorded
        if unrecorded:
            logger.warning(
                "stop: could not record how %d job(s) ended (ids %s); they will be rescued and "
                "run again",
                unrecorded,
                ", ".join(map(str, self._writer.outbox.job_ids(20))),
            )
        await self._leader.close()
        try:
            await self._store.instance_unregister(self.instance_id)
        except DatabaseError as exc:
            logger.warning("stop: could not unregister instance %s: %s", self.instance_id, exc)
        self._executor.close()
        logger.info("pgqueue instance %s stopped", self.instance_id)
        if self.events.wants(WorkerStopped):
            self.events.emit(WorkerStopped(self.instance_id, unrecorded))
