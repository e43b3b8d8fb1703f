"""The heartbeat: keeps this instance's row fresh, and looks for jobs nobody can run.

Each beat also returns the running jobs someone asked to cancel (a cancel notification can be
missed while the listener reconnects); now and then it looks for due jobs of this instance's
queues whose kind no live worker registers, and warns about them.
"""

from __future__ import annotations

import logging
import time

from ...errors import DatabaseError
from ...runtime_config import RuntimeConfig
from ...runtime_state import HealthClock, RunTable, UnknownKindWarnings
from ...store_codec import InstanceIdentity
from ..compat import Event, wait_event
from ..store import AsyncStore

__all__ = ["AsyncHeartbeat"]

logger = logging.getLogger("pgqueue")

# A kind found waiting with no worker for it is warned about again after this many checks.
UNKNOWN_KIND_REWARN = 10


class AsyncHeartbeat:
    """Beats every ``heartbeat_interval`` until the runtime stops."""

    def __init__(
        self,
        *,
        store: AsyncStore,
        identity: InstanceIdentity,
        config: RuntimeConfig,
        runs: RunTable,
        stopping: Event,
    ) -> None:
        self._store = store
        self._identity = identity
        self._config = config
        self._runs = runs
        self._stopping = stopping
        self._unknown = UnknownKindWarnings(config.unknown_kind_interval * UNKNOWN_KIND_REWARN)
        # what the health probes read: a wedged loop or a lost database shows here
        self.clock = HealthClock()

    async def run(self) -> None:
        """Beat until the runtime stops; a failed beat is logged and the next one tried."""
        next_kind_check = 0.0  # at the first beat
        while not await wait_event(self._stopping, self._config.heartbeat_interval):
            try:
                for job_id in await self._store.instance_heartbeat(self._identity):
                    self._runs.cancel(job_id)
                self.clock.ok()
                if time.monotonic() >= next_kind_check:
                    next_kind_check = time.monotonic() + self._config.unknown_kind_interval
                    await self.check_unknown_kinds()
            except DatabaseError as exc:
                self.clock.failed(str(exc))
                logger.warning("heartbeat failed: %s", exc)

    async def check_unknown_kinds(self) -> None:
        """Warn about due jobs of our queues whose kind no live worker runs.

        They would wait silently for a worker that knows their kind. Each (queue, kind) is
        warned about when first found, then every UNKNOWN_KIND_REWARN checks while it waits.
        """
        identity = self._identity
        waiting = await self._store.job_unknown_kinds(list(identity.queues), identity.kinds)
        for item in self._unknown.due(waiting, time.monotonic()):
            logger.warning(
                "%d due job(s) of kind %r wait in queue %r, and no running worker registers "
                "that kind: start a worker whose registry has it (or cancel the jobs)",
                item.count,
                item.kind,
                item.queue,
            )
