"""``AsyncPeriodicStore``: the store's statements of periodic jobs (``sql/periodic.sql``).

Written once, for asyncio, in pgqueue/_async/store_periodic.py; the sync twin is generated.
Part of the store layer: :class:`~pgqueue._async.store.AsyncStore` inherits these methods, and
the scheduler (``runtime/scheduler.py``) and the cron admin calls use them through it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..enqueue import PreparedJob
from ..periodic import Periodic
from ..periodic_codec import Declared, entry_info, tick_info, tick_params
from ..queries import Queries
from ..records import PeriodicInfo, TickInfo
from ..settings import Settings

__all__ = ["AsyncPeriodicStore", "TickResult"]


class TickResult:
    """What ``cron_tick_enqueue`` did.

    The verdict, whether this call recorded the tick, and the id of the job it enqueued.
    """

    __slots__ = ("job_id", "recorded", "verdict")

    def __init__(self, row: Sequence[Any]) -> None:
        self.verdict: str = str(row[0])
        self.recorded: bool = bool(row[1])
        self.job_id: int | None = row[2]


class AsyncPeriodicStore:
    """The periodic-jobs methods of the store (see the module's doc)."""

    __slots__ = ()
    _q: Queries
    settings: Settings

    async def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError  # the store's

    async def cron_entry_declare(
        self, entry: Periodic, job: PreparedJob, instance_id: uuid.UUID
    ) -> Declared:
        """Declare ``entry`` as this instance evaluates it; what the declaration replaced."""
        rows = await self._query(
            self._q.cron_entry_declare,
            (
                entry.name,
                entry.spec,
                entry.timezone,
                job.kind,
                job.queue,
                entry.definition(),
                instance_id,
                job.payload,
                job.priority,
                job.max_attempts,
                job.options or "{}",
            ),
        )
        return Declared(rows[0])

    async def cron_tick_enqueue(
        self, entry: Periodic, job: PreparedJob, tick: datetime, how: str, *, check: bool = True
    ) -> TickResult:
        """Record ``tick`` of ``entry`` and enqueue its job, unless someone already did."""
        params = tick_params(
            entry,
            job,
            tick,
            how,
            check=check,
            channel=self.settings.channel,
            jobs_table=self._q.table("jobs"),
        )
        rows = await self._query(self._q.cron_tick_enqueue, params)
        return TickResult(rows[0])

    async def cron_entry_touch(self, entries: Sequence[Periodic]) -> set[str]:
        """Say these entries are evaluated; return those still declared as they are here."""
        rows = await self._query(
            self._q.cron_entry_touch,
            ([e.name for e in entries], [e.definition() for e in entries]),
        )
        return {str(row[0]) for row in rows}

    async def cron_entry_reclaim(self, entry: Periodic, silent_for: float) -> bool:
        """Take ``entry`` back from a newer declaration nobody evaluates any more.

        That is, for ``silent_for`` seconds; or when it is declared as ``entry`` again.
        """
        params = (entry.name, silent_for, entry.definition())
        return bool(await self._query(self._q.cron_entry_reclaim, params))

    async def cron_entry_list(self, now: datetime) -> list[PeriodicInfo]:
        """Return every periodic entry with its last tick, last run and next tick."""
        return [entry_info(row, now) for row in await self._query(self._q.cron_entry_list)]

    async def cron_entry_pause(self, names: Sequence[str]) -> list[str]:
        """Pause entries ``names``; return those found."""
        rows = await self._query(self._q.cron_entry_pause, (list(names),))
        return sorted(str(row[0]) for row in rows)

    async def cron_entry_resume(self, names: Sequence[str]) -> list[str]:
        """Resume paused entries ``names``; return those that were paused."""
        rows = await self._query(self._q.cron_entry_resume, (list(names),))
        return sorted(str(row[0]) for row in rows)

    async def cron_tick_history(
        self, name: str, before: datetime | None, limit: int
    ) -> list[TickInfo]:
        """Return the ticks of ``name`` before ``before``, newest first."""
        rows = await self._query(self._q.cron_tick_history, (name, before, limit))
        return [tick_info(row) for row in rows]

    async def cron_entry_trigger(self, name: str) -> int | None:
        """Enqueue entry ``name``'s job now (a 'manual' tick); its id, or ``None``: no entry."""
        rows = await self._query(
            self._q.cron_entry_trigger, (name, self.settings.channel, self._q.table("jobs"))
        )
        return int(rows[0][0]) if rows else None

    async def cron_tick_cleanup(self, older_than: float, limit: int) -> int:
        """Remove up to ``limit`` ticks older than ``older_than`` seconds; return how many."""
        rows = await self._query(self._q.cron_tick_cleanup, (older_than, limit))
        return len(rows)
