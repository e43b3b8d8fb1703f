"""Many workers on one database: the leader's sessions, and ``poll_only``, on every driver mode.

A follower tries the leader's lock on one session it keeps (it used to open and close one every
``leader_interval``). With ``poll_only`` there is no LISTEN session and no lock session at all:
the workers poll, and the leader holds a lease, the leader mark of an instance whose heartbeat
is fresh (docs/deployment.md). tests/_async/test_pgbouncer.py runs both through PgBouncer.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import pgqueue
from tests import jobs
from tests._async.helpers import statuses, wait_until

pytestmark = pytest.mark.timeout(90)

FAST = pgqueue.RuntimeConfig(
    poll_interval=0.2, heartbeat_interval=0.2, rescue_after=1.0, leader_interval=0.05
)
SESSIONS = "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"


def _beats(db: Any, settings: pgqueue.Settings, instance: uuid.UUID, seen: set[Any]) -> int:
    """Add the instance's current heartbeat time to ``seen``; return how many were seen."""
    query = f'SELECT heartbeat_at FROM "{settings.schema}".pgqueue_instances WHERE instance_id = $1'
    seen.update(row[0] for row in db.rows(query, (instance,)))
    return len(seen)


async def test_a_follower_tries_the_lead_on_one_session(
    driver: pgqueue.AsyncDriver, settings: pgqueue.Settings, db: Any
) -> None:
    a = pgqueue.AsyncClient(driver, registry=jobs.registry, settings=settings)
    b = pgqueue.AsyncClient(driver, registry=jobs.registry, settings=settings)
    await a.migrate()
    await a.start(config=FAST)
    try:
        await wait_until(lambda: a.runtime is not None and a.runtime.is_leader, what="a leads")
        await b.start(config=FAST)
        assert b.runtime is not None
        follower, seen = b.runtime.instance_id, set[Any]()
        await wait_until(lambda: _beats(db, settings, follower, seen) >= 1, what="b beats")
        before = db.value(SESSIONS)
        # five more heartbeats of b: about 20 of its tries of the lock, each of which used to
        # open and close a session of its own
        await wait_until(lambda: _beats(db, settings, follower, seen) > 5, what="5 beats of b")
        assert not b.runtime.is_leader
        # the shared pool may grow under load (a few); a session per try would be about 20
        assert db.value(SESSIONS) - before <= 6
        await a.stop(0)
        await wait_until(lambda: b.runtime is not None and b.runtime.is_leader, what="b leads")
    finally:
        await a.stop(0)
        await b.stop(0)


async def test_poll_only_runs_jobs_with_one_leader_by_lease(
    driver: pgqueue.AsyncDriver, settings: pgqueue.Settings, db: Any, jobs_table: str
) -> None:
    a = pgqueue.AsyncClient(driver, registry=jobs.registry, settings=settings, poll_only=True)
    b = pgqueue.AsyncClient(driver, registry=jobs.registry, settings=settings, poll_only=True)
    await a.migrate()
    token = uuid.uuid4().hex
    handles = await a.add_jobs([jobs.Record(token=token, n=i) for i in range(50)])
    marked = f'SELECT count(*) FROM "{settings.schema}".pgqueue_instances WHERE is_leader'
    await a.start({"default": 4}, config=FAST)
    await b.start({"default": 4}, config=FAST)
    try:
        ra, rb = a.runtime, b.runtime
        assert ra is not None
        assert rb is not None
        await wait_until(lambda: statuses(db, jobs_table) == {"completed": 50}, what="all ran")
        assert sorted(i for i, _ in jobs.RUNS[token]) == sorted(h.id for h in handles)
        await wait_until(lambda: (ra.is_leader or rb.is_leader) and db.value(marked) == 1)
        # no session outside the pools: no LISTEN, no lock session, no session per tick
        assert not ra.health().listener_connected
        assert not rb.health().listener_connected
        listening = "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'"
        listening += " AND datname = current_database()"
        assert db.value(listening) == 0
        seen: set[Any] = set()
        await wait_until(lambda: _beats(db, settings, ra.instance_id, seen) >= 1)
        before = db.value(SESSIONS)
        await wait_until(lambda: _beats(db, settings, ra.instance_id, seen) > 5, what="5 beats")
        assert db.value(SESSIONS) - before <= 6  # as above: the pools may grow, a few
        # the lease stays with one instance, tick after tick
        assert not (ra.is_leader and rb.is_leader)
        assert db.value(marked) == 1
        leader, follower = (a, rb) if ra.is_leader else (b, ra)
        await leader.stop()  # it resigns: the other takes the lease at its next tick
        await wait_until(lambda: follower.is_leader, what="the other takes the lease")
        assert db.value(marked) == 1
    finally:
        await a.stop(0)
        await b.stop(0)


async def test_a_lease_lapses_with_its_holders_heartbeat(
    driver: pgqueue.AsyncDriver, settings: pgqueue.Settings, db: Any
) -> None:
    # A leader that stops beating (stalled, or killed without a word) keeps the lease only
    # until its heartbeat is older than rescue_after; then another instance takes it.
    a = pgqueue.AsyncClient(driver, registry=jobs.registry, settings=settings, poll_only=True)
    await a.migrate()
    ghost = uuid.uuid4()
    instances = f'"{settings.schema}".pgqueue_instances'
    db.rows(
        # fresh for 2 s more than rescue_after: long enough to see it keep the lease
        f"INSERT INTO {instances} (instance_id, hostname, pid, queues, kinds, is_leader, "
        "heartbeat_at) VALUES ($1, 'elsewhere', 1, '{}'::jsonb, '{}'::text[], true, "
        "now() + interval '2 seconds')",
        (ghost,),
    )
    await a.start(config=FAST)
    try:
        runtime = a.runtime
        assert runtime is not None
        seen: set[Any] = set()
        await wait_until(lambda: _beats(db, settings, runtime.instance_id, seen) >= 3)
        assert not runtime.is_leader  # the ghost's heartbeat is fresh
        await wait_until(lambda: runtime.is_leader, timeout=10, what="the lease lapsed")
        # the new leader presumed the ghost dead and removed it
        await wait_until(
            lambda: (
                db.value(f"SELECT count(*) FROM {instances} WHERE instance_id = $1", (ghost,)) == 0
            )
        )
    finally:
        await a.stop(0)
