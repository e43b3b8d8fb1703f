"""Test fixtures shared by every suite: a throwaway database per run, a schema per test.

Tests talk to a real PostgreSQL: ``$PGQUEUE_TEST_DSN`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``) must let us create databases. Each run creates
its own database and drops it at the end; each test gets its own schema inside it. Under
pytest-xdist (``make test``) each test process is a run: it has a database of its own.
"""

from __future__ import annotations

import fcntl
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

import pgqueue
from tests.pgbouncer import PgBouncer, missing_pgbouncer

ADMIN_DSN = os.environ.get("PGQUEUE_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")

# The commands the tests run print their tables at the width of no terminal, unless a test says
# otherwise: a terminal size handed down is not theirs. (Python's readline, once imported,
# exports COLUMNS=80 and LINES=24 to the processes started after: pytest-xdist's test processes.)
for _size in ("COLUMNS", "LINES"):
    os.environ.pop(_size, None)


def _utf8(text: str) -> str:
    """``text``, with what UTF-8 cannot encode (a lone surrogate) as a backslash escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """In a pytest-xdist test process, make each report's text fit for the trip to the controller.

    Some tests log (or fail on) a lone surrogate, a hostile job's exception text; execnet sends
    UTF-8 only, and a report it cannot send ends the test process with an internal error.
    """
    report = yield
    if hasattr(item.config, "workerinput"):  # a pytest-xdist worker
        report.sections = [(title, _utf8(text)) for title, text in report.sections]
        if report.failed and _utf8(text := str(report.longrepr)) != text:
            report.longrepr = _utf8(text)
    return report


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    name = f"pgqueue_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    # a URL (not key=value conninfo), so tests can also exercise postgresql+driver:// schemes
    p = conninfo_to_dict(ADMIN_DSN)
    auth = quote(str(p.get("user", "postgres")))
    if p.get("password"):
        auth += ":" + quote(str(p["password"]))
    url = f"postgresql://{auth}@{p.get('host', '127.0.0.1')}:{p.get('port', 5432)}/{name}"
    try:
        yield url
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture
def fresh_database(database_url: str) -> Iterator[str]:
    """A database of the test's own on the test server, dropped afterwards: for what uses the
    default schema (the README's quickstart, the docs' examples)."""
    name = f"pgqueue_fresh_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield database_url.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture(scope="session")
def pgbouncer() -> Iterator[PgBouncer]:
    """A real PgBouncer, transaction pooling, in front of the test server (tests/pgbouncer.py).

    Without Debian's pgbouncer the tests that need it are skipped, with the reason, as the
    browser tests are without Chromium; ``.ci/run`` installs it and sets
    ``PGQUEUE_REQUIRE_PGBOUNCER=1``, which makes its absence a failure instead.
    """
    missing = missing_pgbouncer()
    if missing and os.environ.get("PGQUEUE_REQUIRE_PGBOUNCER") == "1":
        pytest.fail(missing)
    if missing:
        pytest.skip(missing)
    bouncer = PgBouncer(ADMIN_DSN)
    try:
        yield bouncer
    finally:
        bouncer.close()


@pytest.fixture
def many_connections(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Taken by a test that opens tens of connections at once: no two such tests run at the same
    time, in any of the run's test processes (the server allows 100 connections; the others
    stay under about 25 each).
    """
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's, above each test process's own
    with open(shared / "many-connections.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


class Db:
    """An independent observer: its own autocommit connection, outside any code under test."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn = psycopg.connect(url, autocommit=True)

    def rows(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        # The fault suite kills sessions and restarts the server: a broken session is replaced,
        # waiting up to 30 s for the server to take connections again.
        deadline = time.monotonic() + 30
        while True:
            try:
                if self.conn.closed or self.conn.broken:
                    self.conn = psycopg.connect(self.url, autocommit=True, connect_timeout=3)
                with psycopg.RawCursor(self.conn) as cur:
                    cur.execute(query, params)
                    return cur.fetchall() if cur.description else []
            except psycopg.OperationalError:
                if not (self.conn.closed or self.conn.broken) or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def value(self, query: str, params: Sequence[Any] = ()) -> Any:
        return self.rows(query, params)[0][0]


@pytest.fixture(scope="session")
def db(database_url: str) -> Iterator[Db]:
    observer = Db(database_url)
    yield observer
    observer.conn.close()


@pytest.fixture
def schema(db: Db) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
    db.rows(drop.as_string(db.conn))


@pytest.fixture
def settings(schema: str) -> pgqueue.Settings:
    return pgqueue.Settings(schema=schema)


@pytest.fixture
def jobs_table(settings: pgqueue.Settings) -> str:
    return f'"{settings.schema}"."{settings.prefix}jobs"'
