"""The store's pure half: statement parameters in, typed records out.

``pgqueue/_async/store.py`` (and its generated sync twin) runs the statements; this module knows,
for each statement, the order of its parameters and the columns of its rows, so that nothing
outside the store layer handles a positional tuple. It does no I/O and is shared by both sides.
Keep each function next to the statement it serves, in the order of ``sql/queries.sql``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .enqueue import PreparedJob
from .execution import ClaimedJob, Outcome, read_options
from .jobs import JobHandle
from .records import Attempt, JobInfo

__all__ = [
    "COPY_COLUMNS",
    "Claim",
    "InstanceIdentity",
    "RescuedJob",
    "UnknownKind",
    "claim_decode",
    "copy_records",
    "existing_handle",
    "finish_params",
    "handles_for_records",
    "handles_from_rows",
    "insert_many_params",
    "insert_params",
    "job_info",
]

Row = Sequence[Any]


# -- records ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InstanceIdentity:
    """What a worker instance registers itself with (``instance_register``/``_heartbeat``)."""

    instance_id: uuid.UUID
    hostname: str
    pid: int
    queues: dict[str, int]
    kinds: list[str]

    def params(self) -> tuple[Any, ...]:
        """Return the parameters of ``instance_register`` and ``instance_heartbeat``."""
        return (self.instance_id, self.hostname, self.pid, json.dumps(self.queues), self.kinds)


@dataclass(frozen=True, slots=True)
class Claim:
    """What one ``job_claim`` took: the jobs, and when the next scheduled job falls due.

    ``next_due`` is in seconds from now, known only when the claim filled fewer slots than
    asked (``None``: no scheduled job waits, or the claim was full).
    """

    jobs: list[ClaimedJob]
    next_due: float | None


@dataclass(frozen=True, slots=True)
class RescuedJob:
    """A job the leader took back from a dead instance, and the status it got."""

    id: int
    status: str


@dataclass(frozen=True, slots=True)
class UnknownKind:
    """Due jobs of one kind in one queue that no live worker runs."""

    queue: str
    kind: str
    count: int


# -- enqueue ------------------------------------------------------------------------------------


def insert_params(job: PreparedJob, channel: str) -> tuple[Any, ...]:
    """Parameters of ``job_insert`` ($1-$10)."""
    return (
        job.kind,
        job.queue,
        job.payload,
        job.priority,
        job.max_attempts,
        job.run_at,
        job.run_in,
        job.key,
        job.options,
        channel,
    )


def insert_keyed_params(job: PreparedJob, channel: str) -> tuple[Any, ...]:
    """Parameters of ``job_insert_keyed``: ``job_insert``'s, then the unique key and ttl.

    The key is $11, its ttl in seconds $12.
    """
    return (*insert_params(job, channel), job.unique_key, job.unique_seconds)


def insert_many_params(jobs: Sequence[PreparedJob], channel: str) -> tuple[Any, ...]:
    """Parameters of ``job_insert_many``: one array per column, then the channel."""
    kinds, queues, payloads, priorities, attempts, run_ats, run_ins, keys, options = (
        [] for _ in range(9)
    )
    for job in jobs:
        kinds.append(job.kind)
        queues.append(job.queue)
        payloads.append(job.payload)
        priorities.append(job.priority)
        attempts.append(job.max_attempts)
        run_ats.append(job.run_at)
        run_ins.append(job.run_in)
        keys.append(job.key)
        options.append(job.options)
    return (kinds, queues, payloads, priorities, attempts, run_ats, run_ins, keys, options, channel)


def handles_from_rows(jobs: Sequence[PreparedJob], rows: Sequence[Row]) -> list[JobHandle]:
    """Pair inserted jobs with the ``(id, scheduled_for, ...)`` rows their insert returned.

    PostgreSQL does not promise that RETURNING follows the input order, but ids are drawn in
    input order (the insert consumes its ORDER BY'd rows one by one), so sorting by id restores
    it.
    """
    if len(rows) != len(jobs):
        raise RuntimeError(f"inserted {len(rows)} rows for {len(jobs)} jobs")
    if len(rows) > 1:
        rows = sorted(rows, key=lambda row: int(row[0]))
    new = JobHandle.unchecked
    return [
        new(row[0], job.kind, job.queue, row[1], job.key)
        for job, row in zip(jobs, rows, strict=True)
    ]


def existing_handle(row: Row, conflict: str) -> JobHandle:
    """Return the handle of the job that refused a duplicate (``job_by_key`` and the like)."""
    job_id, kind, queue, scheduled_for, key = row
    return JobHandle(
        id=job_id,
        kind=kind,
        queue=queue,
        scheduled_for=scheduled_for,
        job_id=key,
        inserted=False,
        conflict=conflict,
    )


COPY_COLUMNS = (
    "id",
    "kind",
    "queue",
    "payload",
    "priority",
    "max_attempts",
    "scheduled_for",
    "key",
    "options",
)


def copy_records(
    jobs: Sequence[PreparedJob], ids: Sequence[int], now: datetime
) -> list[tuple[Any, ...]]:
    """Rows for a bulk COPY, in ``COPY_COLUMNS`` order.

    ``ids`` and ``now`` come from ``job_reserve_ids``: the ids in input order, and the database
    clock that ``run_in`` counts from, as the INSERT statements do.
    """
    ids = sorted(ids)
    return [
        (
            job_id,
            job.kind,
            job.queue,
            job.payload,
            job.priority,
            job.max_attempts,
            job.run_at
            if job.run_at is not None
            else (now if not job.run_in else now + timedelta(seconds=job.run_in)),
            job.key,
            job.options,
        )
        for job, job_id in zip(jobs, ids, strict=True)
    ]


def handles_for_records(
    jobs: Sequence[PreparedJob], records: Sequence[tuple[Any, ...]]
) -> list[JobHandle]:
    """Return the handles of jobs loaded by COPY from ``copy_records``'s rows (same order)."""
    new = JobHandle.unchecked
    return [
        new(record[0], job.kind, job.queue, record[6], job.key)
        for job, record in zip(jobs, records, strict=True)
    ]


# -- running jobs -------------------------------------------------------------------------------


def claim_decode(rows: Sequence[Row], lease: Any, queue: str) -> Claim:
    """Read ``job_claim``'s rows: the claimed jobs, then (id NULL) the next due time.

    Never raises for what a row holds: options it cannot read end up in ``options_error``.
    """
    next_due = None
    if rows and rows[-1][0] is None:
        due = rows[-1][-1]
        next_due = None if due is None else float(due)
        rows = rows[:-1]
    jobs = []
    for row in rows:
        job_id, kind, payload, attempts, max_attempts, scheduled_for, options, priority, key = row[
            :9
        ]
        job = ClaimedJob(
            id=job_id,
            kind=kind,
            queue=queue,
            payload_text=payload,
            attempt=attempts,
            max_attempts=max_attempts,
            scheduled_for=scheduled_for,
            priority=priority,
            lease=lease,
            job_id=key,
        )
        read_options(job, options)
        jobs.append(job)
    return Claim(jobs, next_due)


def finish_params(batch: Sequence[tuple[ClaimedJob, Outcome]]) -> tuple[str]:
    """Return ``job_finish_many``'s parameter: the batch's outcomes as one JSON array."""
    rows = []
    for job, outcome in batch:
        row: dict[str, Any] = {"id": job.id, "lease": str(job.lease)}
        if outcome.action in ("retry", "fail", "cancel"):
            row["action"] = "error"
            row["status"] = outcome.status
            row["message"] = outcome.message
            row["error"] = outcome.error
        else:
            row["action"] = outcome.action
        row["delay"] = outcome.delay
        if job.duration is not None:
            row["duration"] = job.duration
        rows.append(row)
    return (_FINISH_ENCODER.encode(rows),)


# Compact; a non-finite delay or duration is refused here rather than sent as a token the
# server's JSON parser rejects (neither can be: delays are checked where they are made).
_FINISH_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def claim_kinds(kinds: Sequence[str]) -> str:
    """Return ``job_claim``'s kinds parameter: the kinds joined by commas (a kind has none)."""
    return ",".join(kinds)


# -- inspecting ---------------------------------------------------------------------------------


def job_info(row: Row) -> JobInfo:
    """Read one row of the ``job_columns`` fragment (``job_get``, ``job_list_*``)."""
    (
        id_,
        kind,
        queue,
        payload,
        status,
        priority,
        attempts,
        max_attempts,
        created_at,
        scheduled_for,
        finished_at,
        last_error,
        errors_text,
        key,
        duration,
        instance_id,
        worker_id,
        locked_at,
        options,
        unique_key,
        cancel_requested_at,
        last_error_at,
    ) = row
    errors = json.loads(errors_text)
    return JobInfo(
        id=id_,
        kind=kind,
        queue=queue,
        payload=json.loads(payload),
        status=status,
        priority=priority,
        attempts=attempts,
        max_attempts=max_attempts,
        created_at=created_at,
        scheduled_for=scheduled_for,
        finished_at=finished_at,
        last_error=last_error,
        errors=errors,
        job_id=key,
        duration=duration,
        claimed_by=_uuid(instance_id),
        claimed_at=locked_at,
        worker_id=worker_id,
        options=json.loads(options),
        unique_key=unique_key,
        cancel_requested_at=cancel_requested_at,
        last_error_at=last_error_at,
        attempt_history=_attempt_history(
            errors, status, attempts, locked_at, finished_at, duration, _uuid(instance_id)
        ),
    )


def _attempt_history(
    errors: list[dict[str, Any]],
    status: str,
    attempts: int,
    claimed_at: datetime | None,
    finished_at: datetime | None,
    duration: float | None,
    instance_id: uuid.UUID | None,
) -> list[Attempt]:
    # Failed attempts are in the errors history (with the instance that ran them since schema
    # version 4); the last attempt, when it did not fail, only in the row itself.
    history = [
        Attempt(
            number=int(entry.get("attempt") or 0),
            outcome="failed",
            started_at=_moment(entry.get("started_at") or entry.get("claimed_at")),
            finished_at=_moment(entry.get("at")),
            duration=entry.get("duration"),
            instance_id=_uuid(entry.get("instance_id")),
            error=entry.get("error"),
            traceback=entry.get("traceback") or None,
        )
        for entry in errors
        if isinstance(entry, dict)
    ]
    recorded = {attempt.number for attempt in history}
    if attempts > 0 and attempts not in recorded and claimed_at is not None:
        outcome = {"processing": "running", "completed": "completed", "cancelled": "cancelled"}
        if status in outcome:
            history.append(
                Attempt(
                    number=attempts,
                    outcome=outcome[status],
                    started_at=claimed_at,
                    finished_at=None if status == "processing" else finished_at,
                    duration=None if status == "processing" else duration,
                    instance_id=instance_id,
                )
            )
    return history


def _uuid(value: Any) -> uuid.UUID | None:
    if value is None or isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def _moment(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None
