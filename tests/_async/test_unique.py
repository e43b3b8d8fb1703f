"""Unique jobs (SPEC §7): caller-chosen job ids and unique-for-a-ttl, on every driver mode."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

import pgqueue
from pgqueue._async.compat import sleep
from tests import jobs
from tests._async.helpers import wait_until
from tests._async.test_transactions import Native

pytestmark = pytest.mark.timeout(60)

HOUR = timedelta(hours=1)
FAST = pgqueue.RuntimeConfig(
    poll_interval=0.1,
    heartbeat_interval=0.3,
    rescue_after=1.0,
    leader_interval=0.2,
    retry_backoff=3600,
)


@dataclass
class Report(pgqueue.Worker):
    """Asynq's example task: an email report for a user."""

    kind = "email:report"
    user_id: int
    extra: Any = None

    def process(self, ctx: pgqueue.JobContext) -> None:
        pass


@pytest.fixture
async def worker(
    driver: pgqueue.AsyncDriver, settings: pgqueue.Settings
) -> AsyncIterator[pgqueue.AsyncClient]:
    client = pgqueue.AsyncClient(driver, registry=jobs.registry, settings=settings)
    await client.migrate()
    yield client
    await client.stop(0)


def locks(db, settings: pgqueue.Settings) -> list[tuple[Any, ...]]:
    return db.rows(
        f'SELECT job_id, expires_at FROM "{settings.schema}".pgqueue_unique_locks ORDER BY job_id'
    )


async def test_asynq_example_duplicate_is_refused(
    client: pgqueue.AsyncClient, db, jobs_table: str
) -> None:
    t1 = await client.add_job(Report(user_id=42), unique=HOUR)
    with pytest.raises(pgqueue.DuplicateJob) as info:
        await client.add_job(Report(user_id=42), unique=HOUR)
    assert isinstance(info.value, pgqueue.DuplicateJobError)
    assert info.value.existing is not None
    assert info.value.existing.id == t1.id
    # a different payload, or the same one on another queue, is another job
    await client.add_job(Report(user_id=43), unique=HOUR)
    await client.add_job(Report(user_id=42), unique=HOUR, queue="other")
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == 3


async def test_key_order_of_arguments_does_not_matter(client: pgqueue.AsyncClient) -> None:
    await client.add_job(Report(user_id=1, extra={"a": 1, "b": [1, 2]}), unique=HOUR)
    with pytest.raises(pgqueue.DuplicateJob):
        await client.add_job(Report(user_id=1, extra={"b": [1, 2], "a": 1}), unique=HOUR)


async def test_on_conflict_ignore_returns_the_existing_job(client: pgqueue.AsyncClient) -> None:
    first = await client.add_job(Report(user_id=7), unique=HOUR)
    again = await client.add_job(Report(user_id=7), unique=HOUR, on_conflict="ignore")
    assert (again.id, again.inserted, again.conflict) == (first.id, False, "unique")
    named = await client.add_job(Report(user_id=8), job_id="report-8")
    same = await client.add_job(Report(user_id=9), job_id="report-8", on_conflict="ignore")
    assert (same.id, same.inserted, same.conflict) == (named.id, False, "job_id")
    # a bad value is a bad option like any other, and nothing is inserted
    with pytest.raises(pgqueue.InvalidJobOptions, match="on_conflict must be 'raise' or 'ignore'"):
        await client.add_job(Report(user_id=10), on_conflict="skip")  # type: ignore[arg-type]
    assert await client.job_counts() == {"pending": 2}


async def test_job_id_conflicts_while_the_job_exists(
    client: pgqueue.AsyncClient, db, jobs_table: str
) -> None:
    h = await client.add_job(Report(user_id=1), job_id="order-1")
    with pytest.raises(pgqueue.JobIdConflict) as info:
        await client.add_job(Report(user_id=2), job_id="order-1")
    assert info.value.existing is not None
    assert info.value.existing.id == h.id
    db.rows(f"UPDATE {jobs_table} SET status = 'completed', finished_at = now()")
    with pytest.raises(pgqueue.JobIdConflict):  # finished jobs keep their id until removed
        await client.add_job(Report(user_id=2), job_id="order-1")
    db.rows(f"DELETE FROM {jobs_table}")
    await client.add_job(Report(user_id=2), job_id="order-1")


async def test_ttl_expiry_frees_the_key(client: pgqueue.AsyncClient) -> None:
    await client.add_job(Report(user_id=5), unique=timedelta(milliseconds=300))
    with pytest.raises(pgqueue.DuplicateJob):
        await client.add_job(Report(user_id=5), unique=timedelta(milliseconds=300))

    deadline = time.monotonic() + 10
    while True:  # the lock expires 0.3 s after the job is due
        handle = await client.add_job(
            Report(user_id=5), unique=timedelta(milliseconds=300), on_conflict="ignore"
        )
        if handle.inserted:
            break
        assert time.monotonic() < deadline, "the lock never expired"
        await sleep(0.05)


async def test_a_scheduled_job_counts_its_ttl_from_its_due_time(
    client: pgqueue.AsyncClient, db, settings: pgqueue.Settings, jobs_table: str
) -> None:
    h = await client.add_job(Report(user_id=3), run_in=HOUR, unique=timedelta(minutes=30))
    ((job_id, expires_at),) = locks(db, settings)
    assert job_id == h.id
    assert expires_at - h.scheduled_for == timedelta(minutes=30)


async def test_released_on_cancel_and_on_delete(
    client: pgqueue.AsyncClient, db, settings: pgqueue.Settings, jobs_table: str
) -> None:
    h = await client.add_job(Report(user_id=1), unique=HOUR)
    assert await client.cancel_job(h.id) == "pending"
    assert locks(db, settings) == []
    h = await client.add_job(Report(user_id=1), unique=HOUR)
    db.rows(f"DELETE FROM {jobs_table} WHERE id = $1", (h.id,))
    assert locks(db, settings) == []
    await client.add_job(Report(user_id=1), unique=HOUR)


async def test_released_on_success_and_kept_through_a_retry(
    worker: pgqueue.AsyncClient, db, settings: pgqueue.Settings, jobs_table: str
) -> None:
    token = uuid.uuid4().hex
    done = await worker.add_job(jobs.Record(token=token), unique=HOUR)
    failing = await worker.add_job(jobs.Fail(token=token), unique=HOUR, max_attempts=3)
    await worker.start(config=FAST)
    await wait_until(
        lambda: (
            db.rows(f"SELECT status, attempts FROM {jobs_table} ORDER BY id")
            == [("completed", 1), ("pending", 1)]
        ),
        what="one completed, one waiting to retry",
    )
    assert [job_id for job_id, _ in locks(db, settings)] == [failing.id]
    again = await worker.add_job(jobs.Record(token=token), unique=HOUR)  # released on success
    assert again.id != done.id
    with pytest.raises(pgqueue.DuplicateJob):  # kept while waiting to retry
        await worker.add_job(jobs.Fail(token=token), unique=HOUR, max_attempts=3)


async def test_expired_locks_are_cleaned_up_by_the_leader(
    worker: pgqueue.AsyncClient, db, settings: pgqueue.Settings
) -> None:
    # on a queue nobody serves: the job stays pending, so only expiry can remove the lock
    await worker.add_job(
        jobs.Record(token="x"), unique=timedelta(milliseconds=100), queue="unserved"
    )
    assert len(locks(db, settings)) == 1
    await worker.start(config=FAST)
    await wait_until(lambda: locks(db, settings) == [], what="expired lock removed")


async def test_add_jobs_reports_duplicates_and_inserts_the_rest(
    client: pgqueue.AsyncClient, db, jobs_table: str
) -> None:
    await client.add_job(Report(user_id=0), job_id="taken")
    handles = await client.add_jobs(
        [
            (Report(user_id=1), pgqueue.JobOptions(unique=HOUR)),
            (Report(user_id=1), pgqueue.JobOptions(unique=HOUR)),  # duplicate of the first
            (Report(user_id=2), pgqueue.JobOptions(unique=HOUR)),
            Report(user_id=3),
            (Report(user_id=4), pgqueue.JobOptions(job_id="taken")),
            (Report(user_id=5), pgqueue.JobOptions(job_id="fresh")),
        ]
    )
    assert [h.inserted for h in handles] == [True, False, True, True, False, True]
    assert handles[1].id == handles[0].id
    assert handles[1].conflict == "unique"
    assert handles[4].conflict == "job_id"
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == 5


@pytest.fixture
async def native(database_url: str) -> AsyncIterator[Native]:
    n = Native("psycopg-connection", database_url)
    await n.open()
    yield n
    await n.close()


async def test_in_a_transaction_rollback_leaves_no_lock(
    client: pgqueue.AsyncClient, native: Native, db, settings: pgqueue.Settings
) -> None:
    await native.begin()
    await client.add_job_with_tx(native.obj, Report(user_id=1), unique=HOUR)
    await native.rollback()
    assert locks(db, settings) == []
    await client.add_job(Report(user_id=1), unique=HOUR)


async def test_a_job_id_conflict_leaves_no_lock_and_the_transaction_usable(
    client: pgqueue.AsyncClient, native: Native, db, settings: pgqueue.Settings, jobs_table: str
) -> None:
    await native.begin()
    first = await client.add_job_with_tx(native.obj, Report(user_id=1), job_id="k", unique=HOUR)
    with pytest.raises(pgqueue.JobIdConflict):
        await client.add_job_with_tx(native.obj, Report(user_id=2), job_id="k", unique=HOUR)
    with pytest.raises(pgqueue.DuplicateJob):
        await client.add_job_with_tx(native.obj, Report(user_id=1), unique=HOUR)
    # nothing failed inside the caller's transaction: it goes on and commits
    await client.add_job_with_tx(native.obj, Report(user_id=3))
    await native.commit()
    assert [job_id for job_id, _ in locks(db, settings)] == [first.id]
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == 2
