"""The printed schema script (``pgqueue sql``, ``migrations_script``) through the tools people
apply it with: SQLAlchemy's ``exec_driver_sql`` (psycopg and asyncpg dialects), Alembic's
``op.execute`` and psql. Each reads some characters as placeholders or commands; the script
must contain none of them, and must really run."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext
from sqlalchemy.ext.asyncio import create_async_engine

import pgqueue
from pgqueue.queries import migrations_for, split_statements

SETTINGS = [pgqueue.Settings(), pgqueue.Settings(schema="s1", prefix="p_")]

# What some tool reads as something other than SQL text:
PLACEHOLDERS = {
    # psycopg (pyformat / format), hence SQLAlchemy's exec_driver_sql on it
    "percent": re.compile(r"%"),
    # SQLAlchemy text() (Alembic's op.execute of a string) binds :name; psql substitutes
    # :name, :'name' and :"name" (a :: cast is neither)
    "colon": re.compile(r"(?<!:):(?=[A-Za-z_'\"{])"),
    # asyncpg and the numeric_dollar paramstyle
    "dollar number": re.compile(r"\$\d"),
    # qmark paramstyle
    "question mark": re.compile(r"\?"),
    # psql meta-commands
    "backslash": re.compile(r"\\"),
}


def texts(settings: pgqueue.Settings) -> list[str]:
    return [
        pgqueue.migrations_script(settings),
        pgqueue.migrations_script(settings, transaction=False),
        *pgqueue.migrations_statements(settings),
    ]


@pytest.mark.parametrize("settings", SETTINGS, ids=["default", "s1-p_"])
def test_the_script_holds_nothing_a_tool_reads_as_a_placeholder(
    settings: pgqueue.Settings,
) -> None:
    for text in texts(settings):
        for what, pattern in PLACEHOLDERS.items():
            found = [text[max(m.start() - 40, 0) : m.end() + 10] for m in pattern.finditer(text)]
            assert not found, (what, found)


def test_statements_are_the_script_one_by_one() -> None:
    settings = pgqueue.Settings(schema="s1", prefix="p_")
    statements = pgqueue.migrations_statements(settings)
    script = pgqueue.migrations_script(settings, transaction=False)

    def bare(items: list[str]) -> list[str]:
        return [re.sub(r"--[^\n]*", "", s).strip() for s in items]

    assert bare(split_statements(script)) == bare(statements)
    assert not any(s.rstrip().endswith(";") for s in statements)
    assert statements[0].startswith("SELECT pg_advisory_xact_lock(")
    latest = migrations_for(settings)[-1].version
    assert f"VALUES ({latest}, " in statements[-1]
    later = pgqueue.migrations_statements(settings, from_version=latest)
    assert len(later) == 3  # the lock, the schema, the bookkeeping table


def test_split_statements_keeps_quoted_semicolons() -> None:
    sql = (
        "SELECT ';' ; SELECT $x$ a;b $x$; -- c; d\n SELECT \"a;\"; /* ; */ SELECT $$;$$;"
        " SELECT 'it''s;'  ;\n-- the end;\n"
    )
    assert split_statements(sql) == [
        "SELECT ';'",
        "SELECT $x$ a;b $x$",
        '-- c; d\n SELECT "a;"',
        "/* ; */ SELECT $$;$$",
        "SELECT 'it''s;'",
    ]


def assert_migrated(url: str, settings: pgqueue.Settings) -> None:
    with pgqueue.Client.connect(url, settings=settings) as client:
        assert client.schema_version() == migrations_for(settings)[-1].version
        assert client.migrate() == []  # every version recorded by the script


def sqlalchemy_url(database_url: str, dialect: str) -> str:
    return database_url.replace("postgresql://", f"postgresql+{dialect}://", 1)


def test_the_script_runs_through_exec_driver_sql_on_psycopg(
    database_url: str, settings: pgqueue.Settings
) -> None:
    engine = sa.create_engine(sqlalchemy_url(database_url, "psycopg"))
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(pgqueue.migrations_script(settings, transaction=False))
    finally:
        engine.dispose()
    assert_migrated(database_url, settings)


async def test_the_statements_run_through_exec_driver_sql_on_asyncpg(
    database_url: str, settings: pgqueue.Settings
) -> None:
    # The asyncpg dialect prepares each statement (one command each): statement by statement.
    engine = create_async_engine(sqlalchemy_url(database_url, "asyncpg"))
    try:
        async with engine.begin() as conn:
            for statement in pgqueue.migrations_statements(settings):
                await conn.exec_driver_sql(statement)
    finally:
        await engine.dispose()
    assert_migrated(database_url, settings)


def alembic_execute(texts: list[str]) -> Callable[[sa.Connection], None]:
    def run(conn: sa.Connection) -> None:
        op = Operations(MigrationContext.configure(conn))
        for text in texts:
            op.execute(text)

    return run


def test_the_script_runs_through_alembic_op_execute(
    database_url: str, settings: pgqueue.Settings
) -> None:
    engine = sa.create_engine(sqlalchemy_url(database_url, "psycopg"))
    try:
        with engine.begin() as conn:
            alembic_execute([pgqueue.migrations_script(settings, transaction=False)])(conn)
    finally:
        engine.dispose()
    assert_migrated(database_url, settings)


async def test_the_statements_run_through_alembic_op_execute_on_asyncpg(
    database_url: str, settings: pgqueue.Settings
) -> None:
    engine = create_async_engine(sqlalchemy_url(database_url, "asyncpg"))
    try:
        async with engine.begin() as conn:
            statements = pgqueue.migrations_statements(settings)
            await conn.run_sync(alembic_execute(statements))
    finally:
        await engine.dispose()
    assert_migrated(database_url, settings)


def run_psql(database_url: str, script: Path) -> subprocess.CompletedProcess[Any]:
    psql = shutil.which("psql")
    if psql is None:
        pytest.skip("psql is not installed")
    return subprocess.run(
        [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", database_url, "-f", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_script_runs_through_psql_twice(
    database_url: str, settings: pgqueue.Settings, tmp_path: Path
) -> None:
    script = tmp_path / "pgqueue.sql"
    script.write_text(pgqueue.migrations_script(settings))
    first = run_psql(database_url, script)
    assert first.returncode == 0, first.stderr
    assert "ERROR" not in first.stderr
    assert_migrated(database_url, settings)
    again = run_psql(database_url, script)  # documented as harmless
    assert again.returncode == 0, again.stderr
    assert_migrated(database_url, settings)
