"""The fetcher: one per queue, claims up to the queue's free slots in one statement.

It sleeps until a notification, a freed slot, the next scheduled job's due time or the poll
interval wakes it; when a claim fails with the connection, it first hands back whatever that
claim may have taken (its reply was lost) before it claims again. In until-empty mode it tells
the :class:`~.until_empty.EmptyWatch` what each claim found.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable

from ...backoff import Backoff
from ...errors import ConnectionLost, DatabaseError
from ...execution import ClaimedJob
from ...runtime_config import RuntimeConfig
from ...runtime_state import RunTable
from ..compat import Event, wait_event
from ..store import AsyncStore
from .until_empty import EmptyWatch

__all__ = ["AsyncFetcher"]

logger = logging.getLogger("pgqueue")

# First pause before claiming again after a failure (doubling up to claim_retry_max).
_RETRY_FIRST = 0.1


class AsyncFetcher:
    """Claims the jobs of one queue for this instance and hands each to ``launch``."""

    def __init__(
        self,
        queue: str,
        concurrency: int,
        *,
        store: AsyncStore,
        kinds: list[str],
        instance_id: uuid.UUID,
        config: RuntimeConfig,
        runs: RunTable,
        wake: Event,
        stopping: Event,
        launch: Callable[[ClaimedJob], None],
        watch: EmptyWatch | None = None,
    ) -> None:
        self.queue = queue
        self.concurrency = concurrency
        self._store = store
        self._kinds = kinds
        self._instance_id = instance_id
        self._config = config
        self._runs = runs
        self._wake = wake
        self._stopping = stopping
        self._launch = launch
        self._watch = watch  # until-empty mode only
        self._worker_id = f"{socket.gethostname()}:{os.getpid()}:{queue}"
        self._backoff = Backoff(_RETRY_FIRST, config.claim_retry_max)
        # leases of claims that failed with the connection: they may have committed
        self._unsure: list[uuid.UUID] = []

    async def run(self) -> None:
        """Claim and launch jobs until the runtime stops."""
        while not self._stopping.is_set():
            self._wake.clear()
            wait = self._config.poll_interval
            free = self.concurrency - self._runs.busy(self.queue)
            # no new claim until we know what the lost ones took
            failed = bool(self._unsure) and not await self._release_unsure()
            if not failed and free > 0:
                try:
                    due = await self._claim(free)
                except DatabaseError:
                    failed = True
                else:
                    # Fewer due jobs than free slots: sleep until a notification, a slot
                    # frees up, or the next scheduled job falls due (if before the next poll).
                    if due is not None and due > 0:
                        wait = min(wait, due)
            if failed:
                wait = self._backoff.next()
            await wait_event(self._wake, wait)

    async def _claim(self, free: int) -> float | None:
        """Claim up to ``free`` jobs and launch them; return the claim's ``next_due``.

        A failed claim is logged and its ``DatabaseError`` raised again.
        """
        lease = uuid.uuid4()
        watch = self._watch
        seen = 0 if watch is None else watch.claim_begins(self.queue)
        try:
            claim = await self._store.job_claim(
                self.queue, self._kinds, free, self._instance_id, lease, self._worker_id
            )
        except DatabaseError as exc:
            logger.warning("queue %s: claim failed (%s); retrying", self.queue, exc)
            if isinstance(exc, ConnectionLost):
                self._unsure.append(lease)
            raise
        for job in claim.jobs:
            self._launch(job)
        self._backoff.reset()
        if watch is not None:
            watch.claim_ended(self.queue, seen, len(claim.jobs), len(claim.jobs) < free)
        return claim.next_due

    async def _release_unsure(self) -> bool:
        """Hand back what failed claims may have taken; True once done (none left unsure)."""
        try:
            released = await self._store.job_release_unsure_claims(self._instance_id, self._unsure)
        except DatabaseError as exc:
            logger.warning(
                "queue %s: could not check claims that failed (%s); retrying", self.queue, exc
            )
            return False
        if released:
            logger.warning(
                "queue %s: a claim whose reply was lost had taken job(s) %s; handed back",
                self.queue,
                ", ".join(map(str, released)),
            )
        self._unsure.clear()
        return True
