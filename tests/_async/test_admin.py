"""The admin API (issue 14): list, show, retry, cancel, delete, pause, stats, workers, purge.

On every driver mode, against a real PostgreSQL; the runs that need workers start the client's
own runtime. The CLI's commands are tested through subprocesses in tests/test_cli_admin.py, and
the races with real worker processes in tests/faults/test_admin_races.py.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import pgqueue
from pgqueue.events import AdminAction
from tests import jobs
from tests._async.helpers import statuses, wait_for_state, wait_until
from tests._async.test_transactions import Native

pytestmark = pytest.mark.timeout(60)

FAST = pgqueue.RuntimeConfig(
    poll_interval=0.1,
    heartbeat_interval=0.3,
    rescue_after=5.0,
    leader_interval=0.2,
    retry_backoff=3600,
)
HOUR = timedelta(hours=1)


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


def snapshot(db: Any, table: str) -> list[tuple[Any, ...]]:
    """Every job's mutable state, to show that a refused call changed nothing."""
    return db.rows(
        f"SELECT id, status, scheduled_for, max_attempts, finished_at FROM {table} ORDER BY id"
    )


def set_status(db: Any, table: str, ids: list[int], status: str, ago: timedelta = HOUR) -> None:
    """Put jobs straight into a finished status, as if they ended ``ago``."""
    db.rows(
        f"UPDATE {table} SET status = $1, attempts = 1, finished_at = now() - $3::interval, "
        "last_error = CASE WHEN $1 = 'failed' THEN 'ValueError: boom' END "
        "WHERE id = ANY($2)",
        (status, ids, ago),
    )


# -- list_jobs ----------------------------------------------------------------------------------


async def test_list_jobs_filters_by_status_queue_kind_and_arguments(
    client: pgqueue.AsyncClient, db: Any, jobs_table: str, token: str
) -> None:
    emails = await client.add_jobs(
        [jobs.Record(token=token, n=i) for i in range(6)], options=pgqueue.JobOptions(queue="e")
    )
    reports = await client.add_jobs([jobs.Fail(token=token, message=f"m{i}") for i in range(4)])
    set_status(db, jobs_table, [h.id for h in reports[:3]], "failed")

    failed = await client.list_jobs(status="failed")
    assert [j.id for j in failed.jobs] == sorted((h.id for h in reports[:3]), reverse=True)
    assert failed.next_cursor is None
    assert all(j.last_error == "ValueError: boom" for j in failed.jobs)
    assert {j.id for j in (await client.list_jobs(queue="e")).jobs} == {h.id for h in emails}
    by_kind = await client.list_jobs(kind=jobs.Fail.kind, status=["pending", "failed"])
    assert {j.id for j in by_kind.jobs} == {h.id for h in reports}
    by_args = await client.list_jobs(args={"n": 3})
    assert [j.id for j in by_args.jobs] == [emails[3].id]
    assert (await client.list_jobs(args={"n": 3, "token": "other"})).jobs == []
    assert [j.id for j in (await client.list_jobs(ids=[emails[0].id, 10**12])).jobs] == [
        emails[0].id
    ]
    assert (await client.list_jobs(queue="nowhere")).jobs == []


async def test_list_jobs_pages_by_cursor_in_every_order(
    client: pgqueue.AsyncClient, token: str
) -> None:
    now = datetime.now(UTC)
    handles = [
        await client.add_job(jobs.Record(token=token, n=i), run_at=now + timedelta(minutes=i % 5))
        for i in range(23)
    ]
    ids = [h.id for h in handles]
    due = {h.id: h.scheduled_for for h in handles}
    expected = {
        "-id": sorted(ids, reverse=True),
        "id": sorted(ids),
        "due": sorted(ids, key=lambda i: (due[i], i)),
        "-due": sorted(ids, key=lambda i: (due[i], i), reverse=True),
    }
    for sort, want in expected.items():
        seen: list[int] = []
        cursor = None
        pages = 0
        while True:
            page = await client.list_jobs(sort=sort, limit=10, cursor=cursor)  # type: ignore[arg-type]
            seen += [j.id for j in page.jobs]
            pages += 1
            cursor = page.next_cursor
            if cursor is None:
                break
        assert seen == want, sort
        assert pages == 3, sort
    # a page's cursor stays right when jobs are added meanwhile (keyset, not offset)
    first = await client.list_jobs(sort="id", limit=5)
    await client.add_job(jobs.Record(token=token, n=99))
    second = await client.list_jobs(sort="id", limit=5, cursor=first.next_cursor)
    assert [j.id for j in second.jobs] == sorted(ids)[5:10]


async def test_list_jobs_time_ranges(
    client: pgqueue.AsyncClient, db: Any, jobs_table: str, token: str
) -> None:
    old, new = await client.add_jobs([jobs.Record(token=token, n=1), jobs.Record(token=token)])
    db.rows(
        f"UPDATE {jobs_table} SET created_at = now() - interval '2 days', "
        "scheduled_for = now() - interval '2 days' WHERE id = $1",
        (old.id,),
    )
    set_status(db, jobs_table, [old.id], "completed", ago=timedelta(days=1))
    recent = await client.list_jobs(created_after=HOUR)
    assert [j.id for j in recent.jobs] == [new.id]
    assert [j.id for j in (await client.list_jobs(created_before=HOUR)).jobs] == [old.id]
    since = datetime.now(UTC) - timedelta(days=3)
    assert len((await client.list_jobs(scheduled_after=since)).jobs) == 2
    assert [j.id for j in (await client.list_jobs(finished_before=HOUR)).jobs] == [old.id]
    naive = (datetime.now(UTC) - timedelta(days=3)).replace(tzinfo=None)  # read as UTC
    assert [j.id for j in (await client.list_jobs(finished_after=naive)).jobs] == [old.id]


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda c: c.list_jobs(status="stuck"), pgqueue.InvalidFilter),
        (lambda c: c.list_jobs(status=[]), pgqueue.InvalidFilter),
        (lambda c: c.list_jobs(queue="x'; DROP TABLE jobs; --"), pgqueue.InvalidName),
        (lambda c: c.list_jobs(kind="a" * 300), pgqueue.InvalidName),
        (lambda c: c.list_jobs(args=[1, 2]), pgqueue.InvalidFilter),
        (lambda c: c.list_jobs(args={"x": float("nan")}), pgqueue.InvalidFilter),
        (lambda c: c.list_jobs(args={"x": "\x00"}), pgqueue.InvalidFilter),
        (lambda c: c.list_jobs(limit=0), pgqueue.InvalidFilter),
        (lambda c: c.list_jobs(limit=-5), pgqueue.InvalidFilter),
        (lambda c: c.list_jobs(limit=10**9), pgqueue.InvalidFilter),
        (lambda c: c.list_jobs(sort="random()"), pgqueue.InvalidFilter),
        (lambda c: c.list_jobs(cursor="not-a-cursor"), pgqueue.InvalidFilter),
        (lambda c: c.list_jobs(created_after=3600), pgqueue.InvalidFilter),
        (lambda c: c.list_jobs(created_after=timedelta(days=10**8)), pgqueue.InvalidFilter),
        (lambda c: c.list_jobs(ids=[0]), pgqueue.InvalidFilter),
        (lambda c: c.list_jobs(colour="red"), pgqueue.InvalidFilter),
        (lambda c: c.retry_jobs(), pgqueue.InvalidFilter),
        (lambda c: c.delete_jobs(), pgqueue.InvalidFilter),
        (lambda c: c.retry_jobs(status="processing"), pgqueue.InvalidFilter),
        (lambda c: c.delete_jobs(status="processing"), pgqueue.InvalidFilter),
        (lambda c: c.cancel_jobs(status="completed"), pgqueue.InvalidFilter),
        (lambda c: c.retry_jobs(status="failed", batch_size=0), pgqueue.InvalidFilter),
        (lambda c: c.purge_jobs(older_than=-1), pgqueue.InvalidFilter),
        (lambda c: c.purge_jobs(older_than=HOUR, status="pending"), pgqueue.InvalidFilter),
        (lambda c: c.pause_queue("bad queue"), pgqueue.InvalidName),
        (lambda c: c.resume_queue(""), pgqueue.InvalidName),
        (lambda c: c.queue_stats(queue="../etc"), pgqueue.InvalidName),
    ],
)
async def test_bad_input_raises_a_clear_error_and_changes_nothing(
    client: pgqueue.AsyncClient, db: Any, jobs_table: str, token: str, call: Any, error: type
) -> None:
    handles = await client.add_jobs([jobs.Record(token=token, n=i) for i in range(3)])
    set_status(db, jobs_table, [handles[0].id], "failed")
    before = snapshot(db, jobs_table)
    with pytest.raises(error) as raised:
        await call(client)
    assert isinstance(raised.value, ValueError)
    assert str(raised.value)
    assert snapshot(db, jobs_table) == before
    assert not any(q.paused for q in await client.queue_stats())


async def test_a_cursor_is_tied_to_its_sort(client: pgqueue.AsyncClient, token: str) -> None:
    await client.add_jobs([jobs.Record(token=token, n=i) for i in range(3)])
    page = await client.list_jobs(limit=1)
    assert page.next_cursor is not None
    with pytest.raises(pgqueue.InvalidFilter, match="sorted by '-id'"):
        await client.list_jobs(limit=1, sort="due", cursor=page.next_cursor)


# -- get_job: attempt history ------------------------------------------------------------------


async def test_get_job_shows_each_attempt_with_its_worker(
    worker: pgqueue.AsyncClient, token: str
) -> None:
    failing = await worker.add_job(
        jobs.Fail(token=token), max_attempts=2, retry_backoff=timedelta(0)
    )
    done = await worker.add_job(jobs.Record(token=token))
    await worker.start(config=pgqueue.RuntimeConfig(poll_interval=0.1, retry_backoff=0))
    runtime = worker.runtime
    assert runtime is not None

    async def ended() -> bool:
        a, b = await worker.get_job(failing.id), await worker.get_job(done.id)
        return a is not None and a.status == "failed" and b is not None and b.finished_at

    await wait_for_state(ended, what="both ended")
    info = await worker.get_job(failing.id)
    assert info is not None
    assert [(a.number, a.outcome) for a in info.attempt_history] == [(1, "failed"), (2, "failed")]
    for attempt in info.attempt_history:
        assert attempt.instance_id == runtime.instance_id
        assert attempt.error == "ValueError: boom"
        assert "ValueError: boom" in (attempt.traceback or "")
        assert attempt.started_at is not None
        assert attempt.finished_at is not None
        assert attempt.started_at <= attempt.finished_at
        assert attempt.duration is not None
    assert info.claimed_by == runtime.instance_id
    assert info.claimed_at is not None
    ok = await worker.get_job(done.id)
    assert ok is not None
    assert [(a.number, a.outcome) for a in ok.attempt_history] == [(1, "completed")]
    assert ok.attempt_history[0].instance_id == runtime.instance_id
    assert ok.attempt_history[0].duration is not None


# -- retry ----------------------------------------------------------------------------------------


async def test_retry_runs_a_failed_job_again_with_one_more_attempt(
    worker: pgqueue.AsyncClient, token: str
) -> None:
    h = await worker.add_job(jobs.Fail(token=token), max_attempts=1)
    await worker.start(config=FAST)

    async def failed() -> bool:
        info = await worker.get_job(h.id)
        return info is not None and info.status == "failed"

    await wait_for_state(failed, what="failed")
    info = await worker.retry_job(h.id)
    # pending again (and maybe already claimed: the retry wakes the worker), one more attempt
    assert (info.max_attempts, info.finished_at) == (2, None)
    assert info.status in ("pending", "processing")
    await wait_until(lambda: len(jobs.RUNS[token]) == 2, what="run again")
    assert [attempt for _, attempt in jobs.RUNS[token]] == [1, 2]
    await wait_for_state(failed, what="failed again")
    final = await worker.get_job(h.id)
    assert final is not None
    assert [a.number for a in final.attempt_history] == [1, 2]


async def test_retry_and_delete_refuse_a_running_job(
    worker: pgqueue.AsyncClient, db: Any, jobs_table: str, token: str
) -> None:
    h = await worker.add_job(jobs.Block(token=token))
    await worker.start(config=FAST)
    await wait_until(lambda: jobs.RUNS[token], what="running")
    with pytest.raises(pgqueue.JobActionRefused, match="running") as refused:
        await worker.retry_job(h.id)
    assert (refused.value.job_id, refused.value.status) == (h.id, "processing")
    with pytest.raises(pgqueue.JobActionRefused, match="cancel it"):
        await worker.delete_job(h.id)
    result = await worker.retry_jobs([h.id])
    assert (result.matched, result.changed, list(result.refused)) == (1, 0, [h.id])
    assert statuses(db, jobs_table) == {"processing": 1}
    assert await worker.cancel_job(h.id) == "processing"
    await wait_until(lambda: statuses(db, jobs_table) == {"cancelled": 1}, what="cancelled")
    assert len(jobs.RUNS[token]) == 1


async def test_retry_makes_a_scheduled_job_due_now_and_reports_missing_ids(
    client: pgqueue.AsyncClient, token: str
) -> None:
    h = await client.add_job(jobs.Record(token=token), run_in=timedelta(days=1))
    info = await client.retry_job(h.id)
    assert info.status == "pending"
    assert info.scheduled_for < h.scheduled_for - timedelta(hours=23)
    result = await client.retry_jobs([h.id, 10**12])
    assert (result.changed, result.missing) == (1, [10**12])
    with pytest.raises(pgqueue.JobNotFound):
        await client.retry_job(10**12)


async def test_bulk_retry_by_filter_works_in_batches(
    client: pgqueue.AsyncClient, db: Any, jobs_table: str, token: str
) -> None:
    handles = await client.add_jobs([jobs.Record(token=token, n=i) for i in range(25)])
    others = await client.add_jobs(
        [jobs.Record(token=token) for _ in range(3)], options=pgqueue.JobOptions(queue="other")
    )
    set_status(db, jobs_table, [h.id for h in handles + others], "failed")
    before = snapshot(db, jobs_table)
    dry = await client.retry_jobs(queue="default", dry_run=True)
    assert (dry.matched, dry.changed, dry.dry_run) == (25, 0, True)
    assert snapshot(db, jobs_table) == before
    progress: list[tuple[int, int]] = []
    result = await client.retry_jobs(
        queue="default", batch_size=7, on_progress=lambda c, s: progress.append((c, s))
    )
    assert (result.matched, result.changed, result.refused) == (25, 25, {})
    assert progress == [(7, 7), (14, 14), (21, 21), (25, 25)]
    assert statuses(db, jobs_table) == {"pending": 25, "failed": 3}
    # a retry by filter without a status means failed and cancelled: never completed ones
    set_status(db, jobs_table, [h.id for h in handles], "completed")
    assert (await client.retry_jobs(queue="default")).matched == 0
    assert (await client.retry_jobs(queue="default", status="completed")).changed == 25


async def test_everything_needs_all_jobs(
    client: pgqueue.AsyncClient, db: Any, jobs_table: str, token: str
) -> None:
    handles = await client.add_jobs([jobs.Record(token=token, n=i) for i in range(4)])
    with pytest.raises(pgqueue.InvalidFilter, match="all_jobs=True"):
        await client.delete_jobs()
    result = await client.delete_jobs(all_jobs=True)
    assert (result.matched, result.changed) == (4, 4)
    assert statuses(db, jobs_table) == {}
    assert await client.get_job(handles[0].id) is None


# -- unique locks and job ids follow the actions ------------------------------------------------


async def test_delete_frees_the_job_id_and_the_unique_lock(
    client: pgqueue.AsyncClient, token: str
) -> None:
    keyed = await client.add_job(jobs.Record(token=token), job_id=f"report-{token}")
    unique = await client.add_job(jobs.Record(token=token, n=7), unique=HOUR)
    with pytest.raises(pgqueue.JobIdConflict):
        await client.add_job(jobs.Record(token=token), job_id=f"report-{token}")
    assert await client.delete_job(keyed.id) == "pending"
    assert await client.delete_job(unique.id) == "pending"
    again = await client.add_job(jobs.Record(token=token), job_id=f"report-{token}")
    assert again.inserted
    assert again.id != keyed.id
    assert (await client.add_job(jobs.Record(token=token, n=7), unique=HOUR)).inserted


async def test_a_retried_unique_job_takes_its_lock_again_or_reports_the_holder(
    client: pgqueue.AsyncClient, db: Any, jobs_table: str, token: str
) -> None:
    first = await client.add_job(jobs.Record(token=token, n=1), unique=HOUR)
    assert await client.cancel_job(first.id) == "pending"  # cancelling releases the lock
    second = await client.add_job(jobs.Record(token=token, n=1), unique=HOUR)
    with pytest.raises(pgqueue.JobActionRefused, match=f"identical job \\({second.id}\\)"):
        await client.retry_job(first.id)
    result = await client.retry_jobs(status="cancelled", kind=jobs.Record.kind)
    assert (result.changed, list(result.refused)) == (0, [first.id])
    assert (await client.get_job(first.id)).status == "cancelled"  # type: ignore[union-attr]
    assert await client.cancel_job(second.id) == "pending"
    info = await client.retry_job(first.id)
    assert info.status == "pending"
    # it holds the lock again, for its ttl
    with pytest.raises(pgqueue.DuplicateJob):
        await client.add_job(jobs.Record(token=token, n=1), unique=HOUR)
    holder = db.value(
        f'SELECT job_id FROM "{client.settings.schema}".pgqueue_unique_locks WHERE unique_key = $1',
        (info.unique_key,),
    )
    assert holder == first.id


# -- cancel ---------------------------------------------------------------------------------


async def test_cancel_jobs_by_filter(
    client: pgqueue.AsyncClient, db: Any, jobs_table: str, token: str
) -> None:
    emails = await client.add_jobs(
        [jobs.Record(token=token, n=i) for i in range(5)], options=pgqueue.JobOptions(queue="e")
    )
    await client.add_jobs([jobs.Record(token=token) for _ in range(2)])
    assert (await client.cancel_jobs(queue="e", dry_run=True)).matched == 5
    result = await client.cancel_jobs(queue="e")
    assert (result.matched, result.changed) == (5, 5)
    assert statuses(db, jobs_table) == {"cancelled": 5, "pending": 2}
    again = await client.cancel_jobs([emails[0].id])
    assert again.changed == 0
    assert again.refused == {emails[0].id: "it has already ended (cancelled)"}
    info = await client.get_job(emails[0].id)
    assert info is not None
    assert info.last_error == "cancelled before it ran"


# -- pause and resume -------------------------------------------------------------------------


async def test_a_paused_queue_runs_nothing_until_resumed(
    worker: pgqueue.AsyncClient, db: Any, jobs_table: str, token: str
) -> None:
    assert await worker.pause_queue("slow") == ["slow"]
    await worker.start({"slow": 2, "default": 2}, config=FAST)
    held = await worker.add_job(jobs.Record(token=token, n=1), queue="slow")
    ran = await worker.add_job(jobs.Record(token=token, n=2))
    # the other queue's job runs, and the paused queue's still waits after a few claims
    await wait_until(lambda: ran.id in [i for i, _ in jobs.RUNS[token]], what="other queue ran")
    await worker.add_job(jobs.Record(token=token, n=3))
    await wait_until(lambda: len(jobs.RUNS[token]) == 2, what="a second job of the other queue")
    assert held.id not in [i for i, _ in jobs.RUNS[token]]
    stats = {q.queue: q for q in await worker.queue_stats()}
    assert stats["slow"].paused
    assert stats["slow"].paused_at is not None
    assert stats["slow"].counts.available == 1
    assert not stats["default"].paused
    assert await worker.pause_queue("slow") == ["slow"]  # again: no change, no error
    assert await worker.resume_queue("slow") == ["slow"]
    await wait_until(lambda: held.id in [i for i, _ in jobs.RUNS[token]], what="resumed")
    assert await worker.resume_queue("slow") == []  # not paused any more


async def test_pause_every_queue_and_resume_them_all(
    client: pgqueue.AsyncClient, token: str
) -> None:
    await client.add_job(jobs.Record(token=token), queue="a")
    await client.add_job(jobs.Record(token=token), queue="b")
    assert await client.pause_queue("*") == ["a", "b"]
    assert [q.queue for q in await client.queue_stats() if q.paused] == ["a", "b"]
    assert await client.resume_queue("b") == ["b"]
    assert await client.resume_queue("*") == ["a"]
    assert not any(q.paused for q in await client.queue_stats())


# -- stats, workers, purge ------------------------------------------------------------------------


async def test_queue_stats_counts_each_state_per_queue_and_kind(
    client: pgqueue.AsyncClient, db: Any, jobs_table: str, token: str
) -> None:
    due = await client.add_jobs([jobs.Record(token=token, n=i) for i in range(4)])
    await client.add_job(jobs.Record(token=token), run_in=HOUR)
    fails = await client.add_jobs([jobs.Fail(token=token) for _ in range(3)])
    set_status(db, jobs_table, [fails[0].id, fails[1].id], "failed")
    set_status(db, jobs_table, [fails[2].id], "completed")
    set_status(db, jobs_table, [due[3].id], "cancelled")
    db.rows(
        f"UPDATE {jobs_table} SET scheduled_for = now() - interval '10 minutes' WHERE id = $1",
        (due[0].id,),
    )
    (default,) = await client.queue_stats()
    assert default.queue == "default"
    c = default.counts
    assert (c.available, c.scheduled, c.processing, c.failed, c.cancelled, c.completed) == (
        3,
        1,
        0,
        2,
        1,
        None,
    )
    assert c.pending == 4
    assert (default.oldest_available_age or 0) >= 590
    assert set(default.kinds) == {jobs.Record.kind, jobs.Fail.kind}
    assert default.kinds[jobs.Fail.kind].failed == 2
    assert default.unknown_kinds == [jobs.Record.kind]  # no worker runs it
    assert (default.workers, default.concurrency, default.paused) == (0, 0, False)
    (counted,) = await client.queue_stats(completed=True)
    assert counted.counts.completed == 1
    assert counted.kinds[jobs.Fail.kind].completed == 1
    assert await client.queue_stats(queue="other") == []


async def test_list_workers_shows_each_process_and_its_running_jobs(
    worker: pgqueue.AsyncClient, token: str
) -> None:
    h = await worker.add_job(jobs.Block(token=token))
    await worker.start({"default": 3}, config=FAST)
    await wait_until(lambda: jobs.RUNS[token], what="running")
    runtime = worker.runtime
    assert runtime is not None

    async def leading() -> bool:
        found = await worker.list_workers()
        return bool(found) and found[0].is_leader

    await wait_for_state(leading, what="the worker leads")
    (me,) = await worker.list_workers()
    assert me.instance_id == runtime.instance_id
    assert me.queues == {"default": 3}
    assert me.pid > 0
    assert me.hostname
    assert 0 <= me.heartbeat_age < 5
    assert [(r.id, r.kind, r.attempt) for r in me.running] == [(h.id, jobs.Block.kind, 1)]
    (stats,) = await worker.queue_stats()
    assert (stats.workers, stats.concurrency, stats.counts.processing) == (1, 3, 1)
    assert stats.unknown_kinds == []
    await worker.cancel_job(h.id)


async def test_purge_deletes_finished_jobs_older_than_a_given_age(
    client: pgqueue.AsyncClient, db: Any, jobs_table: str, token: str
) -> None:
    handles = await client.add_jobs([jobs.Record(token=token, n=i) for i in range(10)])
    ids = [h.id for h in handles]
    set_status(db, jobs_table, ids[:4], "completed", ago=timedelta(days=8))
    set_status(db, jobs_table, ids[4:6], "failed", ago=timedelta(days=8))
    set_status(db, jobs_table, ids[6:8], "completed", ago=timedelta(hours=1))
    dry = await client.purge_jobs(older_than=timedelta(days=7), dry_run=True)
    assert (dry.matched, dry.changed) == (6, 0)
    only = await client.purge_jobs(older_than=timedelta(days=7), status="completed", batch_size=3)
    assert only.changed == 4
    assert (await client.purge_jobs(older_than=timedelta(days=7), queue="other")).changed == 0
    assert (await client.purge_jobs(older_than=7 * 86400.0)).changed == 2
    assert statuses(db, jobs_table) == {"completed": 2, "pending": 2}


# -- the caller's transaction and events --------------------------------------------------------


async def test_admin_calls_join_the_callers_transaction(
    client: pgqueue.AsyncClient, native_tx: Native, db: Any, jobs_table: str, token: str
) -> None:
    h = await client.add_job(jobs.Record(token=token), run_in=HOUR)
    await native_tx.begin()
    assert (await client.retry_job(h.id, tx=native_tx.obj)).status == "pending"
    assert await client.pause_queue("default", tx=native_tx.obj) == ["default"]
    assert [j.id for j in (await client.list_jobs(tx=native_tx.obj)).jobs] == [h.id]
    assert await client.delete_job(h.id, tx=native_tx.obj) == "pending"
    assert await client.get_job(h.id, tx=native_tx.obj) is None
    assert await client.get_job(h.id) is not None  # not committed: others still see it
    await native_tx.rollback()
    info = await client.get_job(h.id)
    assert info is not None
    assert info.scheduled_for == h.scheduled_for
    assert not any(q.paused for q in await client.queue_stats())


async def test_admin_actions_are_events(client: pgqueue.AsyncClient, token: str) -> None:
    seen: list[AdminAction] = []
    client.events.subscribe(seen.append, AdminAction)
    a, b = await client.add_jobs([jobs.Record(token=token, n=i) for i in range(2)])
    await client.retry_job(a.id)
    await client.delete_jobs(queue="default")
    await client.pause_queue("default")
    await client.resume_queue("default")
    await client.purge_jobs(older_than=HOUR)
    assert [(e.action, sorted(e.job_ids)) for e in seen] == [
        ("retry", [a.id]),
        ("delete", sorted([a.id, b.id])),
        ("pause", []),
        ("resume", []),
        ("purge", []),
    ]
    assert seen[2].detail == {"queues": ["default"]}
