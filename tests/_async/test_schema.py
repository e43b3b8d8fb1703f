"""Schema and migrations on every driver mode."""

from __future__ import annotations

import pytest

import pgqueue
from pgqueue._async.compat import gather
from pgqueue.queries import migrations_for
from tests import jobs
from tests._async.test_enqueue import SendEmail

pytestmark = pytest.mark.timeout(60)

LATEST = len(migrations_for(pgqueue.Settings()))


async def test_migrate_creates_tables_and_is_idempotent(
    driver: pgqueue.AsyncDriver, settings: pgqueue.Settings, db
) -> None:
    client = pgqueue.AsyncClient(driver, settings=settings)
    assert await client.schema_version() is None
    assert await client.migrate() == list(range(1, LATEST + 1))
    assert await client.schema_version() == LATEST
    assert await client.migrate() == []
    assert await client.schema_version() == LATEST
    tables = {
        r[0]
        for r in db.rows(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1",
            (settings.schema,),
        )
    }
    assert tables == {
        "pgqueue_jobs",
        "pgqueue_unique_locks",
        "pgqueue_instances",
        "pgqueue_queues",
        "pgqueue_cron_entries",
        "pgqueue_cron_ticks",
        "pgqueue_migrations",
    }


async def test_claim_index_is_partial_and_in_claim_order(
    client: pgqueue.AsyncClient, settings: pgqueue.Settings, db
) -> None:
    indexdef = db.value(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = $2",
        (settings.schema, "pgqueue_jobs_claim_idx"),
    )
    assert "(queue, priority DESC, scheduled_for, id)" in indexdef
    assert "WHERE (status = 'pending'::text)" in indexdef


# The claim's query plan (prepared, generic and custom): tests/test_query_plans.py.


async def test_custom_schema_and_prefix_are_isolated(
    driver: pgqueue.AsyncDriver, schema: str, db
) -> None:
    a = pgqueue.AsyncClient(driver, settings=pgqueue.Settings(schema=schema, prefix="a_"))
    b = pgqueue.AsyncClient(driver, settings=pgqueue.Settings(schema=schema, prefix="b_"))
    await a.migrate()
    await b.migrate()
    await a.add_job(SendEmail(to="a"))
    await b.add_jobs([SendEmail(to="b1"), SendEmail(to="b2")])
    assert db.value(f'SELECT count(*) FROM "{schema}".a_jobs') == 1
    assert db.value(f'SELECT count(*) FROM "{schema}".b_jobs') == 2
    assert db.value(f'SELECT count(*) FROM "{schema}".a_migrations') == LATEST


async def test_printed_sql_matches_migrate(driver: pgqueue.AsyncDriver, schema: str, db) -> None:
    # apply the printed script by hand, as an Alembic/Flyway user would
    settings = pgqueue.Settings(schema=schema)
    db.conn.execute(pgqueue.migrations_script(settings))
    client = pgqueue.AsyncClient(driver, settings=settings)
    assert await client.schema_version() == LATEST
    assert await client.migrate() == []  # migrate() sees the versions the script recorded
    # and the script is safe to run twice
    db.conn.execute(pgqueue.migrations_script(settings))
    assert db.value(f'SELECT count(*) FROM "{schema}".pgqueue_migrations') == LATEST


async def test_concurrent_migrations_apply_once(
    driver: pgqueue.AsyncDriver, settings: pgqueue.Settings, db
) -> None:
    # in the async suite these run concurrently (in the sync one, one after the other; the
    # cross-process race lives in tests/test_migrate_race.py)
    clients = [pgqueue.AsyncClient(driver, settings=settings) for _ in range(4)]
    results = await gather(*(c.migrate() for c in clients))
    assert sorted(v for r in results for v in r) == list(range(1, LATEST + 1))
    assert db.value(f'SELECT count(*) FROM "{settings.schema}".pgqueue_migrations') == LATEST


async def test_uninstall_drops_pgqueue_and_its_own_schema(
    driver: pgqueue.AsyncDriver, database_url: str, db
) -> None:
    import uuid

    schema = f"uninstall_{uuid.uuid4().hex[:8]}"
    client = pgqueue.AsyncClient(driver, settings=pgqueue.Settings(schema=schema))
    await client.migrate()
    await client.add_job(SendEmail(to="a"))
    await client.uninstall()
    assert await client.schema_version() is None
    assert db.value("SELECT count(*) FROM pg_namespace WHERE nspname = $1", (schema,)) == 0
    await client.uninstall()  # nothing left to drop: fine
    assert await client.migrate() == list(range(1, LATEST + 1))  # and it installs again
    await client.uninstall()


async def test_uninstall_keeps_what_else_lives_in_the_schema(
    driver: pgqueue.AsyncDriver, schema: str, db
) -> None:
    a = pgqueue.AsyncClient(driver, settings=pgqueue.Settings(schema=schema, prefix="a_"))
    b = pgqueue.AsyncClient(driver, settings=pgqueue.Settings(schema=schema, prefix="b_"))
    await a.migrate()
    await b.migrate()
    db.conn.execute(f'CREATE TABLE "{schema}".app_table (id int)')
    await a.uninstall()
    tables = {
        r[0]
        for r in db.rows(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", (schema,)
        )
    }
    assert tables == {
        "app_table",
        "b_jobs",
        "b_unique_locks",
        "b_instances",
        "b_queues",
        "b_cron_entries",
        "b_cron_ticks",
        "b_migrations",
    }
    assert await a.schema_version() is None
    assert await b.schema_version() == LATEST
    await b.add_job(SendEmail(to="b"))  # b's trigger function is its own: b still works
    assert db.value(f'SELECT count(*) FROM "{schema}".b_jobs') == 1


async def test_a_worker_refuses_to_start_on_an_older_schema(
    driver: pgqueue.AsyncDriver, settings: pgqueue.Settings, db
) -> None:
    client = pgqueue.AsyncClient(driver, registry=jobs.registry, settings=settings)
    await client.migrate()
    # as a schema of the previous version looks: without the last migration's tables and row
    db.rows(f'DROP TABLE "{settings.schema}".pgqueue_cron_ticks')
    db.rows(f'DROP TABLE "{settings.schema}".pgqueue_cron_entries')
    db.rows(f'DELETE FROM "{settings.schema}".pgqueue_migrations WHERE version = {LATEST}')
    with pytest.raises(pgqueue.SchemaNotMigrated, match=f"version {LATEST - 1}.*pgqueue migrate"):
        await client.start()
    assert db.value(f'SELECT count(*) FROM "{settings.schema}".pgqueue_instances') == 0
    await client.migrate()
    await client.start()
    await client.stop(0)
