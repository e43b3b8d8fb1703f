"""Enqueueing through Django's database connection (the psycopg 3 backend), on a real Django
configuration pointed at the test database: ``add_job_with_tx(django.db.connection, ...)``
joins ``transaction.atomic()``, and commits at once under Django's autocommit."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import unquote, urlsplit

import pytest

import pgqueue
from pgqueue.frameworks import native_transaction
from tests import jobs

django = pytest.importorskip("django")

from django.conf import settings as django_settings  # noqa: E402
from django.db import connection, connections, transaction  # noqa: E402


@pytest.fixture(scope="module")
def django_db(database_url: str) -> Iterator[None]:
    url = urlsplit(database_url)
    if not django_settings.configured:
        django_settings.configure(
            DATABASES={
                "default": {
                    "ENGINE": "django.db.backends.postgresql",
                    "NAME": url.path.lstrip("/"),
                    "USER": unquote(url.username or ""),
                    "PASSWORD": unquote(url.password or ""),
                    "HOST": url.hostname or "",
                    "PORT": str(url.port or ""),
                },
                "lite": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
            },
            INSTALLED_APPS=[],
            USE_TZ=True,
        )
        django.setup()
    assert django_settings.DATABASES["default"]["NAME"] == url.path.lstrip("/")
    yield
    connections.close_all()


@pytest.fixture
def client(
    django_db: None, database_url: str, settings: pgqueue.Settings
) -> Iterator[pgqueue.Client]:
    with pgqueue.Client.connect(database_url, settings=settings) as c:
        c.migrate()
        yield c


def exists(db, jobs_table: str, job_id: int) -> bool:
    return bool(db.value(f"SELECT count(*) FROM {jobs_table} WHERE id = $1", (job_id,)))


def test_django_uses_psycopg_3(django_db: None) -> None:
    connection.ensure_connection()
    assert type(connection.connection).__module__.split(".")[0] == "psycopg"
    assert native_transaction(connection) is connection.connection
    assert native_transaction(connections["default"]) is connection.connection


def test_job_commits_with_the_atomic_block(
    client: pgqueue.Client, db, jobs_table: str, settings: pgqueue.Settings
) -> None:
    signups = f'"{settings.schema}".signups'
    db.rows(f"CREATE TABLE {signups} (email text)")
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute(f"INSERT INTO {signups} VALUES (%s)", ["a@example.com"])
        handle = client.add_job_with_tx(connection, jobs.Record(token="django"))
        assert handle.inserted
        assert not exists(db, jobs_table, handle.id)  # not before Django commits
        assert db.value(f"SELECT count(*) FROM {signups}") == 0
    assert exists(db, jobs_table, handle.id)
    assert db.value(f"SELECT count(*) FROM {signups}") == 1
    assert connection.get_autocommit()  # Django's state is as it was


def test_an_exception_in_the_atomic_block_leaves_no_job(
    client: pgqueue.Client, db, jobs_table: str
) -> None:
    with pytest.raises(RuntimeError, match="roll back"), transaction.atomic():
        handle = client.add_job_with_tx(connection, jobs.Record(token="django"))
        raise RuntimeError("roll back")
    assert not exists(db, jobs_table, handle.id)
    # a nested atomic block is a savepoint: rolling it back drops only its job
    with transaction.atomic():
        kept = client.add_job_with_tx(connections["default"], jobs.Record(token="kept"))
        with pytest.raises(RuntimeError), transaction.atomic():
            dropped = client.add_job_with_tx(connection, jobs.Record(token="dropped"))
            raise RuntimeError("inner")
    assert exists(db, jobs_table, kept.id)
    assert not exists(db, jobs_table, dropped.id)


def test_outside_atomic_the_job_commits_at_once(
    client: pgqueue.Client, db, jobs_table: str
) -> None:
    connections.close_all()  # also from a connection Django has not opened yet
    assert connection.connection is None
    handle = client.add_job_with_tx(connection, jobs.Record(token="autocommit"))
    assert connection.get_autocommit()
    assert exists(db, jobs_table, handle.id)
    handles = client.add_jobs_with_tx(connection, [jobs.Record(token="a"), jobs.Record(token="b")])
    assert all(exists(db, jobs_table, h.id) for h in handles)


def test_another_database_vendor_is_refused(client: pgqueue.Client) -> None:
    with pytest.raises(pgqueue.ConfigurationError, match=r"'sqlite': pgqueue needs PostgreSQL"):
        client.add_job_with_tx(connections["lite"], jobs.Record(token="lite"))


async def test_the_async_client_refuses_djangos_sync_connection(
    django_db: None, database_url: str, settings: pgqueue.Settings
) -> None:
    # Django's connection is sync (and Django refuses it inside a running event loop).
    async with await pgqueue.AsyncClient.connect(database_url, settings=settings) as client:
        with pytest.raises(pgqueue.ConfigurationError, match="Client"):
            await client.add_job_with_tx(connection, jobs.Record(token="async"))
