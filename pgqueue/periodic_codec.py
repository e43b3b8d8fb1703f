"""The periodic statements' pure half: parameters of a tick's enqueue, rows into records.

Like ``store_codec.py``, no I/O, shared by both sides, called by the store only
(``_async/store_periodic.py``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from .enqueue import PreparedJob
from .periodic import Periodic, next_tick
from .records import PeriodicInfo, TickInfo

__all__ = ["RETIRED_AFTER", "Declared", "entry_info", "tick_info", "tick_params"]

RETIRED_AFTER = 120.0
"""Seconds without a worker evaluating an entry after which it is shown as retired."""

Row = Sequence[Any]


class Declared:
    """What declaring an entry found.

    The fingerprint it replaced (``None``: the entry is new), the last tick acted on, and when
    the entry was last resumed.
    """

    __slots__ = ("last_tick", "replaced", "resumed_at")

    def __init__(self, row: Row) -> None:
        self.replaced: str | None = row[0]
        self.last_tick: datetime | None = row[1]
        self.resumed_at: datetime | None = row[2]


def tick_params(
    entry: Periodic,
    job: PreparedJob,
    tick: datetime,
    how: str,
    *,
    check: bool,
    channel: str,
    jobs_table: str,
) -> tuple[Any, ...]:
    """Parameters of ``cron_tick_enqueue`` ($1-$14) for ``tick`` of ``entry``.

    ``check``: evaluate the entry's declaration, pause and overlap (a scheduler); an operator's
    trigger passes False. The job's options carry the entry and tick, for ``ctx.periodic``
    and ``ctx.tick``.
    """
    options = json.loads(job.options) if job.options else {}
    options["periodic"] = {"name": entry.name, "tick": tick.isoformat()}
    return (
        entry.name,
        tick,
        how,
        entry.definition() if check else None,
        entry.overlap == "skip",
        job.kind,
        job.queue,
        job.payload,
        job.priority,
        job.max_attempts,
        entry.jitter_for(tick),
        json.dumps(options),
        channel,
        jobs_table,
    )


def tick_info(row: Row) -> TickInfo:
    """Read one ``cron_tick_history`` row."""
    tick, how, job_id, enqueued_at, status, attempts, finished_at, last_error = row
    return TickInfo(tick, how, job_id, enqueued_at, status, attempts, finished_at, last_error)


def entry_info(row: Row, now: datetime) -> PeriodicInfo:
    """Read one ``cron_entry_list`` row; ``now`` is when the next tick is counted from."""
    (
        name,
        schedule,
        timezone,
        kind,
        queue,
        paused_at,
        declared_at,
        _seen_at,
        seen_age,
        created_at,
        last_tick,
        last_how,
        last_job_id,
        last_status,
        *run,
    ) = row
    return PeriodicInfo(
        name=name,
        schedule=schedule,
        timezone=timezone,
        kind=kind,
        queue=queue,
        paused=paused_at is not None,
        paused_at=paused_at,
        retired=float(seen_age) > RETIRED_AFTER,
        declared_at=declared_at,
        seen_age=max(0.0, float(seen_age)),
        created_at=created_at,
        last_tick=last_tick,
        last_how=last_how,
        last_job_id=last_job_id,
        last_job_status=last_status,
        last_run=None if run[0] is None else tick_info(run),
        next_tick=next_tick(schedule, timezone, now),
    )
