"""The scheduler: evaluates the registry's periodic entries and enqueues one job per tick.

Every worker process with periodic entries runs one, leader or not: the tick ledger
(``cron_ticks``, keyed on entry and tick) makes each tick one job however many schedulers try
it, so correctness never depends on leadership or on one process's clock. A tick is tried when
this process's clock says it is due; the statement itself refuses a tick that the database's
clock says is not due yet ('early'), and the scheduler tries it again a moment later.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

from ...enqueue import PreparedJob, prepare
from ...errors import DatabaseError
from ...jobs import WorkerRegistry
from ...periodic import InvalidSchedule, Periodic, plan_ticks
from ...runtime_config import RuntimeConfig
from ...settings import Settings
from ..compat import Event, wait_event
from ..store import AsyncStore

__all__ = ["AsyncScheduler"]

logger = logging.getLogger("pgqueue")

# The longest the scheduler sleeps between looks at the clock and at the stop event.
_MAX_WAIT = 1.0
# How soon a tick the database called early is tried again.
_EARLY_RETRY = 0.05


class AsyncScheduler:
    """Enqueues the jobs of periodic ``entries`` on their ticks until the runtime stops."""

    def __init__(
        self,
        *,
        store: AsyncStore,
        entries: Sequence[Periodic],
        registry: WorkerRegistry,
        settings: Settings,
        config: RuntimeConfig,
        instance_id: uuid.UUID,
        stopping: Event,
    ) -> None:
        self._store = store
        self._config = config
        self._instance_id = instance_id
        self._stopping = stopping
        # checked now, so that a bad entry fails start() rather than a tick
        self._jobs: dict[str, PreparedJob] = {}
        for e in entries:
            job = prepare(e.job, e.options, settings=settings, registry=registry)
            if job.keyed or job.run_at is not None or job.run_in:
                raise InvalidSchedule(
                    f"{e.name}: the job's options (its class's job_options included) set "
                    "job_id, unique, run_at or run_in: a periodic job is due at its tick, and "
                    "the tick ledger already makes one job per tick"
                )
            self._jobs[e.name] = job
        self._entries = {e.name: e for e in entries}
        # entries a newer declaration took over; taken back if its workers go quiet
        self._superseded: dict[str, Periodic] = {}
        self._last: dict[str, datetime] = {}
        self._declared = False
        self._started: set[str] = set()  # run_on_start done, once per start of this worker

    async def run(self) -> None:
        """Declare the entries, then act on their ticks until the runtime stops."""
        next_touch = 0.0
        while not self._stopping.is_set():
            try:
                if not self._declared:
                    await self.declare()
                if time.monotonic() >= next_touch:
                    next_touch = time.monotonic() + self._config.heartbeat_interval
                    await self.touch()
                await self.evaluate(datetime.now(UTC))
            except DatabaseError as exc:
                logger.warning("periodic jobs: %s; trying again", exc)
                await wait_event(self._stopping, _MAX_WAIT)
                continue
            await wait_event(self._stopping, self._wait())

    def _wait(self) -> float:
        if not self._entries:
            return _MAX_WAIT  # (superseded entries are looked at by touch())
        now = datetime.now(UTC)
        soonest = min(next(e.ticks_after(self._last[n])) for n, e in self._entries.items())
        return max(0.0, min(_MAX_WAIT, (soonest - now).total_seconds()))

    async def declare(self) -> None:
        """Declare every entry; set where each one's ticks resume from (the missed policy)."""
        now = datetime.now(UTC)
        for name, entry in list(self._entries.items()):
            found = await self._store.cron_entry_declare(entry, self._jobs[name], self._instance_id)
            if found.replaced is not None and found.replaced != entry.definition():
                logger.warning(
                    "periodic entry %r was declared differently by another worker; this "
                    "declaration, the newest, now wins (workers still running the other one "
                    "stop evaluating it)",
                    name,
                )
            # a new entry (or one never acted on) starts now: it never backfills
            self._last[name] = found.last_tick or now
            if entry.run_on_start and name not in self._started:
                self._started.add(name)
                start_tick = now.replace(microsecond=now.microsecond // 1000 * 1000)
                await self._enqueue(entry, start_tick, "start")
        self._declared = True

    async def touch(self) -> None:
        """Tell the database this worker still evaluates its entries; drop superseded ones.

        A superseded entry is taken back when nobody evaluates its newer declaration any more.
        """
        if self._entries:
            current = await self._store.cron_entry_touch(list(self._entries.values()))
            for name in list(self._entries):
                if name not in current:
                    self._supersede(name)
        for name, entry in list(self._superseded.items()):
            # the winner's workers touch it every heartbeat; silent for rescue_after, they
            # are gone (a canary stopped, a rollback)
            if await self._store.cron_entry_reclaim(entry, self._config.rescue_after):
                found = await self._store.cron_entry_declare(
                    entry, self._jobs[name], self._instance_id
                )
                self._last[name] = found.last_tick or datetime.now(UTC)
                self._entries[name] = self._superseded.pop(name)
                logger.warning(
                    "periodic entry %r: no worker has evaluated its newer declaration for "
                    "%gs (or it is declared as here again): this worker evaluates it again",
                    name,
                    self._config.rescue_after,
                )

    async def evaluate(self, now: datetime) -> None:
        """Act on every tick that fell due since the last look (per the missed-tick policy)."""
        for name, entry in list(self._entries.items()):
            planned, last = plan_ticks(entry, self._last[name], now)
            for tick, how in planned:
                if not await self._enqueue(entry, tick, how):
                    break  # not due by the database's clock yet, or the entry went away
                self._last[name] = tick
            else:
                self._last[name] = last

    async def _enqueue(self, entry: Periodic, tick: datetime, how: str) -> bool:
        """Try ``tick``; return False when it must be tried again later (or never)."""
        for _ in range(int(_MAX_WAIT / _EARLY_RETRY)):
            result = await self._store.cron_tick_enqueue(entry, self._jobs[entry.name], tick, how)
            if result.verdict != "early":
                break
            if await wait_event(self._stopping, _EARLY_RETRY):
                return False
        else:
            return False
        if result.verdict == "superseded":
            self._supersede(entry.name)
            return False
        if result.verdict == "unknown":
            self._declared = False  # the row went away (uninstall?): declare again
            return False
        if result.recorded:
            if result.verdict == "skip":
                logger.info(
                    "periodic entry %r: tick %s skipped, its previous job is still pending "
                    "or running (overlap='skip')",
                    entry.name,
                    tick.isoformat(),
                )
            else:
                logger.debug(
                    "periodic entry %r: tick %s enqueued as job %s (%s)",
                    entry.name,
                    tick.isoformat(),
                    result.job_id,
                    how,
                )
        return True

    def _supersede(self, name: str) -> None:
        entry = self._entries.pop(name, None)
        if entry is not None:
            self._superseded[name] = entry
        logger.warning(
            "periodic entry %r is declared differently by a worker that started later: this "
            "worker stops evaluating it (the newest declaration wins)",
            name,
        )
