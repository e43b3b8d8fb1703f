"""pgqueue.testing, tested with the fixtures of its own pytest plugin (pgqueue.pytest_plugin).

The plugin is loaded because pgqueue is installed; this module points its database at the
suite's own (``pgqueue_dsn``) and gives its clients this module's registry
(``pgqueue_registry``): the two overrides docs/testing.md describes.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pgqueue
import pgqueue.events
from pgqueue.testing import (
    AsyncQueueTester,
    ProcessTimeout,
    QueueTester,
    aperform_job,
    assert_enqueued,
    drain,
    enqueued_jobs,
    perform_job,
    refute_enqueued,
)

RAN: list[str] = []
# the client a running job enqueues through (set by the tests that need one)
CLIENT: list[Any] = []
# the id of a job a test left in the transaction of pgqueue_tx (rolled back since)
LEFT_IN_TX: list[int] = []


@dataclass
class Note(pgqueue.Worker):
    text: str
    tags: list[str] | None = None

    def process(self, ctx: pgqueue.JobContext) -> None:
        RAN.append(self.text)


@dataclass
class AsyncNote(pgqueue.Worker):
    text: str

    async def process(self, ctx: pgqueue.JobContext) -> None:
        await asyncio.sleep(0)
        RAN.append(f"async {self.text}")


@dataclass
class Flaky(pgqueue.Worker):
    """Fails until attempt ``ok_from``."""

    job_options = pgqueue.JobOptions(max_attempts=3)
    ok_from: int = 99

    def process(self, ctx: pgqueue.JobContext) -> None:
        RAN.append(f"flaky {ctx.attempt}")
        if ctx.attempt < self.ok_from:
            raise ValueError(f"attempt {ctx.attempt} failed")


@dataclass
class Steer(pgqueue.Worker):
    how: str

    def process(self, ctx: pgqueue.JobContext) -> None:
        if self.how == "retry":
            raise pgqueue.Retry(in_=timedelta(minutes=5))
        if self.how == "cancel":
            raise pgqueue.Cancel("no longer wanted")
        raise pgqueue.Discard("bad input")


@dataclass
class Slow(pgqueue.Worker):
    """Waits to be told to stop (its timeout), at most 10 s."""

    def process(self, ctx: pgqueue.JobContext) -> None:
        ctx.cancelled.wait(10)


@dataclass
class AsyncSlow(pgqueue.Worker):
    async def process(self, ctx: pgqueue.JobContext) -> None:
        await asyncio.sleep(10)


@dataclass
class Fanout(pgqueue.Worker):
    """Enqueues ``count`` notes through ``CLIENT[0]``."""

    count: int

    def process(self, ctx: pgqueue.JobContext) -> None:
        for i in range(self.count):
            CLIENT[0].add_job(Note(f"child {i}"))


@dataclass
class Snoozer(pgqueue.Worker):
    def process(self, ctx: pgqueue.JobContext) -> None:
        raise pgqueue.Retry(in_=timedelta(seconds=30))


@dataclass
class Unregistered(pgqueue.Worker):
    def process(self, ctx: pgqueue.JobContext) -> None: ...


REGISTRY = pgqueue.WorkerRegistry(Note, AsyncNote, Flaky, Steer, Slow, AsyncSlow, Fanout, Snoozer)


@pytest.fixture(scope="session")
def pgqueue_dsn(database_url: str) -> str:
    return database_url


@pytest.fixture(scope="session")
def pgqueue_registry() -> pgqueue.WorkerRegistry:
    return REGISTRY


@pytest.fixture(autouse=True)
def _reset() -> None:
    RAN.clear()
    CLIENT.clear()


# -- perform_job: no database ---------------------------------------------------------------


def test_perform_job_completes_and_reports_the_run() -> None:
    result = perform_job(Note("hello", tags=["a"]))
    assert RAN == ["hello"]
    assert (result.outcome, result.id, result.kind, result.queue, result.attempt) == (
        "completed",
        None,
        "note",
        "default",
        1,
    )
    assert result.args == {"text": "hello", "tags": ["a"]}
    assert (result.error, result.exception, result.retry_in) == (None, None, None)
    assert result.duration is not None
    assert result.duration >= 0


def test_perform_job_from_a_class_and_args_and_an_async_job() -> None:
    assert perform_job(Note, {"text": "from args"}).outcome == "completed"
    assert perform_job(AsyncNote("x")).outcome == "completed"
    assert RAN == ["from args", "async x"]
    with pytest.raises(TypeError, match="only with a job class"):
        perform_job(Note("x"), {"text": "y"})


def test_perform_job_failures_retry_until_the_last_attempt() -> None:
    first = perform_job(Flaky())
    assert first.outcome == "retry"
    assert first.error == "ValueError: attempt 1 failed"
    assert isinstance(first.exception, ValueError)
    assert first.retry_in is not None
    assert first.retry_in > 0
    last = perform_job(Flaky(), attempt=3)  # max_attempts=3 from the class's job_options
    assert (last.outcome, last.attempt, last.retry_in) == ("failed", 3, None)
    assert perform_job(Flaky(), attempt=2, max_attempts=2).outcome == "failed"
    assert perform_job(Flaky(ok_from=2), attempt=2).outcome == "completed"


def test_perform_job_retry_cancel_discard() -> None:
    snoozed = perform_job(Steer("retry"))
    assert (snoozed.outcome, snoozed.retry_in, snoozed.exception) == ("snoozed", 300.0, None)
    cancelled = perform_job(Steer("cancel"))
    assert (cancelled.outcome, cancelled.error) == ("cancelled", "no longer wanted")
    discarded = perform_job(Steer("discard"))
    assert (discarded.outcome, discarded.error, discarded.retry_in) == ("failed", "bad input", None)


@pytest.mark.parametrize("job", [Slow(), AsyncSlow()], ids=["sync", "async"])
def test_perform_job_timeout(job: pgqueue.Worker) -> None:
    result = perform_job(job, timeout=0.2)
    assert result.outcome == "retry"
    assert result.error == "timed out after 0.2s"
    assert isinstance(result.exception, ProcessTimeout)
    assert result.duration is not None
    assert 0.2 <= result.duration < 5


def test_perform_job_refuses_what_add_job_refuses() -> None:
    with pytest.raises(pgqueue.JobSerializationError, match="'tags'"):
        perform_job(Note("x", tags={"a"}))  # type: ignore[arg-type]
    with pytest.raises(pgqueue.UnknownJobKind):
        perform_job(Unregistered(), registry=REGISTRY)
    with pytest.raises(ValueError, match="attempt"):
        perform_job(Note("x"), attempt=0)


async def test_perform_job_inside_a_running_loop() -> None:
    # the sync function moves to a thread (an async job needs a loop of its own there)
    assert perform_job(AsyncNote("sync call")).outcome == "completed"
    # the async twin runs an async job on this loop
    assert (await aperform_job(AsyncNote("awaited"))).outcome == "completed"
    assert (await aperform_job(AsyncSlow(), timeout=0.1)).outcome == "retry"
    assert RAN == ["async sync call", "async awaited"]


# -- drain ------------------------------------------------------------------------------------


def test_drain_runs_due_jobs_in_claim_order_and_records_outcomes(
    pgqueue_client: pgqueue.Client,
) -> None:
    client = pgqueue_client
    low = client.add_job(Note("low"))
    high = client.add_job(Note("high"), priority=5)
    other = client.add_job(Note("other queue"), queue="zz")
    later = client.add_job(Note("later"), run_in=timedelta(hours=1))
    flaky = client.add_job(Flaky())
    events: list[pgqueue.events.Event] = []
    client.events.subscribe(events.append, pgqueue.events.JobStarted, pgqueue.events.JobFinished)
    results = drain(client)
    assert [r.id for r in results] == [high.id, low.id, flaky.id, other.id]
    # a worker's events, from the run's own instance
    assert [type(e).__name__ for e in events[4:6]] == ["JobStarted", "JobFailed"]
    assert len(events) == 8
    assert RAN == ["high", "low", "flaky 1", "other queue"]
    assert [r.outcome for r in results] == ["completed", "completed", "retry", "completed"]
    assert client.get_job(high.id).status == "completed"  # type: ignore[union-attr]
    failed = client.get_job(flaky.id)
    assert failed is not None
    assert (failed.status, failed.attempts, failed.last_error) == (
        "pending",
        1,
        "ValueError: attempt 1 failed",
    )
    # the retry and the scheduled job are not due: nothing more runs
    assert drain(client) == []
    assert client.get_job(later.id).status == "pending"  # type: ignore[union-attr]


def test_drain_one_queue_and_jobs_that_enqueue_jobs(pgqueue_client: pgqueue.Client) -> None:
    client = pgqueue_client
    CLIENT.append(client)
    client.add_job(Note("elsewhere"), queue="other")
    client.add_job(Fanout(2))
    results = drain(client, "default")
    assert [r.kind for r in results] == ["fanout", "note", "note"]
    assert RAN == ["child 0", "child 1"]
    assert [j.queue for j in enqueued_jobs(client)] == ["other"]


def test_drain_with_scheduled_runs_retries_until_they_fail_for_good(
    pgqueue_client: pgqueue.Client,
) -> None:
    client = pgqueue_client
    later = client.add_job(Note("in an hour"), run_in=timedelta(hours=1))
    soon = client.add_job(Note("in a minute"), run_in=timedelta(minutes=1))
    flaky = client.add_job(Flaky())
    results = drain(client, with_scheduled=True)
    # Made due in the order of their due times: the retry (due in seconds) first, then the
    # minute, then the hour; the second retry is scheduled again, and made due once they ran.
    assert [(r.id, r.outcome) for r in results] == [
        (flaky.id, "retry"),
        (flaky.id, "retry"),
        (soon.id, "completed"),
        (later.id, "completed"),
        (flaky.id, "failed"),
    ]
    assert client.get_job(flaky.id).status == "failed"  # type: ignore[union-attr]
    assert enqueued_jobs(client) == []


def test_drain_limit_and_the_guard_against_endless_snoozes(
    pgqueue_client: pgqueue.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = pgqueue_client
    client.add_job(Snoozer())
    results = drain(client, with_scheduled=True, limit=3)
    assert [r.outcome for r in results] == ["snoozed"] * 3
    monkeypatch.setattr("pgqueue._sync.testing.DRAIN_MAX_RUNS", 5)
    with pytest.raises(RuntimeError, match="drain ran 5 jobs"):
        drain(client, with_scheduled=True)


def test_drain_needs_a_registry(pgqueue_client: pgqueue.Client) -> None:
    bare = pgqueue.Client(pgqueue_client.driver, settings=pgqueue_client.settings)
    with pytest.raises(pgqueue.ConfigurationError, match="registry"):
        drain(bare)
    with pytest.raises(TypeError, match="QueueTester needs a Client"):
        QueueTester(object())  # type: ignore[arg-type]


def test_drain_in_the_rolled_back_transaction(
    pgqueue_tx: psycopg.Connection[Any], pgqueue_tx_client: pgqueue.Client
) -> None:
    client = pgqueue_tx_client
    CLIENT.append(client)
    pgqueue_tx.execute("CREATE TEMPORARY TABLE orders (id int)")
    pgqueue_tx.execute("INSERT INTO orders VALUES (1)")
    job = client.add_job_with_tx(pgqueue_tx, Fanout(1))
    results = drain(client)
    assert [r.outcome for r in results] == ["completed", "completed"]
    assert client.get_job(job.id).status == "completed"  # type: ignore[union-attr]
    # the jobs' rows (and the one the job enqueued) are in this transaction only
    table = f'"{client.settings.schema}"."{client.settings.prefix}jobs"'
    with psycopg.connect(pgqueue_tx.info.dsn, autocommit=True) as other:
        assert other.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,)
    assert pgqueue_tx.execute(f"SELECT count(*) FROM {table}").fetchone() == (2,)
    LEFT_IN_TX.append(job.id)


def test_the_transaction_fixture_starts_empty(pgqueue_tx_client: pgqueue.Client) -> None:
    if not LEFT_IN_TX:
        pytest.skip("checks what test_drain_in_the_rolled_back_transaction left: run it first")
    assert pgqueue_tx_client.get_job(LEFT_IN_TX[0]) is None  # rolled back
    assert enqueued_jobs(pgqueue_tx_client, status=None) == []


# -- what is enqueued -------------------------------------------------------------------------


def test_assert_and_refute_enqueued(pgqueue_client: pgqueue.Client) -> None:
    client = pgqueue_client
    client.add_job(Note("a", tags=["x", "y"]))
    client.add_job(Note("b"), queue="mail")
    assert [j.payload["text"] for j in assert_enqueued(client, kind=Note)] == ["a", "b"]
    assert_enqueued(client, kind="note", count=2)
    assert_enqueued(client, kind=Note, queue="mail", args={"text": "b"}, count=1)
    assert_enqueued(client, args={"tags": ["x"]})  # partial, as jsonb @> matches
    refute_enqueued(client, kind=Flaky)
    refute_enqueued(client, kind=Note, args={"text": "c"})
    assert enqueued_jobs(client, kind=[Note, "flaky"], queue="default")[0].payload["text"] == "a"

    with pytest.raises(AssertionError) as missing:
        assert_enqueued(client, kind=Note, args={"text": "c"})
    assert str(missing.value) == (
        'expected a pending job of kind \'note\' with args containing {"text": "c"}, '
        "found none\n"
        "pending jobs:\n"
        '  #1 note (queue \'default\', pending) args {"tags": ["x", "y"], "text": "a"}\n'
        '  #2 note (queue \'mail\', pending) args {"tags": null, "text": "b"}'
    )
    with pytest.raises(AssertionError, match=r"^expected 3 pending jobs of kind 'note', found 2\n"):
        assert_enqueued(client, kind=Note, count=3)
    with pytest.raises(AssertionError) as present:
        refute_enqueued(client, queue="mail")
    assert str(present.value) == (
        "expected no pending job in queue 'mail', found 1:\n"
        '  #2 note (queue \'mail\', pending) args {"tags": null, "text": "b"}'
    )
    drain(client)
    with pytest.raises(AssertionError, match=r"found none\nno job is pending$"):
        assert_enqueued(client)


# -- the tester and its modes -----------------------------------------------------------------


def test_tester_manual_mode_is_the_default(pgqueue_tester: QueueTester) -> None:
    client = pgqueue_tester.client
    client.add_job(Note("waits"))
    assert RAN == []
    pgqueue_tester.assert_enqueued(kind=Note, count=1)
    assert [r.outcome for r in pgqueue_tester.drain()] == ["completed"]
    assert RAN == ["waits"]
    assert len(pgqueue_tester.results) == 1
    pgqueue_tester.refute_enqueued()
    assert pgqueue_tester.perform_job(Flaky(), attempt=3).outcome == "failed"


@pytest.mark.pgqueue(mode="inline")
def test_inline_mode_runs_each_enqueue_at_once(pgqueue_tester: QueueTester) -> None:
    client = pgqueue_tester.client
    CLIENT.append(client)
    assert pgqueue_tester.mode == "inline"
    handle = client.add_job(Note("now"), run_in=timedelta(hours=1))
    assert RAN == ["now"]
    assert client.get_job(handle.id).status == "completed"  # type: ignore[union-attr]
    flaky = client.add_job(Flaky())  # fails: the enqueue does not raise
    assert client.get_job(flaky.id).status == "pending"  # type: ignore[union-attr]
    client.add_jobs([Note("one"), Fanout(1)])
    assert RAN == ["now", "flaky 1", "one", "child 0"]
    outcomes = [(r.kind, r.outcome) for r in pgqueue_tester.results]
    assert outcomes == [
        ("note", "completed"),
        ("flaky", "retry"),
        ("note", "completed"),
        ("note", "completed"),  # the child ends before the job that enqueued it
        ("fanout", "completed"),
    ]
    pgqueue_tester.refute_enqueued(kind=Note)
    pgqueue_tester.mode = "manual"
    client.add_job(Note("later"))
    assert RAN[-1] == "child 0"
    assert client.insert_hook is None


def test_inline_mode_propagates_when_asked(pgqueue_client: pgqueue.Client) -> None:
    tester = QueueTester(pgqueue_client, mode="inline", propagate=True)
    try:
        with pytest.raises(ValueError, match="attempt 1 failed"):
            pgqueue_client.add_job(Flaky())
        pgqueue_client.add_job(Steer("cancel"))  # no exception behind it: not raised
        assert [r.outcome for r in tester.results] == ["retry", "cancelled"]
        with pytest.raises(pgqueue.ConfigurationError, match="insert_hook"):
            QueueTester(pgqueue_client, mode="inline")
    finally:
        tester.close()
    assert pgqueue_client.insert_hook is None


def test_inline_mode_in_the_transaction(
    pgqueue_tx: psycopg.Connection[Any], pgqueue_tx_client: pgqueue.Client
) -> None:
    with QueueTester(pgqueue_tx_client, mode="inline") as tester:
        with pgqueue_tx.transaction():  # a savepoint of the test's transaction
            handle = pgqueue_tx_client.add_job_with_tx(pgqueue_tx, Note("in tx"))
        assert RAN == ["in tx"]
        pgqueue_tx_client.add_jobs_with_tx(pgqueue_tx, [Note("b"), Note("c")])
        assert RAN == ["in tx", "b", "c"]
        assert pgqueue_tx_client.get_job(handle.id).status == "completed"  # type: ignore[union-attr]
        assert [r.id for r in tester.results] == [handle.id, handle.id + 1, handle.id + 2]


# -- asyncio ----------------------------------------------------------------------------------


async def test_async_tester_drain_and_assertions(
    pgqueue_async_tester: AsyncQueueTester,
) -> None:
    client = pgqueue_async_tester.client
    await client.add_job(AsyncNote("a"))
    await client.add_job(Note("b"), queue="q2")
    await pgqueue_async_tester.assert_enqueued(kind=AsyncNote, count=1)
    with pytest.raises(AssertionError, match="expected no pending job of kind 'note'"):
        await pgqueue_async_tester.refute_enqueued(kind=Note)
    results = await pgqueue_async_tester.drain()
    assert [r.outcome for r in results] == ["completed", "completed"]
    assert RAN == ["async a", "b"]


@pytest.mark.pgqueue(mode="inline")
async def test_async_inline_mode(pgqueue_async_tester: AsyncQueueTester) -> None:
    client = pgqueue_async_tester.client
    loop_thread = threading.get_ident()
    handle = await client.add_job(AsyncNote("inline"))
    assert RAN == ["async inline"]
    job = await client.get_job(handle.id)
    assert job is not None
    assert job.status == "completed"
    assert threading.get_ident() == loop_thread


async def test_async_inline_mode_in_the_transaction(
    pgqueue_async_tx: psycopg.AsyncConnection[Any],
    pgqueue_async_tx_client: pgqueue.AsyncClient,
) -> None:
    with AsyncQueueTester(pgqueue_async_tx_client, mode="inline") as tester:
        await pgqueue_async_tx_client.add_job_with_tx(pgqueue_async_tx, Steer("discard"))
        assert [(r.outcome, r.error) for r in tester.results] == [("failed", "bad input")]
        await tester.refute_enqueued()
