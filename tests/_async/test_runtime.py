"""The worker runtime in-process, on every driver mode: running, retrying, stopping, cancelling."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

import pgqueue
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


@pytest.fixture
async def worker(
    driver: pgqueue.AsyncDriver, settings: pgqueue.Settings
) -> AsyncIterator[pgqueue.AsyncClient]:
    client = pgqueue.AsyncClient(driver, registry=jobs.registry, settings=settings)
    await client.migrate()
    yield client
    await client.stop(0)


@pytest.fixture
def token() -> str:
    return uuid.uuid4().hex


def statuses(db, table: str) -> dict[str, int]:
    return dict(db.rows(f"SELECT status, count(*) FROM {table} GROUP BY status"))


async def test_jobs_run_exactly_once(
    worker: pgqueue.AsyncClient, db, jobs_table: str, token: str
) -> None:
    handles = await worker.add_jobs(
        [jobs.Record(token=token, n=i) for i in range(40)]
        + [jobs.ARecord(token=token, n=i) for i in range(40)]
    )
    await worker.start({"default": 8}, config=FAST)
    await wait_until(lambda: statuses(db, jobs_table) == {"completed": 80}, what="all completed")
    assert sorted(job_id for job_id, _ in jobs.RUNS[token]) == sorted(h.id for h in handles)
    assert {attempt for _, attempt in jobs.RUNS[token]} == {1}
    assert db.value(f"SELECT count(*) FROM {jobs_table} WHERE finished_at IS NULL") == 0


async def test_concurrency_is_respected_per_queue(
    worker: pgqueue.AsyncClient, db, jobs_table: str, token: str
) -> None:
    await worker.add_jobs([jobs.Block(token=token, seconds=60) for _ in range(6)])
    await worker.add_jobs(
        [(jobs.ABlock(token=token, seconds=60), pgqueue.JobOptions(queue="other"))] * 3
    )
    await worker.start({"default": 2, "other": 1}, config=FAST)
    await wait_until(lambda: len(jobs.RUNS[token]) == 3, what="three jobs started")
    running = dict(
        db.rows(f"SELECT queue, count(*) FROM {jobs_table} WHERE status = 'processing' GROUP BY 1")
    )
    assert running == {"default": 2, "other": 1}
    runtime = worker.runtime
    assert runtime is not None
    assert runtime.running_jobs == 3


async def test_failures_retry_with_history_then_fail(
    worker: pgqueue.AsyncClient, db, jobs_table: str, token: str
) -> None:
    h = await worker.add_job(jobs.Fail(token=token, message="no luck"), max_attempts=3)
    await worker.start(config=FAST)
    await wait_until(lambda: statuses(db, jobs_table) == {"failed": 1}, what="failed")
    info = await worker.get_job(h.id)
    assert info is not None
    assert info.attempts == 3
    assert info.last_error == "ValueError: no luck"
    assert [e["attempt"] for e in info.errors] == [1, 2, 3]
    assert "Traceback" in info.errors[0]["traceback"]
    assert "raise ValueError(self.message)" in info.errors[0]["traceback"]
    assert info.finished_at is not None
    assert [a for _, a in jobs.RUNS[token]] == [1, 2, 3]


async def test_retry_waits_the_backoff(
    worker: pgqueue.AsyncClient, db, jobs_table: str, token: str
) -> None:
    config = pgqueue.RuntimeConfig(
        poll_interval=0.1,
        retry_backoff=0.6,
        retry_backoff_max=10,
        heartbeat_interval=0.3,
        rescue_after=1.0,
    )
    h = await worker.add_job(jobs.AFlaky(token=token, failures=1))
    await worker.start(config=config)
    await wait_until(lambda: statuses(db, jobs_table) == {"completed": 1}, what="completed")
    first_error_at, finished = db.rows(
        f"SELECT last_error_at, finished_at FROM {jobs_table} WHERE id = $1", (h.id,)
    )[0]
    gap = (finished - first_error_at).total_seconds()
    assert gap >= 0.6 * 0.8  # the first retry waits retry_backoff, give or take the jitter


async def test_error_history_is_bounded(
    worker: pgqueue.AsyncClient, db, jobs_table: str, token: str
) -> None:
    h = await worker.add_job(jobs.Fail(token=token), max_attempts=13, retry_backoff=timedelta(0))
    await worker.start(config=FAST)
    await wait_until(lambda: statuses(db, jobs_table) == {"failed": 1}, timeout=20, what="failed")
    info = await worker.get_job(h.id)
    assert info is not None
    assert [e["attempt"] for e in info.errors] == list(range(4, 14))  # the last ten


@pytest.mark.parametrize(
    ("what", "status", "attempts", "runs"),
    [("retry", "completed", 1, 2), ("cancel", "cancelled", 1, 1), ("discard", "failed", 1, 1)],
)
async def test_outcomes(
    worker: pgqueue.AsyncClient,
    db,
    jobs_table: str,
    token: str,
    what: str,
    status: str,
    attempts: int,
    runs: int,
) -> None:
    h = await worker.add_job(jobs.Steer(token=token, what=what))
    await worker.start(config=FAST)
    await wait_until(lambda: statuses(db, jobs_table) == {status: 1}, what=status)
    info = await worker.get_job(h.id)
    assert info is not None
    assert info.attempts == attempts  # Retry does not count as an attempt
    assert len(jobs.RUNS[token]) == runs
    if what != "retry":
        assert info.last_error in ("not needed any more", "bad input")


async def test_bad_payload_fails_the_job_and_the_worker_goes_on(
    worker: pgqueue.AsyncClient, db, jobs_table: str, token: str
) -> None:
    db.rows(
        f"INSERT INTO {jobs_table} (kind, queue, payload) VALUES ('needs', 'default', $1::jsonb)",
        (json.dumps({"y": 1}),),
    )
    good = await worker.add_job(jobs.Record(token=token))
    await worker.start(config=FAST)
    await wait_until(
        lambda: statuses(db, jobs_table) == {"failed": 1, "completed": 1}, what="both done"
    )
    error = db.value(f"SELECT last_error FROM {jobs_table} WHERE kind = 'needs'")
    assert "cannot build 'needs' from its stored arguments" in error
    assert db.value(f"SELECT attempts FROM {jobs_table} WHERE kind = 'needs'") == 1
    assert [job_id for job_id, _ in jobs.RUNS[token]] == [good.id]


async def test_unknown_kind_is_left_pending(
    worker: pgqueue.AsyncClient, db, jobs_table: str, token: str
) -> None:
    db.rows(
        f"INSERT INTO {jobs_table} (kind, queue, payload) VALUES ('from_a_newer_deploy', "
        "'default', '{}')"
    )
    await worker.add_job(jobs.Record(token=token))
    await worker.start(config=FAST)
    await wait_until(lambda: jobs.RUNS[token], what="the known job ran")
    await wait_until(lambda: statuses(db, jobs_table) == {"pending": 1, "completed": 1})
    assert db.value(f"SELECT attempts FROM {jobs_table} WHERE kind = 'from_a_newer_deploy'") == 0


async def test_idle_workers_pick_up_a_new_job_at_once(
    worker: pgqueue.AsyncClient, token: str
) -> None:
    # a long poll interval: only LISTEN/NOTIFY can explain a quick start
    config = pgqueue.RuntimeConfig(poll_interval=30, heartbeat_interval=5, rescue_after=30)
    await worker.start(config=config)
    await wait_until(lambda: worker.runtime is not None)
    latencies = []
    for _ in range(5):
        before = len(jobs.RUNS[token])
        jobs.STARTED[token].clear()
        start = time.monotonic()
        await worker.add_job(jobs.Record(token=token))
        await wait_until(lambda: len(jobs.RUNS[token]) > before, timeout=5, interval=0.001)  # noqa: B023
        latencies.append(time.monotonic() - start)
    latencies.sort()
    assert latencies[2] < 0.1, latencies  # the median, loosely: precise numbers are benchmarks'


async def test_scheduled_job_starts_when_due_without_polling(
    worker: pgqueue.AsyncClient, db, jobs_table: str, token: str
) -> None:
    config = pgqueue.RuntimeConfig(poll_interval=30, heartbeat_interval=5, rescue_after=30)
    await worker.start(config=config)
    h = await worker.add_job(jobs.Record(token=token), run_in=timedelta(milliseconds=700))
    await wait_until(lambda: jobs.RUNS[token], timeout=5, what="the scheduled job ran")
    started = db.value(f"SELECT locked_at - scheduled_for FROM {jobs_table} WHERE id = $1", (h.id,))
    assert timedelta(0) <= started < timedelta(seconds=0.5)


async def test_stop_lets_running_jobs_finish(
    worker: pgqueue.AsyncClient, db, jobs_table: str, token: str
) -> None:
    await worker.add_job(jobs.Block(token=token, seconds=0.5))
    await worker.start(config=FAST)
    await wait_until(lambda: jobs.RUNS[token], what="started")
    await worker.stop(timeout=10)
    assert statuses(db, jobs_table) == {"completed": 1}
    await worker.stop(timeout=10)  # idempotent


async def test_stop_cuts_off_long_jobs_without_charging_an_attempt(
    worker: pgqueue.AsyncClient, db, jobs_table: str, token: str
) -> None:
    await worker.add_jobs([jobs.Block(token=token), jobs.ABlock(token=token)])
    await worker.start(config=FAST)
    await wait_until(lambda: len(jobs.RUNS[token]) == 2, what="both started")
    start = time.monotonic()
    await worker.stop(timeout=0.2)
    assert time.monotonic() - start < 5
    rows = db.rows(f"SELECT status, attempts, lease_token FROM {jobs_table}")
    assert rows == [("pending", 0, None), ("pending", 0, None)]
    assert db.value(f'SELECT count(*) FROM "{worker.settings.schema}".pgqueue_instances') == 0


async def test_cancel_a_pending_job(
    worker: pgqueue.AsyncClient, db, jobs_table: str, token: str
) -> None:
    h = await worker.add_job(jobs.Record(token=token), run_in=timedelta(hours=1))
    assert await worker.cancel_job(h.id) == "pending"
    assert await worker.cancel_job(h.id) is None  # already finished
    assert await worker.cancel_job(10**12) is None
    await worker.add_job(jobs.Record(token=token))
    db.rows(f"UPDATE {jobs_table} SET scheduled_for = now() WHERE id = $1", (h.id,))
    await worker.start(config=FAST)
    await wait_until(lambda: len(jobs.RUNS[token]) == 1, what="the other job ran")
    info = await worker.get_job(h.id)
    assert info is not None
    assert info.status == "cancelled"
    assert h.id not in [job_id for job_id, _ in jobs.RUNS[token]]


@pytest.mark.parametrize("job_class", [jobs.Block, jobs.ABlock])
async def test_cancel_a_running_job_signals_it(
    worker: pgqueue.AsyncClient, db, jobs_table: str, token: str, job_class: type
) -> None:
    h = await worker.add_job(job_class(token=token))
    await worker.start(config=FAST)
    await wait_until(lambda: jobs.RUNS[token], what="started")
    assert await worker.cancel_job(h.id) == "processing"
    await wait_until(lambda: statuses(db, jobs_table) == {"cancelled": 1}, what="cancelled")
    info = await worker.get_job(h.id)
    assert info is not None
    assert info.last_error == "cancelled while running"
    assert len(jobs.RUNS[token]) == 1  # not retried


@pytest.mark.parametrize("job_class", [jobs.Block, jobs.ABlock])
async def test_timeout_fails_the_attempt(
    worker: pgqueue.AsyncClient, db, jobs_table: str, token: str, job_class: type
) -> None:
    h = await worker.add_job(
        job_class(token=token, seconds=30), timeout=timedelta(milliseconds=200), max_attempts=2
    )
    await worker.start(config=FAST)
    await wait_until(lambda: statuses(db, jobs_table) == {"failed": 1}, what="failed")
    info = await worker.get_job(h.id)
    assert info is not None
    assert info.last_error == "timed out after 0.2s"
    assert info.attempts == 2


async def test_listener_reconnects_after_its_backend_is_killed(
    worker: pgqueue.AsyncClient, db, token: str
) -> None:
    config = pgqueue.RuntimeConfig(
        poll_interval=30, heartbeat_interval=5, rescue_after=30, listener_reconnect_max=0.5
    )
    await worker.start(config=config)
    channel = worker.settings.channel
    listening = "SELECT pid FROM pg_stat_activity WHERE query = $1 AND datname = current_database()"
    query = f'LISTEN "{channel}"'
    old = await wait_until(lambda: db.rows(listening, (query,)), what="listening")
    db.value("SELECT pg_terminate_backend($1)", (old[0][0],))
    await wait_until(
        lambda: (rows := db.rows(listening, (query,))) and rows != old, what="listening again"
    )
    start = time.monotonic()
    await worker.add_job(jobs.Record(token=token))
    await wait_until(lambda: jobs.RUNS[token], timeout=5, interval=0.005)
    assert time.monotonic() - start < 1.0


async def test_one_leader_which_cleans_up_old_jobs(
    driver: pgqueue.AsyncDriver, settings: pgqueue.Settings, db, jobs_table: str, token: str
) -> None:
    config = pgqueue.RuntimeConfig(
        poll_interval=0.2,
        heartbeat_interval=0.3,
        rescue_after=1.0,
        leader_interval=0.2,
        completed_retention=60,
        failed_retention=3600,
    )
    a = pgqueue.AsyncClient(driver, registry=jobs.registry, settings=settings)
    b = pgqueue.AsyncClient(driver, registry=jobs.registry, settings=settings)
    await a.migrate()
    db.rows(
        f"INSERT INTO {jobs_table} (kind, queue, payload, status, finished_at) VALUES "
        "('record', 'default', '{}', 'completed', now() - interval '2 minutes'), "
        "('record', 'default', '{}', 'completed', now()), "
        "('record', 'default', '{}', 'failed', now() - interval '2 minutes')"
    )
    await a.start(config=config)
    await b.start(config=config)
    try:
        await wait_until(
            lambda: db.value(f"SELECT count(*) FROM {jobs_table}") == 2, what="cleanup"
        )
        instances = f'"{settings.schema}".pgqueue_instances'
        await wait_until(lambda: db.value(f"SELECT count(*) FROM {instances} WHERE is_leader") == 1)
        assert a.runtime is not None
        assert b.runtime is not None
        assert [a.runtime.is_leader, b.runtime.is_leader].count(True) == 1
    finally:
        await a.stop(0)
        await b.stop(0)


async def test_start_needs_a_registry_and_sane_queues(
    driver: pgqueue.AsyncDriver, settings: pgqueue.Settings
) -> None:
    plain = pgqueue.AsyncClient(driver, settings=settings)
    with pytest.raises(pgqueue.ConfigurationError, match="registry"):
        await plain.start()
    client = pgqueue.AsyncClient(driver, registry=jobs.registry, settings=settings)
    with pytest.raises(pgqueue.ConfigurationError, match="concurrency"):
        await client.start({"default": 0})
    with pytest.raises(pgqueue.InvalidName):
        await client.start({"bad queue": 1})
    with pytest.raises(pgqueue.ConfigurationError, match="rescue_after"):
        pgqueue.RuntimeConfig(heartbeat_interval=10, rescue_after=15)


async def test_start_before_migrate_says_what_to_do(
    driver: pgqueue.AsyncDriver, settings: pgqueue.Settings
) -> None:
    client = pgqueue.AsyncClient(driver, registry=jobs.registry, settings=settings)
    with pytest.raises(pgqueue.SchemaNotMigrated, match="migrate"):
        await client.start(config=FAST)
    assert client.runtime is None


async def test_a_job_raising_cancel_while_stopped_is_handed_back(
    worker: pgqueue.AsyncClient, db, jobs_table: str, token: str
) -> None:
    await worker.add_job(jobs.CancelOnStop(token=token))
    await worker.start(config=FAST)
    await wait_until(lambda: jobs.RUNS[token], what="started")
    await worker.stop(timeout=0.1)
    assert db.rows(f"SELECT status, attempts FROM {jobs_table}") == [("pending", 0)]


async def test_a_cancel_request_survives_the_shutdown_of_its_worker(
    worker: pgqueue.AsyncClient, db, jobs_table: str, token: str
) -> None:
    h = await worker.add_job(jobs.Sleeper(token=token, seconds=30))  # ignores the signal
    await worker.start(config=FAST)
    await wait_until(lambda: jobs.RUNS[token], what="started")
    assert await worker.cancel_job(h.id) == "processing"
    await worker.stop(timeout=0.1)
    assert db.rows(f"SELECT status FROM {jobs_table}") == [("cancelled",)]


async def test_an_overrunning_sync_job_does_not_hold_a_slot(
    worker: pgqueue.AsyncClient, db, jobs_table: str, token: str
) -> None:
    await worker.add_job(
        jobs.Sleeper(token=token, seconds=30), timeout=timedelta(milliseconds=100), max_attempts=1
    )
    await worker.start({"default": 1}, config=FAST)
    await wait_until(lambda: statuses(db, jobs_table) == {"failed": 1}, what="timed out")
    start = time.monotonic()
    await worker.add_jobs([jobs.Record(token=token), jobs.Record(token=token)])
    await wait_until(lambda: statuses(db, jobs_table) == {"failed": 1, "completed": 2})
    assert time.monotonic() - start < 3  # the abandoned thread sleeps on; the queue does not wait


async def test_a_large_batch_wakes_idle_workers(
    worker: pgqueue.AsyncClient, db, jobs_table: str, token: str
) -> None:
    config = pgqueue.RuntimeConfig(poll_interval=30, heartbeat_interval=5, rescue_after=30)
    await worker.start(config=config)
    start = time.monotonic()
    await worker.add_jobs([jobs.Record(token=token) for _ in range(2500)])
    await wait_until(lambda: jobs.RUNS[token], timeout=5, interval=0.005, what="first job ran")
    assert time.monotonic() - start < 2  # woken by NOTIFY, not by the 30 s poll
