"""Until-empty mode (``client.run(until_empty=True)``) on every driver mode and both sides.

The poll interval is long (30 s) on purpose: the run must end, and find the jobs that become
due while it runs, without waiting for a poll.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

import pgqueue
from tests import jobs, until_empty_jobs
from tests._async.helpers import statuses

pytestmark = pytest.mark.timeout(60)

CONFIG = pgqueue.RuntimeConfig(poll_interval=30.0)
# Well below the poll interval: a run that waited for a poll would take 30 s.
QUICK = 10.0


@pytest.fixture
async def worker(
    driver: pgqueue.AsyncDriver, settings: pgqueue.Settings
) -> AsyncIterator[pgqueue.AsyncClient]:
    client = pgqueue.AsyncClient(driver, registry=until_empty_jobs.registry, settings=settings)
    await client.migrate()
    yield client
    await client.stop(0)


@pytest.fixture
def token() -> str:
    return uuid.uuid4().hex


async def test_runs_every_job_once_then_returns(
    worker: pgqueue.AsyncClient, db, jobs_table: str, token: str
) -> None:
    other = pgqueue.JobOptions(queue="other")
    handles = await worker.add_jobs(
        [jobs.Record(token=token, n=i) for i in range(25)]
        + [jobs.ARecord(token=token, n=i) for i in range(25)]
        + [(jobs.Record(token=token, n=i), other) for i in range(10)]
    )
    started = time.monotonic()
    ran = await worker.run({"default": 4, "other": 2}, config=CONFIG, until_empty=True)
    assert time.monotonic() - started < QUICK
    assert ran == 60
    assert worker.runtime is None  # stopped
    # every outcome is written when run() returns: no wait here
    assert statuses(db, jobs_table) == {"completed": 60}
    assert sorted(job_id for job_id, _ in jobs.RUNS[token]) == sorted(h.id for h in handles)


async def test_returns_at_once_and_leaves_jobs_due_later(
    worker: pgqueue.AsyncClient, db, jobs_table: str, token: str
) -> None:
    started = time.monotonic()
    assert await worker.run(config=CONFIG, until_empty=True) == 0  # an empty queue
    assert time.monotonic() - started < QUICK
    later = await worker.add_job(jobs.Record(token=token), run_in=timedelta(hours=1))
    failing = await worker.add_job(
        jobs.Fail(token=token), max_attempts=3, retry_backoff=timedelta(hours=1)
    )
    started = time.monotonic()
    # the failed attempt is recorded (a retry in an hour), and not waited for
    assert await worker.run(config=CONFIG, until_empty=True) == 1
    assert time.monotonic() - started < QUICK
    assert jobs.RUNS[token] == [(failing.id, 1)]
    assert db.rows(f"SELECT id, status, attempts FROM {jobs_table} ORDER BY id") == [
        (later.id, "pending", 0),
        (failing.id, "pending", 1),
    ]


async def test_waits_for_a_retry_with_no_delay(
    worker: pgqueue.AsyncClient, db, jobs_table: str, token: str
) -> None:
    job = await worker.add_job(
        jobs.AFlaky(token=token, failures=2), retry_backoff=timedelta(0), max_attempts=5
    )
    started = time.monotonic()
    assert await worker.run({"default": 2}, config=CONFIG, until_empty=True) == 3
    assert time.monotonic() - started < QUICK
    assert jobs.RUNS[token] == [(job.id, 1), (job.id, 2), (job.id, 3)]
    assert statuses(db, jobs_table) == {"completed": 1}


async def test_runs_the_jobs_that_its_jobs_enqueue(
    worker: pgqueue.AsyncClient, db, jobs_table: str, token: str, database_url: str
) -> None:
    step = until_empty_jobs.ChainStep(
        token=token, url=database_url, schema=worker.settings.schema, left=3
    )
    await worker.add_job(step, queue="other")
    started = time.monotonic()
    assert await worker.run({"default": 1, "other": 1}, config=CONFIG, until_empty=True) == 4
    assert time.monotonic() - started < QUICK
    assert len(jobs.RUNS[token]) == 4
    assert statuses(db, jobs_table) == {"completed": 4}


async def test_a_paused_queue_has_nothing_due(
    worker: pgqueue.AsyncClient, db, jobs_table: str, token: str
) -> None:
    await worker.pause_queue("other")
    await worker.add_job(jobs.Record(token=token), queue="other")
    await worker.add_job(jobs.Record(token=token))
    started = time.monotonic()
    assert await worker.run({"default": 1, "other": 1}, config=CONFIG, until_empty=True) == 1
    assert time.monotonic() - started < QUICK
    assert dict(db.rows(f"SELECT queue, status FROM {jobs_table}")) == {
        "default": "completed",
        "other": "pending",
    }
