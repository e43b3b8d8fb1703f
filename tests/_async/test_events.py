"""Events the worker runtime emits, seen by subscribers of a real client's hub (every driver mode).

The client's own events (JobsEnqueued, AdminAction) are tested in test_client_events.py.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

import pgqueue
from pgqueue.events import (
    Event,
    JobFinished,
    JobRetried,
    JobsRescued,
    JobStarted,
    LeaderGained,
    LeaderLost,
    ListenerLost,
    ListenerReconnected,
    WorkerStarted,
    WorkerStopped,
)
from tests import jobs
from tests._async.helpers import wait_until

pytestmark = pytest.mark.timeout(90)

FAST = pgqueue.RuntimeConfig(
    poll_interval=0.2,
    heartbeat_interval=0.3,
    rescue_after=1.0,
    leader_interval=0.3,
    retry_backoff=0.05,
    retry_backoff_max=0.2,
    shutdown_timeout=5.0,
)


class Recorder:
    """A subscriber that keeps what it is given (from job threads too)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)

    def of(self, event_type: type[Any], **fields: Any) -> list[Any]:
        with self._lock:
            found = [e for e in self.events if isinstance(e, event_type)]
        return [e for e in found if all(getattr(e, k) == v for k, v in fields.items())]


@pytest.fixture
async def worker(
    driver: pgqueue.AsyncDriver, settings: pgqueue.Settings
) -> AsyncIterator[pgqueue.AsyncClient]:
    client = pgqueue.AsyncClient(driver, registry=jobs.registry, settings=settings)
    await client.migrate()
    yield client
    await client.stop(0)


def token() -> str:
    return uuid.uuid4().hex


async def test_every_attempt_is_started_and_finished_with_its_outcome(
    worker: pgqueue.AsyncClient,
) -> None:
    seen = Recorder()
    worker.events.subscribe(seen)
    done = await worker.add_job(jobs.Record(token=token()))
    failing = await worker.add_job(jobs.Fail(token=token(), message="no luck"), max_attempts=2)
    cancelled = await worker.add_job(jobs.Steer(token=token(), what="cancel"))
    snoozed = await worker.add_job(jobs.Steer(token=token(), what="retry"))
    await worker.start(config=FAST)
    await wait_until(
        lambda: len(seen.of(JobFinished)) == 6, what="six attempts ended (fail twice, snooze)"
    )
    outcomes = {
        job_id: [e.outcome for e in seen.of(JobFinished, id=job_id)]
        for job_id in (done.id, failing.id, cancelled.id, snoozed.id)
    }
    assert outcomes == {
        done.id: ["completed"],
        failing.id: ["retry", "failed"],
        cancelled.id: ["cancelled"],
        snoozed.id: ["snoozed", "completed"],
    }
    runtime = worker.runtime
    assert runtime is not None
    for finished in seen.of(JobFinished):
        assert finished.instance_id == runtime.instance_id
        assert finished.duration is not None
        assert 0 <= finished.duration < 5
        assert finished.queue_wait is not None
        assert -1 < finished.queue_wait < 30  # clocks of the server and this process differ
    # each attempt started once, before it finished
    for job_id in outcomes:
        started = seen.of(JobStarted, id=job_id)
        finished = seen.of(JobFinished, id=job_id)
        assert [e.attempt for e in started] == [e.attempt for e in finished]
        for start, end in zip(started, finished, strict=True):
            assert (start.kind, start.queue) == (end.kind, "default")
            assert -1 < start.queue_wait < 30
            assert seen.events.index(start) < seen.events.index(end)
    retry, failed = seen.of(JobFinished, id=failing.id)
    assert (retry.attempt, retry.max_attempts, retry.error) == (1, 2, "ValueError: no luck")
    assert retry.delay > 0
    assert isinstance(retry.exc, ValueError)
    assert (failed.attempt, failed.error, failed.delay) == (2, "ValueError: no luck", 0.0)
    (retried,) = seen.of(JobRetried)
    assert (retried.id, retried.attempt, retried.delay, retried.error) == (
        failing.id,
        1,
        retry.delay,
        "ValueError: no luck",
    )
    (cancel,) = seen.of(JobFinished, id=cancelled.id)
    assert cancel.error == "not needed any more"
    assert seen.of(JobFinished, id=snoozed.id)[0].delay == pytest.approx(0.2)


async def test_a_job_cancelled_while_running_finishes_cancelled(
    worker: pgqueue.AsyncClient,
) -> None:
    seen = Recorder()
    worker.events.subscribe(seen, JobStarted, JobFinished)
    t = token()
    handle = await worker.add_job(jobs.Block(token=t))
    await worker.start(config=FAST)
    await wait_until(lambda: seen.of(JobStarted, id=handle.id), what="started")
    assert await worker.cancel_job(handle.id) == "processing"
    await wait_until(lambda: seen.of(JobFinished, id=handle.id), what="finished")
    (finished,) = seen.of(JobFinished, id=handle.id)
    assert (finished.outcome, finished.error) == ("cancelled", "cancelled while running")
    assert finished.duration is not None
    assert finished.duration > 0


async def test_worker_start_stop_and_leadership_are_announced(
    worker: pgqueue.AsyncClient,
) -> None:
    seen = Recorder()
    worker.events.subscribe(seen, WorkerStarted, WorkerStopped, LeaderGained, LeaderLost)
    await worker.start({"default": 2, "other": 1}, config=FAST)
    runtime = worker.runtime
    assert runtime is not None
    instance = runtime.instance_id
    await wait_until(lambda: seen.of(LeaderGained), what="leading")
    assert seen.of(LeaderGained) == [LeaderGained(instance)]
    (started,) = seen.of(WorkerStarted)
    assert (started.instance_id, started.queues) == (instance, {"default": 2, "other": 1})
    assert "record" in started.kinds
    await worker.stop()
    assert seen.of(LeaderLost) == [LeaderLost(instance, "stop")]
    assert seen.of(WorkerStopped) == [WorkerStopped(instance, 0)]
    assert isinstance(seen.events[-1], WorkerStopped)


async def test_the_jobs_of_a_dead_instance_are_announced_rescued(
    worker: pgqueue.AsyncClient, db: Any, jobs_table: str
) -> None:
    # An instance whose heartbeat stopped a minute ago, holding a running job.
    settings = worker.settings
    dead = uuid.uuid4()
    db.rows(
        f'INSERT INTO "{settings.schema}"."{settings.prefix}instances" '
        "(instance_id, queues, kinds, heartbeat_at) VALUES ($1, '{}'::jsonb, $2, "
        "now() - interval '1 minute')",
        (dead, ["record"]),
    )
    t = token()
    job_id = db.value(
        f"INSERT INTO {jobs_table} (kind, queue, payload, status, attempts, instance_id, "
        "lease_token, locked_at) VALUES ('record', 'default', $1::jsonb, 'processing', 1, "
        "$2, gen_random_uuid(), now()) RETURNING id",
        (json.dumps({"token": t}), dead),
    )
    seen = Recorder()
    worker.events.subscribe(seen, JobsRescued, JobFinished)
    await worker.start(config=FAST)
    await wait_until(lambda: seen.of(JobsRescued), what="rescued")
    assert worker.runtime is not None
    (rescued,) = seen.of(JobsRescued)
    assert rescued.instance_id == worker.runtime.instance_id
    assert rescued.jobs == {job_id: "pending"}
    assert list(rescued.dead_instances) == [dead]
    # and the rescued job runs again, here
    await wait_until(lambda: seen.of(JobFinished, id=job_id), what="ran again")
    assert [(e.attempt, e.outcome) for e in seen.of(JobFinished, id=job_id)] == [(2, "completed")]


async def test_a_lost_listener_is_announced_and_so_is_its_return(
    worker: pgqueue.AsyncClient, db: Any
) -> None:
    seen = Recorder()
    worker.events.subscribe(seen, ListenerLost, ListenerReconnected)
    config = pgqueue.RuntimeConfig(
        poll_interval=30, heartbeat_interval=5, rescue_after=30, listener_reconnect_max=0.5
    )
    await worker.start(config=config)
    assert worker.runtime is not None
    instance = worker.runtime.instance_id
    listening = "SELECT pid FROM pg_stat_activity WHERE query = $1 AND datname = current_database()"
    query = f'LISTEN "{worker.settings.channel}"'
    (pid,) = (await wait_until(lambda: db.rows(listening, (query,)), what="listening"))[0]
    assert not seen.events  # the first connection is no reconnection
    db.value("SELECT pg_terminate_backend($1)", (pid,))
    await wait_until(lambda: seen.of(ListenerReconnected), what="listening again")
    lost = seen.of(ListenerLost)
    assert lost
    assert all(e.instance_id == instance and e.error for e in lost)
    assert 0 < lost[0].retry_in <= 0.5 * 1.2
    (back,) = seen.of(ListenerReconnected)
    assert back.instance_id == instance
    assert back.down_for >= lost[0].retry_in * 0.9
    assert isinstance(seen.events[-1], ListenerReconnected)


async def test_a_subscriber_that_raises_does_not_stop_the_jobs(
    worker: pgqueue.AsyncClient, db: Any, jobs_table: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="pgqueue")
    calls = Recorder()

    def broken(event: Event) -> None:
        calls(event)
        raise RuntimeError("subscriber bug")

    worker.events.subscribe(broken)
    t = token()
    handles = await worker.add_jobs([jobs.Record(token=t, n=i) for i in range(5)])
    await worker.start({"default": 2}, config=FAST)
    await wait_until(
        lambda: db.value(f"SELECT count(*) FROM {jobs_table} WHERE status = 'completed'") == 5,
        what="all completed",
    )
    assert sorted(i for i, _ in jobs.RUNS[t]) == sorted(h.id for h in handles)
    assert len(calls.of(JobFinished)) == 5  # it kept being called
    failures = [r for r in caplog.records if "event subscriber" in r.getMessage()]
    assert {r.getMessage().split(" failed on ")[1].split(" ")[0] for r in failures} >= {
        "JobStarted",
        "JobCompleted",
    }


async def test_an_unsubscribed_handler_gets_nothing_more(worker: pgqueue.AsyncClient) -> None:
    seen, gone = Recorder(), Recorder()
    worker.events.subscribe(seen, JobFinished)
    unsubscribe = worker.events.subscribe(gone, JobFinished)
    first = await worker.add_job(jobs.Record(token=token()))
    await worker.start(config=FAST)
    await wait_until(lambda: seen.of(JobFinished, id=first.id), what="first finished")
    await wait_until(lambda: gone.of(JobFinished, id=first.id), what="seen by both")
    unsubscribe()
    unsubscribe()  # twice is harmless
    second = await worker.add_job(jobs.Record(token=token()))
    await wait_until(lambda: seen.of(JobFinished, id=second.id), what="second finished")
    assert [e.id for e in gone.of(JobFinished)] == [first.id]


async def test_without_the_log_subscriber_a_failure_is_not_logged(
    worker: pgqueue.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="pgqueue")
    seen = Recorder()
    worker.events.subscribe(seen, JobFinished)
    worker.log_subscription()
    handle = await worker.add_job(jobs.Fail(token=token()), max_attempts=1)
    await worker.start(config=FAST)
    await wait_until(lambda: seen.of(JobFinished, id=handle.id), what="failed")
    assert seen.of(JobFinished, id=handle.id)[0].outcome == "failed"
    assert not [r for r in caplog.records if f"job {handle.id} (fail)" in r.getMessage()]
    # the lines that are not events are still logged
    assert any("started: queues" in r.getMessage() for r in caplog.records)
