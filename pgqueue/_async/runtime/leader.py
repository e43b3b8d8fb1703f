"""The leader: whoever holds the leader advisory lock runs maintenance.

Every ``leader_interval`` each instance tries to take the lock; the one holding it rescues the
jobs of dead instances, removes finished jobs past retention and expires unique locks, and
stands down when it finds the lock gone (or a duty fails). ``LeaderGained``, ``LeaderLost``
and ``JobsRescued`` say what happened.

A candidate tries on one dedicated session that it keeps between tries (opening one per try
cost every follower a connection every ``leader_interval``). With ``poll_only`` (behind a
transaction pooler, no session can hold a lock) the lock is a lease instead: the leader mark
of an instance whose heartbeat is fresh, taken and renewed by pool statements.
"""

from __future__ import annotations

import contextlib
import logging
import uuid

from ...errors import DatabaseError
from ...events import EventHub, JobsRescued, LeaderGained, LeaderLost
from ...runtime_config import RuntimeConfig
from ...settings import Settings
from ..compat import Event, wait_event
from ..driver import AsyncAdvisoryLock, AsyncDriver
from ..store import AsyncStore

__all__ = ["AsyncLeader", "AsyncLeaseLock"]

logger = logging.getLogger("pgqueue")

# Bound on maintenance rounds per leader tick, so one tick cannot run for ever.
_MAX_MAINTENANCE_ROUNDS = 20


class AsyncLeaseLock:
    """The leader's lease, used as the lock when no session can hold one (``poll_only``).

    Taken and renewed in one short transaction on the pool (``AsyncStore.instance_lead``), so
    it works through a transaction pooler; another instance takes it over once the holder's
    heartbeat is older than ``fresh_within`` seconds.
    """

    def __init__(
        self, store: AsyncStore, instance_id: uuid.UUID, fresh_within: float, key: int
    ) -> None:
        self._store = store
        self._instance_id = instance_id
        self._fresh_within = fresh_within
        self._key = key

    @property
    def key(self) -> int:
        """The key of the transaction lock that serialises the candidates."""
        return self._key

    @property
    def backend_pid(self) -> int:
        """0: the lease has no session of its own."""
        return 0

    async def try_take(self) -> bool:
        """Take or keep the lease; True when this instance holds it."""
        return await self._store.instance_lead(self._instance_id, self._fresh_within)

    async def is_held(self) -> bool:
        """Renew the lease; True while this instance still holds it."""
        return await self.try_take()

    async def release(self) -> None:
        """Nothing to close: the leader's resign clears the mark (``instance_resign``)."""


class AsyncLeader:
    """Competes for the lead and, while it holds it, maintains the tables."""

    def __init__(
        self,
        *,
        driver: AsyncDriver,
        store: AsyncStore,
        settings: Settings,
        config: RuntimeConfig,
        stopping: Event,
        events: EventHub,
        instance_id: uuid.UUID,
        poll_only: bool = False,
    ) -> None:
        self._driver = driver
        self._store = store
        self._settings = settings
        self._config = config
        self._stopping = stopping
        self._events = events
        self._instance_id = instance_id
        self._poll_only = poll_only
        self._lock: AsyncAdvisoryLock | AsyncLeaseLock | None = None
        # the session a follower tries the lock on, kept between tries
        self._candidate: AsyncAdvisoryLock | AsyncLeaseLock | None = None

    @property
    def is_leader(self) -> bool:
        """True while this instance holds the leader lock."""
        return self._lock is not None

    async def run(self) -> None:
        """Tick every ``leader_interval`` until the runtime stops."""
        while not self._stopping.is_set():
            try:
                await self._lead_once()
            except DatabaseError as exc:
                logger.warning("leader duties failed: %s", exc)
                await self.resign("error")
            if await wait_event(self._stopping, self._config.leader_interval):
                break

    async def _lead_once(self) -> None:
        if self._lock is None:
            candidate = self._candidate
            if candidate is None:
                candidate = self._candidate = await self._open_candidate()
            try:
                taken = await candidate.try_take()
            except DatabaseError:
                self._candidate = None  # its session died: the next tick opens another
                await candidate.release()
                raise
            if not taken:
                return
            self._lock, self._candidate = candidate, None
            if self._events.wants(LeaderGained):
                self._events.emit(LeaderGained(self._instance_id))
            if not self._poll_only:  # the lease is the mark itself
                await self._store.instance_set_leader(self._instance_id)
        elif not await self._lock.is_held():
            await self.resign("lock lost")
            return
        await self.maintain()

    async def _open_candidate(self) -> AsyncAdvisoryLock | AsyncLeaseLock:
        # The lock's session is ended by the server once idle for this long, so a leader that
        # stalls (SIGSTOP, swapped out, a blocked event loop) loses the lead about when its
        # heartbeat goes stale, instead of holding it, and every rescue, for ever. A lease
        # lapses after as long without a heartbeat.
        idle = max(self._config.rescue_after, 2 * self._config.leader_interval)
        if self._poll_only:
            key = self._settings.advisory_key("lease")
            return AsyncLeaseLock(self._store, self._instance_id, idle, key)
        return await self._driver.advisory_lock(self._settings.advisory_key("leader"), idle)

    async def maintain(self) -> None:
        """Run the leader's duties once: rescue, retention cleanup, unique-lock and tick expiry."""
        store, config = self._store, self._config
        stale = await store.instance_remove_stale(config.rescue_after, self._instance_id)
        if stale:
            logger.warning("instances presumed dead: %s", ", ".join(map(str, stale)))
        for _ in range(_MAX_MAINTENANCE_ROUNDS):
            rescued = await store.job_rescue(config.cleanup_batch)
            if rescued and self._events.wants(JobsRescued):
                jobs = {job.id: job.status for job in rescued}
                self._events.emit(JobsRescued(self._instance_id, jobs, tuple(stale)))
            if len(rescued) < config.cleanup_batch:
                break
        total = 0
        for _ in range(_MAX_MAINTENANCE_ROUNDS):
            removed = await store.job_cleanup(
                config.completed_retention, config.failed_retention, config.cleanup_batch
            )
            total += removed
            if removed < config.cleanup_batch:
                break
        else:
            # Every statement found a full batch: a backlog, or more jobs finishing than cleanup
            # can remove. Nothing else shows it (stats and gauges leave completed jobs out)
            # until the table has grown.
            logger.warning(
                "retention cleanup removed %d finished jobs this tick, its most (%d statements "
                "of cleanup_batch=%d), and more are likely past retention: it is falling behind "
                "(if this repeats every tick, the jobs table grows without end). Raise "
                "cleanup_batch or shorten leader_interval (%gs) until %d x cleanup_batch / "
                "leader_interval is well above the rate at which jobs finish",
                total,
                _MAX_MAINTENANCE_ROUNDS,
                config.cleanup_batch,
                config.leader_interval,
                _MAX_MAINTENANCE_ROUNDS,
            )
        await store.unique_lock_expire(config.cleanup_batch)
        # the tick ledger keeps as long as failed jobs (each entry's newest tick stays)
        await store.cron_tick_cleanup(config.failed_retention, config.cleanup_batch)

    async def close(self) -> None:
        """Stop leading and close the candidate's session (the runtime is stopping)."""
        candidate, self._candidate = self._candidate, None
        if candidate is not None:
            await candidate.release()
        await self.resign("stop")

    async def resign(self, reason: str) -> None:
        """Stop leading, if leading (``reason``: ``lock lost``, ``error`` or ``stop``)."""
        lock, self._lock = self._lock, None
        if lock is None:
            return
        if self._events.wants(LeaderLost):
            self._events.emit(LeaderLost(self._instance_id, reason))
        await lock.release()
        with contextlib.suppress(DatabaseError):
            await self._store.instance_resign(self._instance_id)
