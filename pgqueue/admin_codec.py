"""The admin statements' pure half: rows of ``sql/admin.sql`` in, admin records out.

Like ``store_codec.py`` (whose ``job_info`` reads the job rows), it does no I/O and is shared
by both sides; only the store calls it. It also holds what the admin API computes from what it
read: a queue's statistics, and which kinds no live worker runs.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from .records import QueueStats, RunningJob, StatusCounts, WorkerInfo

__all__ = [
    "ActionRow",
    "QueueRow",
    "StatRow",
    "action_rows",
    "queue_stats_build",
    "running_jobs",
    "stat_rows",
    "workers_build",
]

Row = Sequence[Any]


@dataclass(frozen=True, slots=True)
class ActionRow:
    """One job a by-id action found.

    The status it had, whether it changed, and (for a retry refused by a unique lock) the job
    that holds the lock.
    """

    id: int
    status: str
    changed: bool
    lock_holder: int | None = None


@dataclass(frozen=True, slots=True)
class StatRow:
    """A row of ``job_stats``: how many jobs of a queue and kind are in one state.

    ``what``: ``available``, ``scheduled``, ``processing``, ``failed``, ``cancelled`` or
    ``completed``; ``oldest``, for ``available``, when the longest-waiting one fell due.
    """

    queue: str
    kind: str
    what: str
    count: int
    oldest: datetime | None


def stat_rows(rows: Sequence[Row]) -> list[StatRow]:
    """Read ``job_stats`` rows."""
    return [StatRow(str(q), str(k), str(w), int(n), oldest) for q, k, w, n, oldest in rows]


@dataclass(frozen=True, slots=True)
class QueueRow:
    """A row of the queues table (``queue_list``)."""

    name: str
    paused_at: datetime | None
    updated_at: datetime


def action_rows(rows: Sequence[Row]) -> list[ActionRow]:
    """Read ``job_retry_many``/``job_cancel_many``/``job_delete_many`` rows."""
    out = []
    for row in rows:
        holder = row[3] if len(row) > 4 else None  # only job_retry_many reports a lock holder
        out.append(ActionRow(int(row[0]), str(row[1]), bool(row[2]), _int(holder)))
    return out


def running_jobs(rows: Sequence[Row]) -> dict[uuid.UUID, list[RunningJob]]:
    """Read ``job_running_list`` rows, grouped by the instance running them."""
    out: dict[uuid.UUID, list[RunningJob]] = {}
    for id_, kind, queue, attempts, max_attempts, locked_at, instance, worker, cancel in rows:
        if instance is None:
            continue
        out.setdefault(_uuid(instance), []).append(
            RunningJob(
                id=int(id_),
                kind=str(kind),
                queue=str(queue),
                attempt=int(attempts),
                max_attempts=int(max_attempts),
                started_at=locked_at,
                worker_id=worker,
                cancel_requested=cancel is not None,
            )
        )
    return out


def workers_build(
    instance_rows: Sequence[Row], running: dict[uuid.UUID, list[RunningJob]]
) -> list[WorkerInfo]:
    """Read ``instance_list`` rows, each with the jobs it runs."""
    out = []
    for instance, host, pid, queues, kinds, started, beat, age, leader in instance_rows:
        key = _uuid(instance)
        out.append(
            WorkerInfo(
                instance_id=key,
                hostname=str(host),
                pid=int(pid),
                queues={str(q): int(n) for q, n in json.loads(queues).items()},
                kinds=None if kinds is None else [str(k) for k in kinds],
                started_at=started,
                heartbeat_at=beat,
                heartbeat_age=max(0.0, float(age)),
                is_leader=bool(leader),
                running=running.get(key, []),
            )
        )
    return out


def queue_stats_build(
    stats: Sequence[StatRow],
    queue_rows: Sequence[QueueRow],
    workers: Sequence[WorkerInfo],
    now: datetime,
    *,
    completed: bool,
    queues: Sequence[str] | None,
) -> list[QueueStats]:
    """Put ``job_stats`` rows, the paused queues and the live workers together, per queue.

    A queue shows up when it has unfinished, failed or cancelled jobs (or completed ones when
    they are counted), a row (paused), or a worker serving it; ``queues`` limits the list.
    """
    per_kind: dict[str, dict[str, dict[str, Any]]] = {}
    for row in stats:
        entry = per_kind.setdefault(row.queue, {}).setdefault(row.kind, {})
        entry[row.what] = row.count
        if row.what == "available":
            entry["oldest_available_at"] = row.oldest
    names = set(per_kind) | {q.name for q in queue_rows}
    for worker in workers:
        names |= set(worker.queues)
    if queues is not None:
        names &= set(queues)
    paused = {q.name: q.paused_at for q in queue_rows}
    out = []
    for name in sorted(names):
        kinds = {
            kind: StatusCounts(
                **{k: v for k, v in values.items() if k != "completed"},
                completed=values.get("completed", 0) if completed else None,
            )
            for kind, values in sorted(per_kind.get(name, {}).items())
        }
        total = _sum(kinds.values(), completed)
        serving = [w for w in workers if name in w.queues]
        oldest = total.oldest_available_at
        out.append(
            QueueStats(
                queue=name,
                counts=total,
                kinds=kinds,
                oldest_available_age=None
                if oldest is None
                else max(0.0, (now - oldest).total_seconds()),
                paused=paused.get(name) is not None,
                paused_at=paused.get(name),
                workers=len(serving),
                concurrency=sum(w.queues[name] for w in serving),
                unknown_kinds=[
                    kind
                    for kind, counts in kinds.items()
                    if counts.available
                    and not any(w.kinds is None or kind in w.kinds for w in serving)
                ],
            )
        )
    return out


def _sum(counts: Any, completed: bool) -> StatusCounts:
    total = StatusCounts(completed=0 if completed else None)
    for c in counts:
        oldest = [t for t in (total.oldest_available_at, c.oldest_available_at) if t is not None]
        total = replace(
            total,
            available=total.available + c.available,
            scheduled=total.scheduled + c.scheduled,
            processing=total.processing + c.processing,
            failed=total.failed + c.failed,
            cancelled=total.cancelled + c.cancelled,
            completed=None if not completed else (total.completed or 0) + (c.completed or 0),
            oldest_available_at=min(oldest) if oldest else None,
        )
    return total


def _uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _int(value: Any) -> int | None:
    return None if value is None else int(value)
