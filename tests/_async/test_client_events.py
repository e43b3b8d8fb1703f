"""Events the client emits (JobsEnqueued, AdminAction), on every driver mode.

The runtime's events (started, finished, rescued, leadership...) are tested with the runtime.
"""

from __future__ import annotations

import pytest

import pgqueue
from pgqueue.events import AdminAction, Event, JobsEnqueued
from tests._async.conftest import Native
from tests._async.test_enqueue import SendEmail

pytestmark = pytest.mark.timeout(60)


async def test_enqueues_are_announced_once_per_call(client: pgqueue.AsyncClient) -> None:
    seen: list[Event] = []
    client.events.subscribe(seen.append, JobsEnqueued)
    one = await client.add_job(SendEmail(to="a"))
    many = await client.add_jobs([SendEmail(to="b"), SendEmail(to="c")])
    keyed = await client.add_job(SendEmail(to="d"), job_id="events-d")
    await client.add_job(SendEmail(to="d"), job_id="events-d", on_conflict="ignore")  # refused
    assert all(isinstance(e, JobsEnqueued) for e in seen)
    batches = [[h.id for h in e.jobs] for e in seen if isinstance(e, JobsEnqueued)]
    assert batches == [[one.id], [h.id for h in many], [keyed.id]]
    assert not any(e.in_transaction for e in seen if isinstance(e, JobsEnqueued))


async def test_a_bulk_load_is_one_event(client: pgqueue.AsyncClient) -> None:
    seen: list[JobsEnqueued] = []
    client.events.subscribe(seen.append, JobsEnqueued)
    handles = await client.add_jobs([SendEmail(to=str(i)) for i in range(2500)])  # COPY
    assert len(seen) == 1
    assert [h.id for h in seen[0].jobs] == [h.id for h in handles]


async def test_enqueue_in_a_callers_transaction_says_so(
    client: pgqueue.AsyncClient, database_url: str
) -> None:
    seen: list[JobsEnqueued] = []
    client.events.subscribe(seen.append, JobsEnqueued)
    native = Native("psycopg-connection", database_url)
    await native.open()
    try:
        await native.begin()
        await client.add_job_with_tx(native.obj, SendEmail(to="tx"))
        await client.add_jobs_with_tx(native.obj, [SendEmail(to="tx2")])
        await native.commit()
    finally:
        await native.close()
    assert [e.in_transaction for e in seen] == [True, True]


async def test_cancel_is_an_admin_action(client: pgqueue.AsyncClient) -> None:
    seen: list[AdminAction] = []
    client.events.subscribe(seen.append, AdminAction)
    handle = await client.add_job(SendEmail(to="x"))
    assert await client.cancel_job(handle.id) == "pending"
    assert await client.cancel_job(handle.id) is None  # nothing changed: no event
    assert seen == [AdminAction("cancel", (handle.id,), {"was": "pending"})]


async def test_a_failing_subscriber_never_fails_the_enqueue(client: pgqueue.AsyncClient) -> None:
    def broken(event: Event) -> None:
        raise RuntimeError("subscriber bug")

    client.events.subscribe(broken)
    handle = await client.add_job(SendEmail(to="x"))
    assert (await client.get_job(handle.id)) is not None


async def test_the_log_subscriber_can_be_removed(client: pgqueue.AsyncClient) -> None:
    from pgqueue.events import JobFinished

    assert client.events.wants(JobFinished)  # the default log subscriber
    client.log_subscription()
    assert not client.events.wants(JobFinished)
