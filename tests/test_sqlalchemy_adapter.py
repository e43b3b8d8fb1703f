"""SQLAlchemy-specific behaviour of the adapter (the shared contract is in test_conformance.py).

Not generated: the sync and asyncio tests are both written out here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_scoped_session,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import Session, scoped_session, sessionmaker

import pgqueue
from pgqueue_adapters.sqlalchemy import (
    AsyncSQLAlchemyDriver,
    AsyncSQLAlchemyTxDriver,
    SQLAlchemyDriver,
    SQLAlchemyTxDriver,
    async_connect,
    async_from_native,
    async_wrap_transaction,
    convert_placeholders,
    sync_connect,
    sync_from_native,
    sync_wrap_transaction,
)
from pgqueue_adapters.sqlalchemy._async import _SIDE
from pgqueue_adapters.sqlalchemy._placeholders import bind_params

pytestmark = pytest.mark.timeout(60)


def sa_url(database_url: str, dialect: str = "psycopg") -> str:
    return database_url.replace("postgresql://", f"postgresql+{dialect}://", 1)


@dataclass
class Ping(pgqueue.Worker):
    note: str = ""

    def process(self, ctx: pgqueue.JobContext) -> None:
        pass


# -- placeholders ----------------------------------------------------------------------------


SQL = "SELECT $1::int, '100%', $2::text[], $3, $1 + $3 FROM t WHERE a[1:$2] IS NOT NULL"


def test_numeric_dollar_passes_through() -> None:
    converted = convert_placeholders(SQL, "numeric_dollar")
    assert converted.sql == SQL
    assert bind_params(SQL, (1, ["a"], 3), "numeric_dollar") == (SQL, (1, ["a"], 3))


def test_pyformat_names_parameters_and_escapes_percent() -> None:
    sql, params = bind_params(SQL, (1, ["a"], 3), "pyformat")
    assert sql == (
        "SELECT %(p1)s::int, '100%%', %(p2)s::text[], %(p3)s, %(p1)s + %(p3)s FROM t "
        "WHERE a[1:%(p2)s] IS NOT NULL"
    )
    assert params == {"p1": 1, "p2": ["a"], "p3": 3}


def test_format_repeats_parameters_in_order() -> None:
    sql, params = bind_params(SQL, (1, ["a"], 3), "format")
    assert sql == (
        "SELECT %s::int, '100%%', %s::text[], %s, %s + %s FROM t WHERE a[1:%s] IS NOT NULL"
    )
    # $1, $2, $3, $1, $3 (repeated), $2
    assert params == (1, ["a"], 3, 1, 3, ["a"])


def test_qmark_repeats_parameters_in_order() -> None:
    sql, params = bind_params("SELECT $3, $1::int, $3 || '%'", ("a", "b", "c"), "qmark")
    assert sql == "SELECT ?, ?::int, ? || '%'"  # no % escaping outside the % styles
    assert params == ("c", "a", "c")


def test_named_keeps_casts_and_never_makes_one() -> None:
    sql, params = bind_params(SQL, (1, ["a"], 3), "named")
    assert sql == (
        "SELECT :p1::int, '100%', :p2::text[], :p3, :p1 + :p3 FROM t WHERE a[1: :p2] IS NOT NULL"
    )
    assert params == {"p1": 1, "p2": ["a"], "p3": 3}


def test_numeric_style() -> None:
    sql, params = bind_params("SELECT $2::int, $1, a[1:$1]", ("x", 2), "numeric")
    assert sql == "SELECT :2::int, :1, a[1: :1]"
    assert params == ("x", 2)


def test_two_digit_placeholders_and_no_placeholders() -> None:
    params = tuple(range(1, 12))
    sql, out = bind_params("SELECT $1, $10, $11", params, "format")
    assert (sql, out) == ("SELECT %s, %s, %s", (1, 10, 11))
    assert bind_params("SELECT 5 % 2", (), "pyformat") == ("SELECT 5 %% 2", {})
    # "$" inside an identifier is no placeholder
    assert bind_params("SELECT a$1, $1", (5,), "format") == ("SELECT a$1, %s", (5,))


def test_conversion_is_cached() -> None:
    first = convert_placeholders("SELECT $1 -- cached", "pyformat")
    hits = convert_placeholders.cache_info().hits
    assert convert_placeholders("SELECT $1 -- cached", "pyformat") is first
    assert convert_placeholders.cache_info().hits == hits + 1


def test_bad_placeholders_and_styles_are_refused() -> None:
    with pytest.raises(pgqueue.ConfigurationError, match=r"uses \$3"):
        bind_params("SELECT $1, $3", (1, 2), "format")
    with pytest.raises(pgqueue.ConfigurationError, match="paramstyle"):
        convert_placeholders("SELECT $1", "nonsense")


def test_dedicated_dsn_keeps_the_password_and_drops_sqlalchemy_options() -> None:
    engine = create_async_engine(  # never connects
        "postgresql+asyncpg://u:p%40ss@h:5433/d?prepared_statement_cache_size=0&application_name=x"
    )
    dsn = _SIDE.dedicated_dsn(engine.dialect, engine.url)
    assert dsn == "postgresql://u:p%40ss@h:5433/d?application_name=x"


# -- sessions and connections in the caller's transaction -------------------------------------


@pytest.fixture
def sync_engine(database_url: str) -> Iterator[Engine]:
    engine = create_engine(sa_url(database_url), pool_size=3)
    yield engine
    engine.dispose()


@pytest.fixture(params=["psycopg", "asyncpg"])
async def async_engine(
    request: pytest.FixtureRequest, database_url: str
) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(sa_url(database_url, request.param), pool_size=3, max_overflow=0)
    yield engine
    await engine.dispose()


@pytest.fixture
def sync_client(sync_engine: Engine, settings: pgqueue.Settings) -> pgqueue.Client:
    client = pgqueue.Client(SQLAlchemyDriver(sync_engine), settings=settings)
    client.migrate()
    return client


@pytest.fixture
async def async_client(
    async_engine: AsyncEngine, settings: pgqueue.Settings
) -> pgqueue.AsyncClient:
    client = pgqueue.AsyncClient(AsyncSQLAlchemyDriver(async_engine), settings=settings)
    await client.migrate()
    return client


def test_session_commit_makes_jobs_visible(
    sync_client: pgqueue.Client, sync_engine: Engine, db, jobs_table: str
) -> None:
    with Session(sync_engine) as session:
        session.execute(text("SELECT 1"))  # the session's transaction has begun
        session_pid = session.execute(text("SELECT pg_backend_pid()")).scalar()
        session_xid = session.execute(text("SELECT txid_current()")).scalar()
        tx = sync_wrap_transaction(session)
        assert isinstance(tx, SQLAlchemyTxDriver)
        # the same session and the same transaction
        assert tx.query("SELECT pg_backend_pid(), txid_current()") == [(session_pid, session_xid)]
        sync_client.add_job_with_tx(session, Ping(note="a"))
        sync_client.add_jobs_with_tx(session, [Ping(note="b"), Ping(note="c")])
        assert db.value(f"SELECT count(*) FROM {jobs_table}") == 0
        session.commit()
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == 3


def test_session_rollback_leaves_nothing(
    sync_client: pgqueue.Client, sync_engine: Engine, db, jobs_table: str
) -> None:
    with Session(sync_engine) as session:
        # no statement yet: the job's statement begins the session's transaction
        sync_client.add_job_with_tx(session, Ping(note="a"))
        assert session.in_transaction()
        session.rollback()
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == 0


def test_session_savepoint_rolls_back_alone(sync_engine: Engine, schema: str, db) -> None:
    table = f'"{schema}".t'
    db.rows(f'CREATE SCHEMA "{schema}"')
    db.rows(f"CREATE TABLE {table} (x int)")
    with Session(sync_engine) as session:
        tx = sync_wrap_transaction(session)
        tx.exec(f"INSERT INTO {table} VALUES ($1)", (1,))
        with pytest.raises(RuntimeError), tx.with_tx() as inner:
            inner.exec(f"INSERT INTO {table} VALUES ($1)", (2,))
            raise RuntimeError
        with tx.with_tx() as inner:
            inner.exec(f"INSERT INTO {table} VALUES ($1)", (3,))
        assert db.value(f"SELECT count(*) FROM {table}") == 0
        session.commit()
    assert db.rows(f"SELECT x FROM {table} ORDER BY x") == [(1,), (3,)]


async def test_async_session_commit_makes_jobs_visible(
    async_client: pgqueue.AsyncClient, async_engine: AsyncEngine, db, jobs_table: str
) -> None:
    async with AsyncSession(async_engine) as session:
        session_xid = (await session.execute(text("SELECT txid_current()"))).scalar()
        tx = async_wrap_transaction(session)
        assert isinstance(tx, AsyncSQLAlchemyTxDriver)
        assert await tx.query("SELECT txid_current()") == [(session_xid,)]
        await async_client.add_job_with_tx(session, Ping(note="a"))
        await async_client.add_jobs_with_tx(session, [Ping(note="b"), Ping(note="c")])
        assert db.value(f"SELECT count(*) FROM {jobs_table}") == 0
        await session.commit()
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == 3


async def test_async_session_rollback_leaves_nothing(
    async_client: pgqueue.AsyncClient, async_engine: AsyncEngine, db, jobs_table: str
) -> None:
    with pytest.raises(RuntimeError):
        async with AsyncSession(async_engine) as session, session.begin():
            await async_client.add_job_with_tx(session, Ping(note="a"))
            await async_client.add_jobs_with_tx(session, [Ping(note=str(i)) for i in range(3)])
            raise RuntimeError("rolled back by the caller")
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == 0


async def test_async_connection_transaction_is_joined_and_never_committed(
    async_client: pgqueue.AsyncClient, async_engine: AsyncEngine, db, jobs_table: str
) -> None:
    async with async_engine.connect() as conn:
        await conn.exec_driver_sql("SELECT 1")  # autobegun, left open
        await async_client.add_job_with_tx(conn, Ping(note="x"))
        assert conn.in_transaction()
        assert db.value(f"SELECT count(*) FROM {jobs_table}") == 0
        await conn.rollback()
    assert db.value(f"SELECT count(*) FROM {jobs_table}") == 0


def test_scoped_session_stands_for_its_current_session(
    sync_client: pgqueue.Client, sync_engine: Engine, db, jobs_table: str
) -> None:
    scoped = scoped_session(sessionmaker(sync_engine))
    try:
        sync_client.add_job_with_tx(scoped, Ping(note="scoped"))
        assert scoped().in_transaction()
        assert db.value(f"SELECT count(*) FROM {jobs_table}") == 0
        scoped.commit()
        assert db.value(f"SELECT count(*) FROM {jobs_table}") == 1
        assert isinstance(sync_from_native(scoped), SQLAlchemyDriver)
    finally:
        scoped.remove()


async def test_async_scoped_session_stands_for_its_current_session(
    async_client: pgqueue.AsyncClient, async_engine: AsyncEngine, db, jobs_table: str
) -> None:
    scoped = async_scoped_session(async_sessionmaker(async_engine), scopefunc=asyncio.current_task)
    try:
        await async_client.add_job_with_tx(scoped, Ping(note="scoped"))
        await scoped.rollback()
        assert db.value(f"SELECT count(*) FROM {jobs_table}") == 0
    finally:
        await scoped.remove()


async def test_transaction_drivers_have_no_dedicated_sessions(async_engine: AsyncEngine) -> None:
    async with AsyncSession(async_engine) as session:
        tx = async_wrap_transaction(session)
        with pytest.raises(pgqueue.ConfigurationError, match="not from a caller's transaction"):
            await tx.listener("nope")
        with pytest.raises(pgqueue.ConfigurationError, match="not from a caller's transaction"):
            await tx.try_advisory_lock(1)


# -- a caller's connection as the driver's source ---------------------------------------------


async def test_busy_async_connection_is_refused(async_engine: AsyncEngine) -> None:
    async with async_engine.connect() as conn:
        driver = AsyncSQLAlchemyDriver(conn)
        await conn.exec_driver_sql("SELECT 1")  # the caller began a transaction, left it open
        with pytest.raises(pgqueue.ConfigurationError, match="idle connection"):
            await driver.exec("SELECT 1")
        with pytest.raises(pgqueue.ConfigurationError, match="idle connection"):
            async with driver.with_tx():
                pass
        await conn.rollback()
        assert await driver.query("SELECT 1") == [(1,)]
        assert not conn.in_transaction()  # our statement committed


def test_busy_sync_connection_is_refused(sync_engine: Engine) -> None:
    with sync_engine.connect() as conn:
        driver = SQLAlchemyDriver(conn)
        conn.exec_driver_sql("SELECT 1")
        with pytest.raises(pgqueue.ConfigurationError, match="idle connection"):
            driver.exec("SELECT 1")
        conn.rollback()
        assert driver.query("SELECT $1::int", (7,)) == [(7,)]
        assert not conn.in_transaction()


def test_autocommit_engine_is_refused_for_transactions(database_url: str) -> None:
    engine = create_engine(sa_url(database_url), isolation_level="AUTOCOMMIT")
    try:
        driver = SQLAlchemyDriver(engine)
        with pytest.raises(pgqueue.ConfigurationError, match="AUTOCOMMIT"), driver.with_tx():
            pass
        # and so for a single statement, although pgqueue runs those in autocommit itself
        with pytest.raises(pgqueue.ConfigurationError, match="AUTOCOMMIT"):
            driver.exec("SELECT 1")
    finally:
        engine.dispose()


@pytest.mark.parametrize("source", ["engine", "connection"])
async def test_a_killed_session_is_lost_once(async_engine: AsyncEngine, source: str, db) -> None:
    conn = await async_engine.connect() if source == "connection" else None
    try:
        driver = AsyncSQLAlchemyDriver(conn or async_engine)
        for _ in range(2):  # a statement, then a transaction
            pid = (await driver.query("SELECT pg_backend_pid()"))[0][0]
            db.value("SELECT pg_terminate_backend($1)", (pid,))
            with pytest.raises(pgqueue.ConnectionLost):
                async with driver.with_tx() as tx:
                    await tx.exec("SELECT 1")
            # SQLAlchemy discarded the dead connection: the next statement gets a new one
            assert await driver.query("SELECT 1") == [(1,)]
    finally:
        if conn is not None:
            await conn.close()


def test_a_killed_session_is_lost_once_sync(sync_engine: Engine, db) -> None:
    driver = SQLAlchemyDriver(sync_engine)
    pid = driver.query("SELECT pg_backend_pid()")[0][0]
    db.value("SELECT pg_terminate_backend($1)", (pid,))
    with pytest.raises(pgqueue.ConnectionLost) as info:
        driver.exec("SELECT 1")
    assert info.value.sqlstate == "57P01"
    assert driver.query("SELECT 1") == [(1,)]


# -- dedicated sessions -----------------------------------------------------------------------


async def test_listener_is_not_a_pool_connection(async_engine: AsyncEngine) -> None:
    driver = AsyncSQLAlchemyDriver(async_engine)
    listener = await driver.listener("sa_dedicated")
    try:
        assert async_engine.pool.checkedout() == 0
        # hold every pool connection at once (pool_size=3, no overflow): none is the listener
        conns = [await async_engine.connect() for _ in range(3)]
        try:
            pids = {(await c.exec_driver_sql("SELECT pg_backend_pid()")).scalar() for c in conns}
        finally:
            for c in conns:
                await c.close()
        assert len(pids) == 3
        assert listener.backend_pid not in pids
        await driver.exec("SELECT pg_notify('sa_dedicated', 'hi')")
        assert [n.payload for n in await listener.wait(5)] == ["hi"]
    finally:
        await listener.close()


def test_sync_lock_is_not_a_pool_connection(sync_engine: Engine) -> None:
    driver = SQLAlchemyDriver(sync_engine)
    lock = driver.try_advisory_lock(4242)
    assert lock is not None
    try:
        assert sync_engine.pool.checkedout() == 0
        pids = {driver.query("SELECT pg_backend_pid()")[0][0] for _ in range(3)}
        assert lock.backend_pid not in pids
        assert driver.try_advisory_lock(4242) is None
    finally:
        lock.release()


async def test_asyncpg_script_runs_inside_the_transaction(
    database_url: str, schema: str, db
) -> None:
    # SQLAlchemy's asyncpg dialect prepares statements; a script takes another path that must
    # still join the transaction
    engine = create_async_engine(sa_url(database_url, "asyncpg"))
    try:
        driver = AsyncSQLAlchemyDriver(engine)
        await driver.exec(f'CREATE SCHEMA "{schema}"')
        with pytest.raises(RuntimeError):
            async with driver.with_tx() as tx:
                await tx.exec(f'CREATE TABLE "{schema}".a (x int); CREATE TABLE "{schema}".b ();')
                raise RuntimeError
        assert db.value("SELECT count(*) FROM pg_tables WHERE schemaname = $1", (schema,)) == 0
        await driver.exec(
            f'CREATE TABLE "{schema}".a (x int); INSERT INTO "{schema}".a VALUES (1);'
        )
        assert db.value(f'SELECT x FROM "{schema}".a') == 1
    finally:
        await engine.dispose()


# -- building drivers -------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["postgresql", "postgresql+psycopg", "postgresql+asyncpg"])
async def test_async_connect_owns_its_engine(
    database_url: str, scheme: str, settings: pgqueue.Settings, db
) -> None:
    url = database_url.replace("postgresql", scheme, 1)
    driver = await async_connect(url, pool_size=2)
    assert driver._engine is not None
    assert driver._engine.dialect.driver == (scheme.partition("+")[2] or "psycopg")
    alive = "SELECT count(*) FROM pg_stat_activity WHERE pid = $1"
    async with pgqueue.AsyncClient(driver, settings=settings) as client:
        await client.migrate()
        handle = await client.add_job(Ping(note="hi"))
        assert handle.id > 0
        pid = (await driver.query("SELECT pg_backend_pid()"))[0][0]
        assert db.value(alive, (pid,)) == 1  # pooled
    # closed with the client: the engine was disposed, its connections closed
    for _ in range(50):
        if db.value(alive, (pid,)) == 0:
            break
        await asyncio.sleep(0.05)
    assert db.value(alive, (pid,)) == 0


async def test_client_connect_by_name(database_url: str, settings: pgqueue.Settings) -> None:
    url = sa_url(database_url, "asyncpg")
    async with await pgqueue.AsyncClient.connect(url, driver="sqlalchemy", settings=settings) as c:
        assert isinstance(c.driver, AsyncSQLAlchemyDriver)
        assert await c.migrate()
    with pgqueue.Client.connect(database_url, driver="sqlalchemy", settings=settings) as client:
        assert isinstance(client.driver, SQLAlchemyDriver)
        assert client.migrate() == []


async def test_connect_to_nowhere_fails_fast() -> None:
    for url in ("postgresql://nobody@127.0.0.1:1/x", "postgresql+asyncpg://nobody@127.0.0.1:1/x"):
        with pytest.raises(pgqueue.ConnectionLost, match="cannot connect to the database"):
            await async_connect(url)
    with pytest.raises(pgqueue.ConnectionLost, match="cannot connect to the database"):
        sync_connect("postgresql://nobody@127.0.0.1:1/x")


async def test_sides_are_not_mixed(database_url: str) -> None:
    async_engine = create_async_engine(sa_url(database_url))
    engine = create_engine(sa_url(database_url))
    try:
        with pytest.raises(pgqueue.ConfigurationError, match=r"use pgqueue\.AsyncClient"):
            sync_from_native(async_engine)
        with pytest.raises(pgqueue.ConfigurationError, match=r"use pgqueue\.AsyncClient"):
            sync_wrap_transaction(AsyncSession(async_engine))
        with pytest.raises(pgqueue.ConfigurationError, match=r"use pgqueue\.Client"):
            async_from_native(engine)
        with pytest.raises(pgqueue.ConfigurationError, match=r"use pgqueue\.Client"):
            async_wrap_transaction(Session(engine))
        with pytest.raises(pgqueue.ConfigurationError, match="dialect is asyncio"):
            sync_connect(sa_url(database_url, "asyncpg"))
        with pytest.raises(pgqueue.ConfigurationError, match="holds your transaction"):
            async_wrap_transaction(async_engine)
        # sessions stand for their engine
        assert isinstance(async_from_native(AsyncSession(async_engine)), AsyncSQLAlchemyDriver)
        assert isinstance(sync_from_native(Session(engine)), SQLAlchemyDriver)
    finally:
        engine.dispose()
        await async_engine.dispose()


def test_other_databases_are_refused() -> None:
    engine = create_engine("sqlite://")
    with pytest.raises(pgqueue.ConfigurationError, match="needs PostgreSQL"):
        SQLAlchemyDriver(engine)
    engine.dispose()


# -- one statement, one round trip -------------------------------------------------------------

# In autocommit a statement is its own transaction, which starts with it: now() (the
# transaction's start) equals statement_timestamp(). Inside BEGIN ... COMMIT, sent in separate
# round trips, the statement starts later than its transaction.
ALONE = "SELECT now() = statement_timestamp()"


@pytest.mark.parametrize("dialect", ["psycopg"])
def test_an_engine_statement_is_not_left_inside_an_open_transaction(
    database_url: str, dialect: str
) -> None:
    # A process stopped between the round trips of BEGIN, statement and COMMIT would hold the
    # statement's locks (its instance row) and block the leader's rescue of its jobs.
    engine = create_engine(sa_url(database_url, dialect))
    try:
        driver = SQLAlchemyDriver(engine)
        assert [driver.query(ALONE)[0][0] for _ in range(5)] == [True] * 5
        with driver.with_tx() as tx:  # a real transaction still spans its statements
            tx.query("SELECT 1")
            assert tx.query(ALONE)[0][0] is False
        with engine.connect() as conn:  # the pool got its connections back as they were
            assert conn.get_isolation_level() != "AUTOCOMMIT"
    finally:
        engine.dispose()


# psycopg only: asyncpg prepares each statement in a round trip of its own, after which
# statement_timestamp() no longer equals now() even in autocommit (same code path, though).
@pytest.mark.parametrize("dialect", ["psycopg"])
async def test_an_async_engine_statement_is_not_left_inside_an_open_transaction(
    database_url: str, dialect: str
) -> None:
    engine = create_async_engine(sa_url(database_url, dialect))
    try:
        driver = AsyncSQLAlchemyDriver(engine)
        assert [(await driver.query(ALONE))[0][0] for _ in range(5)] == [True] * 5
        async with driver.with_tx() as tx:
            await tx.query("SELECT 1")
            assert (await tx.query(ALONE))[0][0] is False
        async with engine.connect() as conn:
            assert await conn.get_isolation_level() != "AUTOCOMMIT"
    finally:
        await engine.dispose()
