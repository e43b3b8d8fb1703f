"""The shipped SQL files: named queries, migrations, ``migrations_script`` and ``pgqueue sql``."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

import pgqueue
from pgqueue.cli import main
from pgqueue.queries import Queries, migrations_for, queries_for

MIGRATION_NAME_RE = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql\Z")


def migration_files() -> list[str]:
    folder = resources.files("pgqueue").joinpath("sql", "migrations")
    return sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".sql"))


@pytest.fixture(autouse=True)
def _no_cli_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PGQUEUE_SCHEMA", "PGQUEUE_PREFIX", "PGQUEUE_DSN", "PGQUEUE_DRIVER"):
        monkeypatch.delenv(name, raising=False)


# -- queries.sql -------------------------------------------------------------------------------


def test_expected_queries_exist() -> None:
    names = Queries(pgqueue.Settings()).names()
    for required in (
        "migration_lock",
        "migration_table_create",
        "migration_applied_list",
        "migration_record",
        "migration_table_exists",
        "migration_current_version",
        "job_insert",
        "job_insert_many",
    ):
        assert required in names


@pytest.mark.parametrize(
    "settings", [pgqueue.Settings(), pgqueue.Settings(schema="s1", prefix="p_")]
)
def test_every_query_renders_without_leftover_placeholders(settings: pgqueue.Settings) -> None:
    queries = Queries(settings)
    assert queries.names()
    for name in queries.names():
        sql = getattr(queries, name)
        assert sql.strip(), name
        assert "{{" not in sql, name
        assert "}}" not in sql, name
        assert not sql.rstrip().endswith(";"), name  # drivers may refuse a trailing semicolon
        assert "-- name:" not in sql, name  # one statement per name


def test_rendered_sql_quotes_schema_and_prefix() -> None:
    queries = Queries(pgqueue.Settings(schema="s1", prefix="p_"))
    assert '"s1"."p_jobs"' in queries.job_insert
    assert '"s1"."p_jobs"' in queries.job_insert_many
    assert '"s1"."p_migrations"' in queries.migration_table_create
    assert "pgqueue_" not in queries.job_insert
    assert queries.table("jobs") == '"s1"."p_jobs"'


def test_every_table_reference_is_schema_qualified() -> None:
    queries = Queries(pgqueue.Settings(schema="s1", prefix="p_"))
    for name in queries.names():
        sql = getattr(queries, name)
        for match in re.finditer(r'"p_[a-z_]+"', sql):
            assert sql[: match.start()].endswith('"s1".'), (name, match.group())


def test_unknown_query_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_query"):
        _ = Queries(pgqueue.Settings()).no_such_query


def test_queries_for_is_cached_per_settings() -> None:
    a = queries_for(pgqueue.Settings(schema="s1"))
    assert queries_for(pgqueue.Settings(schema="s1")) is a
    assert queries_for(pgqueue.Settings(schema="s2")) is not a


# -- migrations --------------------------------------------------------------------------------


def test_every_migration_file_follows_the_naming_pattern() -> None:
    # a misnamed file would be skipped silently by the loader
    files = migration_files()
    assert files
    for name in files:
        assert MIGRATION_NAME_RE.match(name), name


def test_migrations_are_numbered_from_one_without_gaps() -> None:
    versions = [int(MIGRATION_NAME_RE.match(name).group(1)) for name in migration_files()]  # type: ignore[union-attr]
    assert versions == list(range(1, len(versions) + 1))
    loaded = migrations_for(pgqueue.Settings())
    assert [m.version for m in loaded] == versions
    assert loaded[0].name == "initial"


@pytest.mark.parametrize(
    "settings", [pgqueue.Settings(), pgqueue.Settings(schema="s1", prefix="p_")]
)
def test_migrations_render_without_leftover_placeholders(settings: pgqueue.Settings) -> None:
    for migration in migrations_for(settings):
        assert "{{" not in migration.sql, migration.version
        assert "}}" not in migration.sql, migration.version
    assert f'"{settings.schema}"."{settings.prefix}jobs"' in migrations_for(settings)[0].sql


def test_migrations_manage_no_transaction_themselves() -> None:
    # migrate() and migrations_script() wrap them in one transaction
    for migration in migrations_for(pgqueue.Settings()):
        # a function body's BEGIN ... END is plpgsql, not a transaction
        outside_bodies = re.sub(r"\$(\w*)\$.*?\$\1\$", "", migration.sql, flags=re.S)
        statements = re.findall(r"^\s*(BEGIN|COMMIT|ROLLBACK)\b", outside_bodies, re.I | re.M)
        assert not statements, migration.version


# -- migrations_script -------------------------------------------------------------------------


def test_migrations_script_contents() -> None:
    settings = pgqueue.Settings(schema="s1", prefix="p_")
    script = pgqueue.migrations_script(settings)
    lines = script.splitlines()
    assert "BEGIN;" in lines
    assert lines[-1] == "COMMIT;"
    lock = f"SELECT pg_advisory_xact_lock({settings.advisory_key('migrate')});"
    assert lock in lines
    assert 'CREATE SCHEMA IF NOT EXISTS "s1";' in lines
    assert '"s1"."p_migrations"' in script
    assert "{{" not in script

    # BEGIN, then the lock, then everything else, then COMMIT
    position = script.index
    assert position("BEGIN;") < position(lock) < position("CREATE SCHEMA") < position("COMMIT;")
    previous = position(lock)
    for migration in migrations_for(settings):
        body = migration.sql.strip()
        record = (
            f'INSERT INTO "s1"."p_migrations" (version, name) '
            f"VALUES ({migration.version}, '{migration.name}') ON CONFLICT (version) DO NOTHING;"
        )
        assert body in script, migration.version
        assert record in lines, migration.version
        assert previous < position(body) < position(record) < position("COMMIT;")
        previous = position(record)


def test_migrations_script_lock_matches_migrate_and_differs_per_installation() -> None:
    a = pgqueue.migrations_script(pgqueue.Settings(schema="a"))
    b = pgqueue.migrations_script(pgqueue.Settings(schema="b"))
    key_a = pgqueue.Settings(schema="a").advisory_key("migrate")
    key_b = pgqueue.Settings(schema="b").advisory_key("migrate")
    assert key_a != key_b
    assert f"pg_advisory_xact_lock({key_a})" in a
    assert f"pg_advisory_xact_lock({key_b})" not in a
    assert f"pg_advisory_xact_lock({key_b})" in b


def test_migrations_script_from_version_skips_applied_migrations() -> None:
    settings = pgqueue.Settings()
    latest = migrations_for(settings)[-1].version
    script = pgqueue.migrations_script(settings, from_version=latest)
    assert "-- migration" not in script
    assert "INSERT INTO" not in script
    assert "BEGIN;" in script
    assert script.rstrip().endswith("COMMIT;")
    full = pgqueue.migrations_script(settings)
    assert "-- migration 1: initial" in full


# -- CLI ---------------------------------------------------------------------------------------


def test_cli_sql_prints_the_script(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sql", "--schema", "abc"]) == 0
    captured = capsys.readouterr()
    assert captured.out == pgqueue.migrations_script(pgqueue.Settings(schema="abc"))
    assert '"abc"."pgqueue_jobs"' in captured.out
    assert captured.err == ""


def test_cli_sql_prefix_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sql", "--schema", "abc", "--prefix", "q_"]) == 0
    out = capsys.readouterr().out
    assert out == pgqueue.migrations_script(pgqueue.Settings(schema="abc", prefix="q_"))
    assert '"abc"."q_jobs"' in out


def test_cli_sql_reads_schema_from_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGQUEUE_SCHEMA", "from_env")
    assert main(["sql"]) == 0
    assert capsys.readouterr().out == pgqueue.migrations_script(pgqueue.Settings(schema="from_env"))


def test_cli_sql_rejects_a_bad_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sql", "--schema", "Bad-Name"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "Bad-Name" in captured.err
    assert "schema" in captured.err
    assert captured.err.startswith("pgqueue: error:")


def test_cli_without_a_command_exits_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "Usage: pgqueue" in capsys.readouterr().err


def test_cli_sql_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sql", "--no-transaction"]) == 0
    out = capsys.readouterr().out
    assert "BEGIN;" not in out
    assert "COMMIT;" not in out
    assert "pg_advisory_xact_lock" in out
    latest = len(migrations_for(pgqueue.Settings()))
    assert main(["sql", "--from-version", str(latest)]) == 0
    out = capsys.readouterr().out
    assert "-- migration" not in out
    assert "CREATE TABLE IF NOT EXISTS" in out  # only the bookkeeping table


def test_queries_sql_and_the_declared_statement_names_must_agree(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pgqueue import queries

    names = set(queries._STATEMENT_NAMES)
    assert set(queries._raw_queries()) == names  # what the import checked
    extra = {**queries._raw_queries(), "job_undeclared": "SELECT 1"}
    monkeypatch.setattr(queries, "_raw_queries", lambda: extra)
    with pytest.raises(RuntimeError, match=r"only in the files \['job_undeclared'\]"):
        queries._check_statement_names()
    missing = {k: v for k, v in extra.items() if k not in ("job_undeclared", "job_claim")}
    monkeypatch.setattr(queries, "_raw_queries", lambda: missing)
    with pytest.raises(RuntimeError, match=r"only declared \['job_claim'\]"):
        queries._check_statement_names()


def test_only_the_store_names_a_statement() -> None:
    """Nothing but the store layer reads the named statements of queries.sql."""
    import ast

    root = Path(pgqueue.__file__).parent
    allowed = {
        "queries.py",
        "_async/store.py",
        "_sync/store.py",
        "_async/store_periodic.py",
        "_sync/store_periodic.py",
    }
    offenders = []
    for path in root.rglob("*.py"):
        relative = path.relative_to(root).as_posix()
        if relative in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("queries"):
                names = {alias.name for alias in node.names}
                if names & {"Queries", "queries_for"}:
                    offenders.append(relative)
    assert offenders == []
