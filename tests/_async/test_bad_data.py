"""A job's own data never wedges a worker, on every driver mode (SPEC §8, issue 12 items 1-8).

Each case ends as a recorded attempt with a clear error, and other jobs' outcomes are written
alongside it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

import pgqueue
from tests import hostile_jobs as hj
from tests import jobs
from tests._async.helpers import wait_until

pytestmark = pytest.mark.timeout(120)

FAST = pgqueue.RuntimeConfig(
    poll_interval=0.2,
    heartbeat_interval=0.2,
    rescue_after=1.0,
    leader_interval=0.3,
    retry_backoff=0.05,
    retry_backoff_max=0.1,
    shutdown_timeout=5.0,
)

REGISTRY = pgqueue.WorkerRegistry(*hj.registry, jobs.Record)


@pytest.fixture
async def worker(
    driver: pgqueue.AsyncDriver, settings: pgqueue.Settings
) -> AsyncIterator[pgqueue.AsyncClient]:
    client = pgqueue.AsyncClient(driver, registry=REGISTRY, settings=settings)
    await client.migrate()
    yield client
    await client.stop(0)


@pytest.fixture
def token() -> str:
    return uuid.uuid4().hex


def counts(db: Any, table: str) -> dict[str, int]:
    return dict(db.rows(f"SELECT status, count(*) FROM {table} GROUP BY status"))


async def info(client: pgqueue.AsyncClient, job_id: int) -> pgqueue.JobInfo:
    found = await client.get_job(job_id)
    assert found is not None
    return found


@pytest.mark.parametrize("cls", [hj.RaiseText, hj.ARaiseText], ids=["sync", "async"])
async def test_unstorable_error_text_is_escaped_and_others_are_recorded(
    worker: pgqueue.AsyncClient,
    db: Any,
    jobs_table: str,
    token: str,
    cls: type[pgqueue.Worker],
) -> None:
    # The odd jobs end in the same flushes as twenty plain ones: none of them may stay behind.
    cases = {"a<NUL>b": "a\\x00b", "x<SURROGATE>y": "x\\ud800y"}
    bad = {
        stored: await worker.add_job(cls(token=token, text=text), max_attempts=1)  # type: ignore[call-arg]
        for text, stored in cases.items()
    }
    await worker.add_jobs([jobs.Record(token=token, n=i) for i in range(20)])
    await worker.start({"default": 10}, config=FAST)
    await wait_until(
        lambda: counts(db, jobs_table) == {"completed": 20, "failed": 2}, what="all recorded"
    )
    for stored, handle in bad.items():
        failed = await info(worker, handle.id)
        assert failed.last_error == f"RuntimeError: {stored}"
        assert failed.attempts == 1
        assert [e["error"] for e in failed.errors] == [f"RuntimeError: {stored}"]
        assert stored in failed.errors[0]["traceback"]
    assert len(hj.RUNS[token]) == 2


@pytest.mark.parametrize("cls", [hj.RaiseUnprintable, hj.ARaiseUnprintable], ids=["sync", "async"])
async def test_exception_whose_str_raises_is_a_charged_failure(
    worker: pgqueue.AsyncClient, db: Any, jobs_table: str, token: str, cls: type[pgqueue.Worker]
) -> None:
    h = await worker.add_job(cls(token=token), max_attempts=2)  # type: ignore[call-arg]
    await worker.start(config=FAST)
    await wait_until(lambda: counts(db, jobs_table) == {"failed": 1}, what="failed")
    failed = await info(worker, h.id)
    assert failed.attempts == 2
    assert failed.last_error == "UnprintableError: <str() of the exception failed: RuntimeError>"
    assert [e["attempt"] for e in failed.errors] == [1, 2]
    assert [a for _, a in hj.RUNS[token]] == [1, 2]  # charged each time: no loop


BAD_OPTIONS = ["[]", "null", '"x"', '{"backoff": "x"}', '{"timeout": -1}', '{"timeout": true}']


async def test_unreadable_stored_options_fail_the_job_once(
    worker: pgqueue.AsyncClient, db: Any, jobs_table: str, token: str
) -> None:
    handles = []
    for options in BAD_OPTIONS:
        h = await worker.add_job(hj.RaiseText(token=token, text="never runs"), max_attempts=5)
        db.rows(f"UPDATE {jobs_table} SET options = $1::jsonb WHERE id = $2", (options, h.id))
        handles.append(h)
    await worker.start(config=FAST)
    await wait_until(lambda: counts(db, jobs_table) == {"failed": len(BAD_OPTIONS)}, what="failed")
    for h in handles:
        failed = await info(worker, h.id)
        assert failed.attempts == 1
        assert failed.last_error is not None
        assert failed.last_error.startswith("cannot read the job's stored options: ")
    assert hj.RUNS[token] == []  # never ran


async def test_job_past_its_attempts_is_failed_without_running(
    worker: pgqueue.AsyncClient, db: Any, jobs_table: str, token: str
) -> None:
    h = await worker.add_job(hj.Sleep(token=token), max_attempts=3)
    db.rows(f"UPDATE {jobs_table} SET attempts = 3 WHERE id = $1", (h.id,))
    await worker.start(config=FAST)
    await wait_until(lambda: counts(db, jobs_table) == {"failed": 1}, what="failed")
    failed = await info(worker, h.id)
    assert failed.last_error == (
        "not run: no attempts left (claimed as attempt 4 of max_attempts 3)"
    )
    assert hj.RUNS[token] == []


async def test_outcome_the_database_refuses_does_not_hold_back_the_batch(
    worker: pgqueue.AsyncClient, db: Any, jobs_table: str, token: str
) -> None:
    # A constraint of the operator's makes PostgreSQL refuse one job's outcome. The batch it
    # is written in fails; the others are written one by one, and the refused one is recorded
    # as failed with a message saying so.
    constraint = f"refuse_{token[:8]}"
    db.rows(
        f"ALTER TABLE {jobs_table} ADD CONSTRAINT {constraint} "
        "CHECK (last_error IS NULL OR last_error NOT LIKE '%refuse-me%')"
    )
    bad = await worker.add_job(hj.RaiseText(token=token, text="refuse-me"), max_attempts=1)
    await worker.add_jobs([jobs.Record(token=token, n=i) for i in range(20)])
    await worker.start({"default": 10}, config=FAST)
    await wait_until(
        lambda: counts(db, jobs_table) == {"completed": 20, "failed": 1}, what="all recorded"
    )
    failed = await info(worker, bad.id)
    assert failed.last_error is not None
    assert failed.last_error.startswith(
        "the outcome of this attempt could not be recorded: the database refused it ("
    )
    assert constraint in failed.last_error


async def test_coroutine_that_swallows_cancellation_still_times_out(
    worker: pgqueue.AsyncClient,
    db: Any,
    jobs_table: str,
    token: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="pgqueue")
    stuck = await worker.add_job(
        hj.SwallowCancel(token=token, seconds=6), timeout=timedelta(seconds=1), max_attempts=1
    )
    behind = await worker.add_job(hj.Sleep(token=token))
    await worker.start({"default": 1}, config=FAST)
    runtime = worker.runtime
    assert runtime is not None
    # The overrun is a failed attempt, recorded about 1 s (timeout) + 1 s (grace) in, and the
    # one slot is free for the job behind it, while the stuck coroutine still runs.
    await wait_until(
        lambda: counts(db, jobs_table) == {"failed": 1, "completed": 1},
        timeout=5,
        what="timed out and the next job ran",
    )
    assert not hj.ENDED[token].is_set()
    assert runtime.stuck_jobs == 1
    failed = await info(worker, stuck.id)
    assert (failed.status, failed.attempts, failed.last_error) == (
        "failed",
        1,
        "timed out after 1s",
    )
    assert (await info(worker, behind.id)).status == "completed"
    assert any(
        f"job {stuck.id} (swallow_cancel): process() overran its timeout" in r.getMessage()
        for r in caplog.records
    )
    # When it finally returns (released now, rather than after its 6 s), nothing changes but
    # the count.
    hj.RELEASE[token].set()
    await wait_until(hj.ENDED[token].is_set, timeout=10, what="the stuck run ended")
    await wait_until(lambda: runtime.stuck_jobs == 0, what="no longer counted")
    assert (await info(worker, stuck.id)).status == "failed"


async def test_unknown_kind_is_warned_about(
    worker: pgqueue.AsyncClient,
    driver: pgqueue.AsyncDriver,
    settings: pgqueue.Settings,
    token: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    @dataclass
    class NobodyRunsMe(pgqueue.Worker):
        kind = "nobody_runs_me"
        n: int = 0

    caplog.set_level(logging.WARNING, logger="pgqueue")
    enqueuer = pgqueue.AsyncClient(driver, settings=settings)  # no registry: any kind
    await enqueuer.add_jobs([NobodyRunsMe(n=i) for i in range(3)])
    await enqueuer.add_job(NobodyRunsMe(), queue="elsewhere")  # not a queue of the worker
    config = pgqueue.RuntimeConfig(
        poll_interval=0.2, heartbeat_interval=0.1, rescue_after=1.0, unknown_kind_interval=0.1
    )
    await worker.start({"default": 2}, config=config)

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if "no running worker" in r.getMessage()]

    expected = (
        "3 due job(s) of kind 'nobody_runs_me' wait in queue 'default', and no running worker "
        "registers that kind: start a worker whose registry has it (or cancel the jobs)"
    )
    await wait_until(lambda: warnings(), timeout=5, what="a warning")
    assert warnings() == [expected]
    # warned again while they wait: every 10 checks
    await wait_until(lambda: len(warnings()) >= 2, timeout=10, what="a second warning")
    assert set(warnings()) == {expected}


async def test_kind_run_by_another_live_worker_is_not_warned_about(
    worker: pgqueue.AsyncClient,
    driver: pgqueue.AsyncDriver,
    settings: pgqueue.Settings,
    db: Any,
    token: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    @dataclass
    class NobodyRunsMe(pgqueue.Worker):
        kind = "nobody_runs_me"

    caplog.set_level(logging.WARNING, logger="pgqueue")
    enqueuer = pgqueue.AsyncClient(driver, settings=settings)
    await enqueuer.add_jobs([jobs.Fail(token=token), NobodyRunsMe()])
    # Another live instance serves "default" with a registry that has "fail" (its row, as its
    # heartbeat keeps it); this worker's registry lacks both kinds.
    db.rows(
        f'INSERT INTO "{settings.schema}"."{settings.prefix}instances" '
        "(instance_id, queues, kinds) VALUES ($1, $2::jsonb, $3)",
        (uuid.uuid4(), '{"default": 1}', ["fail"]),
    )
    config = pgqueue.RuntimeConfig(
        poll_interval=0.2, heartbeat_interval=0.1, rescue_after=30.0, unknown_kind_interval=0.1
    )
    await worker.start({"default": 2}, config=config)

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if "no running worker" in r.getMessage()]

    await wait_until(lambda: warnings(), timeout=5, what="a warning")
    await wait_until(lambda: len(warnings()) >= 2, timeout=10, what="a second warning")
    assert {w.split(" wait in")[0] for w in warnings()} == {"1 due job(s) of kind 'nobody_runs_me'"}


async def test_durations_are_recorded_and_failures_logged_with_traceback(
    worker: pgqueue.AsyncClient,
    db: Any,
    jobs_table: str,
    token: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="pgqueue")
    ok = await worker.add_job(hj.Sleep(token=token, seconds=0.3))
    bad = await worker.add_job(hj.RaiseText(token=token, text="boom"), max_attempts=1)
    await worker.start(config=FAST)
    await wait_until(
        lambda: counts(db, jobs_table) == {"completed": 1, "failed": 1}, what="both ended"
    )
    done = await info(worker, ok.id)
    assert done.duration is not None
    assert 0.3 <= done.duration < 2.0
    failed = await info(worker, bad.id)
    assert failed.duration is not None
    assert 0 <= failed.duration < 1.0
    (entry,) = failed.errors
    assert entry["duration"] == pytest.approx(failed.duration, abs=1e-5)
    assert entry["started_at"] <= entry["at"]
    failures = [r for r in caplog.records if f"job {bad.id} (raise_text)" in r.getMessage()]
    assert len(failures) == 1
    assert failures[0].levelno == logging.WARNING
    assert failures[0].exc_info is not None
    assert failures[0].exc_info[1] is not None
    assert str(failures[0].exc_info[1]) == "boom"
    finishes = [r for r in caplog.records if f"job {ok.id} (sleep)" in r.getMessage()]
    assert [r.levelno for r in finishes] == [logging.DEBUG]
    assert "complete in 0.3" in finishes[0].getMessage()


async def test_deeply_nested_arguments_are_refused_at_enqueue(
    client: pgqueue.AsyncClient, db: Any, jobs_table: str
) -> None:
    deep: Any = []
    for _ in range(10_000):
        deep = [deep]

    @dataclass
    class Deep(pgqueue.Worker):
        value: Any

    with pytest.raises(pgqueue.JobSerializationError, match="nested too deeply"):
        await client.add_job(Deep(value=deep))
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == 0


async def test_system_exit_from_a_job_stops_run_and_is_raised_again(
    worker: pgqueue.AsyncClient, db: Any, jobs_table: str, settings: pgqueue.Settings
) -> None:
    # Not swallowed: the worker stops at once and run() raises it; the job gets no outcome
    # (its attempt counted, left for a rescue, as after a crash) and the instance is gone.
    other = pgqueue.AsyncClient(worker.driver, settings=settings)
    h = await other.add_job(jobs.Interrupt(what="exit", code=7))
    runner = pgqueue.AsyncClient(
        worker.driver, registry=pgqueue.WorkerRegistry(jobs.Interrupt), settings=settings
    )
    with pytest.raises(SystemExit) as caught:
        await runner.run(config=FAST)
    assert caught.value.code == 7
    assert runner.runtime is None
    assert db.rows(f"SELECT status, attempts FROM {jobs_table} WHERE id = $1", (h.id,)) == [
        ("processing", 1)
    ]
    instances = f'"{settings.schema}"."{settings.prefix}instances"'
    assert db.value(f"SELECT count(*) FROM {instances}") == 0
