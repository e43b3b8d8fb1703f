"""Unique jobs under contention: 200 identical enqueues, each from its own connection.

Exactly one job results, never zero, also when half the enqueuing transactions roll back. Run
with each library's native connections, 30 at a time: the server allows 100 connections, and
`make test` runs other test processes beside this one (see the many_connections fixture).
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import asyncpg
import psycopg
import pytest
from sqlalchemy.ext.asyncio import create_async_engine

import pgqueue
from tests._async.test_unique import Report

pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("many_connections")]

N = 200
AT_ONCE = 30
HOUR = timedelta(hours=1)


class Undo(Exception):
    pass


HOLDING = threading.Event()  # the first enqueuer of the rollback race holds the lock


def outcome_counts(db, jobs_table: str, settings: pgqueue.Settings) -> tuple[int, int]:
    jobs = db.value(f"SELECT count(*) FROM {jobs_table}")
    locks = db.value(
        f'SELECT count(*) FROM "{settings.schema}".pgqueue_unique_locks u '
        f"JOIN {jobs_table} j ON j.id = u.job_id"
    )
    return jobs, locks


async def race(attempt, rollback_half: bool, db) -> Counter[str]:
    gate = asyncio.Semaphore(AT_ONCE)
    results: Counter[str] = Counter()

    async def one(i: int, hold: asyncio.Event | None = None) -> None:
        async with gate:
            try:
                await attempt(rollback=rollback_half and i % 2 == 0, hold=hold)
                results["inserted"] += 1
            except pgqueue.DuplicateJob:
                results["duplicate"] += 1
            except Undo:
                results["rolled back"] += 1

    if not rollback_half:
        await asyncio.gather(*(one(i) for i in range(N)))
        return results
    HOLDING.clear()
    # The first enqueuer takes the lock and keeps its transaction open until others wait on
    # it, then rolls back: a waiter must take over, so one job still results.
    hold = asyncio.Event()
    first = asyncio.create_task(one(0, hold))
    for _ in range(500):  # until the first enqueuer holds the lock
        if HOLDING.is_set():
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the first enqueuer never took the lock")
    rest = [asyncio.create_task(one(i)) for i in range(1, N)]
    waiting = (  # in this database: other test processes have databases of their own
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE wait_event_type = 'Lock' AND datname = current_database()"
    )
    for _ in range(500):
        if db.value(waiting):
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("nobody waited on the first enqueuer's lock")
    hold.set()
    await asyncio.gather(first, *rest)
    return results


@pytest.mark.parametrize("library", ["psycopg", "asyncpg", "sqlalchemy"])
@pytest.mark.parametrize("rollback_half", [False, True], ids=["all-commit", "half-rollback"])
async def test_concurrent_identical_enqueues_make_exactly_one_job(
    database_url: str,
    settings: pgqueue.Settings,
    db,
    jobs_table: str,
    library: str,
    rollback_half: bool,
) -> None:
    client = await pgqueue.AsyncClient.connect(database_url, settings=settings)
    await client.migrate()
    engine = create_async_engine(database_url.replace("postgresql://", "postgresql+psycopg://"))

    async def enqueue(conn: object, rollback: bool, hold: asyncio.Event | None) -> None:
        await client.add_job_with_tx(conn, Report(user_id=42), unique=HOUR)
        if hold is not None:
            HOLDING.set()
            await hold.wait()
        if rollback:
            raise Undo

    async def attempt(rollback: bool, hold: asyncio.Event | None) -> None:
        if library == "psycopg":
            conn = await psycopg.AsyncConnection.connect(database_url)
            async with conn, conn.transaction():
                await enqueue(conn, rollback, hold)
        elif library == "asyncpg":
            apg = await asyncpg.connect(database_url)
            try:
                async with apg.transaction():
                    await enqueue(apg, rollback, hold)
            finally:
                await apg.close()
        else:
            async with engine.connect() as sa_conn, sa_conn.begin():
                await enqueue(sa_conn, rollback, hold)

    try:
        results = await race(attempt, rollback_half, db)
    finally:
        await engine.dispose()
        await client.close()
    assert outcome_counts(db, jobs_table, settings) == (1, 1)
    if rollback_half:
        # exactly one enqueue committed a job: a waiter took over from the first holder, which
        # rolled back (as other even ones may have, after taking over in turn)
        assert results["inserted"] == 1, results
        assert results["rolled back"] >= 1, results
        assert sum(results.values()) == N, results
    else:
        assert results == Counter({"inserted": 1, "duplicate": N - 1})


def test_concurrent_identical_enqueues_from_threads(
    database_url: str, settings: pgqueue.Settings, db, jobs_table: str
) -> None:
    results: Counter[str] = Counter()
    lock = threading.Lock()
    with pgqueue.Client.connect(database_url, settings=settings) as client:
        client.migrate()

        def one(i: int) -> None:
            try:
                with psycopg.connect(database_url) as conn, conn.transaction():
                    client.add_job_with_tx(conn, Report(user_id=42), unique=HOUR)
                    if i % 2 == 0:
                        raise Undo
                outcome = "inserted"
            except pgqueue.DuplicateJob:
                outcome = "duplicate"
            except Undo:
                outcome = "rolled back"
            with lock:
                results[outcome] += 1

        with ThreadPoolExecutor(AT_ONCE) as pool:
            list(pool.map(one, range(N)))
    assert sum(results.values()) == N
    assert results["inserted"] == 1, results  # the one job that resulted
    assert outcome_counts(db, jobs_table, settings) == (1, 1)
