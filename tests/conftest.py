"""Test fixtures shared by every suite: a throwaway database per run, a schema per test.

Tests talk to a real PostgreSQL: ``$PGQUEUE_TEST_DSN`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``) must let us create databases. Each run creates
its own database and drops it at the end; each test gets its own schema inside it.
"""

from __future__ import annotations

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

ADMIN_DSN = os.environ.get("PGQUEUE_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


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
