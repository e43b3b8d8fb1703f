"""Driver conformance suite: what every adapter must do, run unchanged against each one.

It only uses the ``driver`` fixture (see conftest.py) and the protocol's methods, so a new
adapter passes or fails it without a line changed here.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

import pgqueue
from pgqueue._async.compat import sleep

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def table(driver: pgqueue.AsyncDriver, schema: str) -> str:
    await driver.exec(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    name = f'"{schema}".conformance'
    await driver.exec(f"CREATE TABLE {name} (id int PRIMARY KEY, note text, doc jsonb)")
    return name


async def test_driver_satisfies_protocol(driver: pgqueue.AsyncDriver) -> None:
    assert isinstance(driver, pgqueue.AsyncDriver)


async def test_query_round_trips_parameter_types(driver: pgqueue.AsyncDriver) -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    token = uuid.uuid4()
    rows = await driver.query(
        "SELECT $1::int, $2::text, $3::float8, $4::bool, $5::text, $6::timestamptz, $7::uuid, "
        "$8::int[], $9::text[], ($10::jsonb)->>'k', $11::bigint",
        (
            42,
            "héllo 'quoted' $1",
            1.5,
            True,
            None,
            when,
            token,
            [1, 2],
            ["a", None],
            '{"k": "v"}',
            2**62,
        ),
    )
    assert rows == [
        (42, "héllo 'quoted' $1", 1.5, True, None, when, token, [1, 2], ["a", None], "v", 2**62)
    ]


async def test_query_returns_tuples_and_empty_list(driver: pgqueue.AsyncDriver) -> None:
    rows = await driver.query("SELECT g, g * 2 FROM generate_series(1, 3) g")
    assert rows == [(1, 2), (2, 4), (3, 6)]
    assert all(type(r) is tuple for r in rows)
    assert await driver.query("SELECT 1 WHERE false") == []


async def test_exec_commits_on_its_own(driver: pgqueue.AsyncDriver, table: str, db) -> None:
    await driver.exec(f"INSERT INTO {table} (id, note) VALUES ($1, $2)", (1, "one"))
    # seen from another session, so it was committed
    assert db.value(f"SELECT note FROM {table} WHERE id = 1") == "one"
    assert await driver.query(f"INSERT INTO {table} (id) VALUES (2) RETURNING id") == [(2,)]
    assert db.value(f"SELECT count(*) FROM {table}") == 2


async def test_sql_errors_become_database_error(driver: pgqueue.AsyncDriver, table: str) -> None:
    with pytest.raises(pgqueue.DatabaseError) as info:
        await driver.exec("SELEC 1")
    assert info.value.sqlstate == "42601"
    await driver.exec(f"INSERT INTO {table} (id) VALUES (1)")
    with pytest.raises(pgqueue.DatabaseError) as info:
        await driver.exec(f"INSERT INTO {table} (id) VALUES (1)")
    assert info.value.sqlstate == "23505"
    assert info.value.constraint_name == "conformance_pkey"
    # the driver is still usable after errors
    assert await driver.query("SELECT 1") == [(1,)]


async def test_with_tx_commits(driver: pgqueue.AsyncDriver, table: str, db) -> None:
    async with driver.with_tx() as tx:
        await tx.exec(f"INSERT INTO {table} (id) VALUES (1)")
        await tx.exec(f"INSERT INTO {table} (id) VALUES (2)")
        # not visible outside before commit
        assert db.value(f"SELECT count(*) FROM {table}") == 0
        assert await tx.query(f"SELECT count(*) FROM {table}") == [(2,)]
    assert db.value(f"SELECT count(*) FROM {table}") == 2


async def test_with_tx_rolls_back_on_exception(driver: pgqueue.AsyncDriver, table: str, db) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        async with driver.with_tx() as tx:
            await tx.exec(f"INSERT INTO {table} (id) VALUES (1)")
            raise RuntimeError("boom")
    assert db.value(f"SELECT count(*) FROM {table}") == 0
    with pytest.raises(pgqueue.DatabaseError):
        async with driver.with_tx() as tx:
            await tx.exec(f"INSERT INTO {table} (id) VALUES (1)")
            await tx.exec(f"INSERT INTO {table} (id) VALUES (1)")
    assert db.value(f"SELECT count(*) FROM {table}") == 0


async def test_nested_with_tx_is_a_savepoint(driver: pgqueue.AsyncDriver, table: str, db) -> None:
    async with driver.with_tx() as tx:
        await tx.exec(f"INSERT INTO {table} (id) VALUES (1)")
        with pytest.raises(pgqueue.DatabaseError):
            async with tx.with_tx() as inner:
                await inner.exec(f"INSERT INTO {table} (id) VALUES (2)")
                await inner.exec(f"INSERT INTO {table} (id) VALUES (1)")  # duplicate
        await tx.exec(f"INSERT INTO {table} (id) VALUES (3)")
    assert db.rows(f"SELECT id FROM {table} ORDER BY id") == [(1,), (3,)]


async def test_listener_receives_notifications(driver: pgqueue.AsyncDriver) -> None:
    channel = f"pgqueue-conformance {uuid.uuid4().hex[:6]}"  # needs quoting
    listener = await driver.listener(channel)
    try:
        assert listener.channel == channel
        assert await listener.wait(0.05) == []
        await driver.exec("SELECT pg_notify($1, $2)", (channel, "hello"))
        got = await listener.wait(5)
        assert [(n.channel, n.payload) for n in got] == [(channel, "hello")]
        # a notification sent inside a transaction arrives only after commit
        async with driver.with_tx() as tx:
            await tx.exec("SELECT pg_notify($1, 'in-tx')", (channel,))
            assert await listener.wait(0.1) == []
        got = await listener.wait(5)
        assert [n.payload for n in got] == ["in-tx"]
    finally:
        await listener.close()
    await listener.close()  # idempotent


async def test_listener_uses_a_dedicated_session(driver: pgqueue.AsyncDriver, db) -> None:
    listener = await driver.listener("dedicated")
    try:
        # our own statements never run on the listening session
        pids = {(await driver.query("SELECT pg_backend_pid()"))[0][0] for _ in range(5)}
        assert listener.backend_pid not in pids
        listening = db.rows(
            "SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND query ILIKE 'LISTEN%'",
            (listener.backend_pid,),
        )
        assert listening == [(1,)]
    finally:
        await listener.close()


async def test_listener_reports_a_dead_session(driver: pgqueue.AsyncDriver, db) -> None:
    listener = await driver.listener("doomed")
    try:
        assert db.value("SELECT pg_terminate_backend($1)", (listener.backend_pid,)) is True
        with pytest.raises(pgqueue.ConnectionLost):
            for _ in range(50):  # the client notices on its next read
                await listener.wait(0.1)
    finally:
        await listener.close()


async def test_advisory_lock_is_exclusive(driver: pgqueue.AsyncDriver, db) -> None:
    key = -(2**62) + 12345  # negative and above 32 bits: both halves of the key matter
    lock = await driver.try_advisory_lock(key)
    assert lock is not None
    try:
        assert lock.key == key
        assert await lock.is_held()
        assert await driver.try_advisory_lock(key) is None
        holder = db.value(  # in this database: other test processes may hold the same key
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND classid::bigint = $1 AND objid::bigint = $2 "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF),
        )
        assert holder == lock.backend_pid
        pids = {(await driver.query("SELECT pg_backend_pid()"))[0][0] for _ in range(5)}
        assert lock.backend_pid not in pids
    finally:
        await lock.release()
    await lock.release()  # idempotent
    assert not await lock.is_held()
    again = await driver.try_advisory_lock(key)
    assert again is not None
    await again.release()


async def test_advisory_lock_dies_with_its_session(driver: pgqueue.AsyncDriver, db) -> None:
    key = 987654321
    lock = await driver.try_advisory_lock(key)
    assert lock is not None
    db.value("SELECT pg_terminate_backend($1)", (lock.backend_pid,))
    for _ in range(100):
        if not await lock.is_held():
            break
        await sleep(0.05)
    assert not await lock.is_held()
    other = await driver.try_advisory_lock(key)
    assert other is not None
    await other.release()
    await lock.release()  # releasing a dead lock does not raise


async def test_advisory_lock_with_idle_timeout_is_lost_when_its_holder_stalls(
    driver: pgqueue.AsyncDriver, db
) -> None:
    key = 55501
    lock = await driver.try_advisory_lock(key, idle_timeout=0.4)
    assert lock is not None
    try:
        # a holder that keeps its session busy keeps the lock ...
        for _ in range(8):
            assert await lock.is_held()
            await sleep(0.1)
        # ... one that goes quiet for longer than the timeout loses it to the server
        start = time.monotonic()
        while (other := await driver.try_advisory_lock(key)) is None:
            assert time.monotonic() - start < 5, "the idle lock session was not ended"
            await sleep(0.05)
        await other.release()
        assert not await lock.is_held()
    finally:
        await lock.release()


async def test_advisory_lock_candidate_tries_again_on_one_session(
    driver: pgqueue.AsyncDriver, db
) -> None:
    # advisory_lock() opens the session and takes nothing; try_take() tries, as often as
    # needed, on that same session (a follower's candidate: no connection per try)
    key = 55502
    first = await driver.advisory_lock(key, idle_timeout=30)
    second = await driver.advisory_lock(key, idle_timeout=30)
    try:
        assert not await first.is_held()
        assert await first.try_take()
        assert await first.is_held()
        pid = second.backend_pid
        for _ in range(3):
            assert not await second.try_take()
        assert second.backend_pid == pid
        assert not await second.is_held()
        timeout = db.value(
            "SELECT setting FROM pg_settings WHERE name = 'idle_session_timeout'"
        )  # this observer's own: the candidates' sessions are theirs
        assert timeout == "0"
        await first.release()
        assert await second.try_take()
        assert await second.is_held()
        with pytest.raises(pgqueue.ConnectionLost):
            await first.try_take()  # released: the session is closed
    finally:
        await first.release()
        await second.release()
    assert not await second.is_held()


async def test_copy_records(driver: pgqueue.AsyncDriver, table: str, schema: str, db) -> None:
    assert isinstance(driver, pgqueue.AsyncSupportsCopy)
    records = [(i, f"note {i}\ttab\nnewline", f'{{"i": {i}}}') for i in range(1000)]
    count = await driver.copy_records(schema, "conformance", ["id", "note", "doc"], records)
    assert count == 1000
    assert db.value(f"SELECT count(*) FROM {table}") == 1000
    assert db.value(f"SELECT note FROM {table} WHERE id = 7") == "note 7\ttab\nnewline"
    assert db.value(f"SELECT (doc->>'i')::int FROM {table} WHERE id = 999") == 999


async def test_many_statements_in_a_row(driver: pgqueue.AsyncDriver) -> None:
    # enough repetitions to cross any prepare threshold of the driver
    for i in range(20):
        assert await driver.query("SELECT $1::int + 1", (i,)) == [(i + 1,)]


async def test_statement_timeout_style_errors_keep_driver_usable(
    driver: pgqueue.AsyncDriver,
) -> None:
    with pytest.raises(pgqueue.DatabaseError) as info:
        async with driver.with_tx() as tx:
            await tx.exec("SET LOCAL statement_timeout = '10ms'")
            await tx.exec("SELECT pg_sleep(1)")
    assert info.value.sqlstate == "57014"
    assert await driver.query("SELECT 2") == [(2,)]


async def test_interval_arithmetic_uses_database_clock(driver: pgqueue.AsyncDriver) -> None:
    rows = await driver.query("SELECT now() + $1::float8 * interval '1 second' - now()", (90.0,))
    assert rows == [(timedelta(seconds=90),)]
