"""``AsyncPeriodicAdmin``: the operator's calls on periodic entries (list, pause, trigger...).

Written once, for asyncio, in pgqueue/_async/periodic_admin.py; the sync twin is generated.
The clients inherit these methods (``client.cron_list()``). They read and change the entries
as the workers declared them in the database, so they need no registry: a client that only
administers sees every entry any worker runs.
"""

from __future__ import annotations

from datetime import UTC, datetime

from ..errors import InvalidFilter, JobNotFound
from ..names import validate_kind
from ..records import PeriodicInfo, TickInfo
from .admin import AsyncAdminBase

__all__ = ["AsyncPeriodicAdmin"]

MAX_HISTORY = 1000


class AsyncPeriodicAdmin(AsyncAdminBase):
    """The cron admin API; :class:`~pgqueue.AsyncClient` inherits it."""

    async def cron_list(self, *, tx: object | None = None) -> list[PeriodicInfo]:
        """Return every periodic entry any worker declared.

        Each with its schedule, paused or retired, last tick, last finished run and next tick.
        """
        return await self._on(tx).cron_entry_list(datetime.now(UTC))

    async def cron_pause(self, name: str, *, tx: object | None = None) -> bool:
        """Pause an entry: its ticks enqueue nothing until :meth:`cron_resume`.

        Return whether it was found; pausing a paused entry changes nothing.
        """
        found = await self._on(tx).cron_entry_pause([_entry_name(name)])
        if found:
            self._emit("cron_pause", (), entry=name)
        return bool(found)

    async def cron_resume(self, name: str, *, tx: object | None = None) -> bool:
        """Resume a paused entry; return whether it was paused.

        Ticks that fell while it was paused are not enqueued: the next one is.
        """
        resumed = await self._on(tx).cron_entry_resume([_entry_name(name)])
        if resumed:
            self._emit("cron_resume", (), entry=name)
        return bool(resumed)

    async def cron_trigger(self, name: str, *, tx: object | None = None) -> int:
        """Enqueue the entry's job now, paused or not; return the job's id.

        The job is the one its newest declaration enqueues. Raises
        :class:`~pgqueue.JobNotFound` when there is no such entry.
        """
        job_id = await self._on(tx).cron_entry_trigger(_entry_name(name))
        if job_id is None:
            raise JobNotFound(
                f"no periodic entry named {name!r}: `pgqueue cron list` shows the entries "
                "workers have declared"
            )
        self._emit("cron_trigger", (job_id,), entry=name)
        return job_id

    async def cron_history(
        self,
        name: str,
        *,
        limit: int = 50,
        before: datetime | None = None,
        tx: object | None = None,
    ) -> list[TickInfo]:
        """Return the entry's ticks, newest first (before ``before`` when given).

        Each with how it was acted on and its job as it is now.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_HISTORY:
            raise InvalidFilter(f"limit must be a whole number from 1 to {MAX_HISTORY}")
        if before is not None and before.tzinfo is None:
            before = before.replace(tzinfo=UTC)
        return await self._on(tx).cron_tick_history(_entry_name(name), before, limit)


def _entry_name(name: str) -> str:
    try:
        return validate_kind(name)
    except ValueError:
        raise InvalidFilter(
            f"invalid periodic entry name {name!r}: names are up to 128 letters, digits and "
            "'_', '.', ':', '-'"
        ) from None
