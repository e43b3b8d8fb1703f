"""pgqueue through a real PgBouncer in transaction pooling mode (docs/deployment.md, "PgBouncer").

Every statement goes through the pooler. The two sessions that must outlive a transaction, the
LISTEN session and the leader's advisory lock, go straight to PostgreSQL with ``listen_dsn``
(route ``direct``), or do not exist with ``poll_only`` (route ``poll``): the workers poll and
elect their leader by a lease. Run on psycopg and asyncpg, the drivers ``pgbouncer=True`` takes.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

import pgqueue
from tests import jobs
from tests._async.helpers import statuses, wait_until
from tests.pgbouncer import PgBouncer

pytestmark = pytest.mark.timeout(120)

FAST = pgqueue.RuntimeConfig(
    poll_interval=0.2,
    heartbeat_interval=0.3,
    rescue_after=1.5,
    leader_interval=0.3,
    retry_backoff=0.05,
    retry_backoff_max=0.2,
    shutdown_timeout=5.0,
)

DRIVERS = [
    "psycopg",
    "asyncpg",  # async-only
]


def _dbname(url: str) -> str:
    return url.rsplit("/", 1)[1]


@pytest.fixture(params=["direct", "poll"])
def route(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=DRIVERS)
def driver_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def _connect(
    pgbouncer: PgBouncer, database_url: str, driver: str, route: str, settings: pgqueue.Settings
) -> pgqueue.AsyncClient:
    return await pgqueue.AsyncClient.connect(
        pgbouncer.url(_dbname(database_url)),
        driver=driver,
        registry=jobs.registry,
        settings=settings,
        pgbouncer=True,
        listen_dsn=database_url if route == "direct" else None,
    )


@pytest.fixture
async def pooled(
    pgbouncer: PgBouncer,
    database_url: str,
    driver_name: str,
    route: str,
    settings: pgqueue.Settings,
) -> AsyncIterator[pgqueue.AsyncClient]:
    client = await _connect(pgbouncer, database_url, driver_name, route, settings)
    await client.migrate()
    yield client
    await client.close()


async def test_jobs_run_exactly_once_through_the_pooler(
    pooled: pgqueue.AsyncClient, route: str, db: Any, jobs_table: str
) -> None:
    assert pooled.poll_only is (route == "poll")
    token = uuid.uuid4().hex
    # one by one (INSERT), then in bulk: 1,500 jobs take COPY
    singles = [await pooled.add_job(jobs.Record(token=token, n=i)) for i in range(30)]
    bulk = await pooled.add_jobs([jobs.ARecord(token=token, n=i) for i in range(1500)])
    await pooled.start({"default": 8}, config=FAST)
    await wait_until(
        lambda: statuses(db, jobs_table) == {"completed": 1530}, timeout=60, what="all completed"
    )
    assert sorted(job_id for job_id, _ in jobs.RUNS[token]) == sorted(h.id for h in singles + bulk)
    assert {attempt for _, attempt in jobs.RUNS[token]} == {1}
    runtime = pooled.runtime
    assert runtime is not None
    await wait_until(lambda: runtime.is_leader, what="the only worker leads")
    health = runtime.health()
    assert health.ready
    # the LISTEN session is up on the direct route, and there is none when polling only
    assert health.listener_connected is (route == "direct")
    listening = db.value(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND query LIKE 'LISTEN %'"
    )
    assert listening == (1 if route == "direct" else 0)


async def test_retries_unique_jobs_and_cancels_through_the_pooler(
    pooled: pgqueue.AsyncClient, db: Any, jobs_table: str
) -> None:
    token = uuid.uuid4().hex
    flaky = await pooled.add_job(jobs.AFlaky(token=token, failures=1))
    first = await pooled.add_job(jobs.Record(token=token, n=99), unique=timedelta(minutes=1))
    again = await pooled.add_job(
        jobs.Record(token=token, n=99), unique=timedelta(minutes=1), on_conflict="ignore"
    )
    assert again.id == first.id
    assert not again.inserted
    blocked = await pooled.add_job(jobs.ABlock(token=token + "-block", seconds=60))
    await pooled.start({"default": 4}, config=FAST)
    await wait_until(
        lambda: (
            db.value(f"SELECT status FROM {jobs_table} WHERE id = $1", (blocked.id,))
            == "processing"
        ),
        what="the blocking job runs",
    )
    # a cancel request reaches the running job: by NOTIFY on the direct route, by the
    # heartbeat when polling only
    assert await pooled.cancel_job(blocked.id) == "processing"
    await wait_until(
        lambda: statuses(db, jobs_table) == {"completed": 2, "cancelled": 1},
        timeout=30,
        what="retried, deduplicated and cancelled",
    )
    assert sorted(a for i, a in jobs.RUNS[token] if i == flaky.id) == [1, 2]


async def test_a_job_enqueued_in_a_transaction_through_the_pooler(
    pooled: pgqueue.AsyncClient,
    pgbouncer: PgBouncer,
    database_url: str,
    db: Any,
    jobs_table: str,
) -> None:
    url = pgbouncer.url(_dbname(database_url))
    async with await psycopg.AsyncConnection.connect(url, prepare_threshold=None) as conn:
        async with conn.transaction():
            await pooled.add_job_with_tx(conn, jobs.Record(token="kept"))
        try:
            async with conn.transaction():
                await pooled.add_job_with_tx(conn, jobs.Record(token="rolled back"))
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
    rows = db.rows(f"SELECT payload->>'token' FROM {jobs_table}")
    assert rows == [("kept",)]


async def test_one_leader_among_workers_through_the_pooler(
    pooled: pgqueue.AsyncClient,
    pgbouncer: PgBouncer,
    database_url: str,
    driver_name: str,
    route: str,
    settings: pgqueue.Settings,
    db: Any,
) -> None:
    other = await _connect(pgbouncer, database_url, driver_name, route, settings)
    try:
        await pooled.start({"default": 2}, config=FAST)
        await other.start({"default": 2}, config=FAST)
        a, b = pooled.runtime, other.runtime
        assert a is not None
        assert b is not None
        instances = f'"{settings.schema}".pgqueue_instances'
        marked = f"SELECT count(*) FROM {instances} WHERE is_leader"
        await wait_until(
            lambda: (a.is_leader or b.is_leader) and db.value(marked) == 1, what="a leader"
        )
        assert not (a.is_leader and b.is_leader)
        leader, follower = (pooled, other) if a.is_leader else (other, pooled)
        await leader.stop()
        runtime = follower.runtime
        assert runtime is not None
        await wait_until(lambda: runtime.is_leader, timeout=15, what="the other takes the lead")
    finally:
        await other.close()


async def test_pgbouncer_refuses_what_would_break_behind_it(
    pgbouncer: PgBouncer, database_url: str
) -> None:
    url = pgbouncer.url(_dbname(database_url))
    # a pool handed in that would prepare statements
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(url, open=False)
    with pytest.raises(pgqueue.ConfigurationError, match="prepare_threshold"):
        await pgqueue.AsyncClient.connect(pool, pgbouncer=True)
    # async-only: begin
    import asyncpg

    cached = await asyncpg.create_pool(url, min_size=0)  # statements cached by name
    try:
        with pytest.raises(pgqueue.ConfigurationError, match="statement_cache_size=0"):
            await pgqueue.AsyncClient.connect(cached, pgbouncer=True)
    finally:
        await cached.close()
    # async-only: end
    # SQLAlchemy is not the tested route behind a transaction pooler
    with pytest.raises(pgqueue.ConfigurationError, match="psycopg and asyncpg"):
        await pgqueue.AsyncClient.connect(url, driver="sqlalchemy", pgbouncer=True)
    with pytest.raises(pgqueue.ConfigurationError, match="listen_dsn"):
        await pgqueue.AsyncClient.connect(url, pgbouncer=True, listen_dsn="db.internal:5432")


async def test_the_environment_says_pgbouncer_and_listen_dsn(
    pgbouncer: PgBouncer, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # what every `pgqueue` command, the dashboard and connect() without the arguments read
    url = pgbouncer.url(_dbname(database_url))
    monkeypatch.setenv("PGQUEUE_PGBOUNCER", "1")
    client = await pgqueue.AsyncClient.connect(url)
    assert client.poll_only
    await client.close()
    monkeypatch.setenv("PGQUEUE_LISTEN_DSN", database_url)
    client = await pgqueue.AsyncClient.connect(url)
    assert not client.poll_only
    await client.close()
    # poll_only=True asks for polling whatever the environment implies
    client = await pgqueue.AsyncClient.connect(url, poll_only=True)
    assert client.poll_only
    await client.close()
    monkeypatch.setenv("PGQUEUE_PGBOUNCER", "maybe")
    with pytest.raises(pgqueue.ConfigurationError, match="PGQUEUE_PGBOUNCER"):
        await pgqueue.AsyncClient.connect(url)
