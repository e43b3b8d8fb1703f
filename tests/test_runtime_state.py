"""The runtime's bookkeeping, written once for both runtimes (pure: no database)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import get_args

import pytest

from pgqueue.execution import Action, ClaimedJob, Outcome
from pgqueue.runtime_state import (
    Notification,
    Outbox,
    RunTable,
    UnknownKindWarnings,
    job_finished,
    job_retried,
    job_started,
    queue_wait,
    read_notification,
)
from pgqueue.store_codec import UnknownKind


def claimed(job_id: int, queue: str = "default", lease: object = None) -> ClaimedJob:
    return ClaimedJob(
        id=job_id,
        kind="k",
        queue=queue,
        payload_text="{}",
        attempt=1,
        max_attempts=3,
        scheduled_for=datetime.now(UTC) - timedelta(seconds=2),
        priority=0,
        lease=lease if lease is not None else uuid.uuid4(),
    )


def test_run_table_counts_runs_per_queue_and_keys_them_by_lease() -> None:
    runs = RunTable(["default", "other"])
    first, again = claimed(1), claimed(1)  # the same job under two leases
    runs.add(first)
    runs.add(again)
    runs.add(claimed(2, "other"))
    assert (len(runs), runs.busy("default"), runs.busy("other")) == (3, 2, 1)
    assert len(runs.runs_of(1)) == 2
    assert runs.remove(first) is not None
    assert runs.remove(first) is None  # only one caller takes a run out
    assert (len(runs), runs.busy("default")) == (2, 1)
    assert sorted(r.job.id for r in runs.remove_all()) == [1, 2]
    assert (len(runs), runs.busy("default"), runs.busy("other")) == (0, 0, 0)


def test_run_table_cancel_signals_every_run_of_the_job() -> None:
    runs = RunTable(["default"])
    a, b, other = runs.add(claimed(7)), runs.add(claimed(7)), runs.add(claimed(8))
    runs.cancel(7)
    assert a.cancel.is_set()
    assert b.cancel.is_set()
    assert (a.job.stop_reason, other.job.stop_reason) == ("cancel", None)
    assert not other.cancel.is_set()


def test_outbox_takes_batches_and_takes_back_failures_in_front() -> None:
    outbox = Outbox()
    for i in range(5):
        outbox.add(claimed(i), Outcome("complete"))
    batch = outbox.take(3)
    assert [job.id for job, _ in batch] == [0, 1, 2]
    outbox.add(claimed(5), Outcome("complete"))
    outbox.put_back(batch)
    assert outbox.job_ids(10) == [0, 1, 2, 3, 4, 5]
    assert len(outbox.take(1000)) == 6
    assert not outbox


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ("q:default", Notification(queue="default")),
        ("q:", Notification(queue="")),
        ("c:42", Notification(cancel=42)),
        ("c:x", None),
        ("c:-1", None),
        ("hello", None),
    ],
)
def test_notifications(payload: str, expected: Notification | None) -> None:
    assert read_notification(payload) == expected


def test_unknown_kinds_are_warned_about_at_first_then_after_a_while() -> None:
    warnings = UnknownKindWarnings(rewarn_after=10)
    a, b = UnknownKind("default", "a", 3), UnknownKind("default", "b", 1)
    assert warnings.due([a], now=0) == [a]
    assert warnings.due([a, b], now=5) == [b]
    assert warnings.due([a, b], now=10) == [a]
    assert warnings.due([b], now=12) == []  # a is gone: forgotten
    assert warnings.due([a], now=13) == [a]  # so it is new again


def test_events_of_a_run() -> None:
    runs = RunTable(["default"])
    running = runs.add(claimed(3))
    running.queue_wait = queue_wait(running.job)
    assert 1.5 < running.queue_wait < 10
    started = job_started(running, uuid.UUID(int=1))
    assert (started.id, started.attempt, started.queue_wait) == (3, 1, running.queue_wait)
    running.job.duration = 0.5
    error = ValueError("x")
    outcome = Outcome("retry", delay=4.0, message="ValueError: x", exc=error)
    finished = job_finished(running, outcome, uuid.UUID(int=1))
    assert (finished.outcome, finished.duration, finished.delay, finished.error) == (
        "retry",
        0.5,
        4.0,
        "ValueError: x",
    )
    assert finished.exc is error
    retried = job_retried(running.job, outcome)
    assert (retried.id, retried.delay, retried.error) == (3, 4.0, "ValueError: x")
    names = {
        action: job_finished(running, Outcome(action), uuid.UUID(int=1)).outcome
        for action in get_args(Action)
    }
    assert names == {
        "complete": "completed",
        "retry": "retry",
        "fail": "failed",
        "cancel": "cancelled",
        "snooze": "snoozed",
        "release": "released",
    }
