"""Every ``pgqueue`` command in every driver mode, through real processes.

An asyncio-only driver (asyncpg, directly or as SQLAlchemy's dialect) runs the command on
``AsyncClient``; the others on ``Client``. The worker's start line says which driver and
runtime it chose, which is also how the driver precedence of the command is tested:
``--driver``, then a ``postgresql+<driver>://`` URL, then ``$PGQUEUE_DRIVER``, then psycopg.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import pgqueue
from pgqueue.queries import migrations_for
from tests import jobs
from tests._sync.helpers import wait_until

pytestmark = pytest.mark.timeout(240)
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mode:
    id: str
    scheme: str  # the URL's scheme
    args: tuple[str, ...]  # extra command-line arguments
    env: tuple[tuple[str, str], ...]  # extra environment
    driver: str  # what the worker's start line names
    runtime: str  # "sync" or "asyncio"


MODES = [
    Mode("psycopg", "postgresql", ("--driver", "psycopg"), (), "psycopg", "sync"),
    Mode(
        "sqlalchemy", "postgresql", ("--driver", "sqlalchemy"), (), "sqlalchemy (psycopg)", "sync"
    ),
    Mode("asyncpg", "postgresql", ("--driver", "asyncpg"), (), "asyncpg", "asyncio"),
    Mode("asyncpg-url", "postgresql+asyncpg", (), (), "asyncpg", "asyncio"),
    Mode(
        "sqlalchemy-asyncpg",
        "postgresql+asyncpg",
        ("--driver", "sqlalchemy"),
        (),
        "sqlalchemy (asyncpg)",
        "asyncio",
    ),
    # an install with only the asyncpg extra sets the environment variable
    Mode("asyncpg-env", "postgresql", (), (("PGQUEUE_DRIVER", "asyncpg"),), "asyncpg", "asyncio"),
]


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
    env.pop("DATABASE_URL", None)
    return env


def url_for(database_url: str, scheme: str) -> str:
    return database_url.replace("postgresql://", f"{scheme}://", 1)


def pgqueue_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pgqueue", *args]


def run(
    args: list[str], env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        pgqueue_cmd(*args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def latest_version() -> int:
    return migrations_for(pgqueue.Settings())[-1].version


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.id)
def test_migrate_in_every_driver_mode(mode: Mode, database_url: str, schema: str, db) -> None:
    env = {**clean_env(), **dict(mode.env), "PGQUEUE_SCHEMA": schema}
    dsn = url_for(database_url, mode.scheme)
    first = run(["migrate", "--dsn", dsn, *mode.args], env)
    assert first.returncode == 0, first.stderr
    latest = latest_version()
    applied = ", ".join(str(v) for v in range(1, latest + 1))
    assert first.stdout == f"pgqueue schema at version {latest} (applied {applied})\n"
    again = run(["migrate", "--dsn", dsn, *mode.args], env)
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"pgqueue schema at version {latest} (nothing to apply)\n"
    versions = db.rows(f'SELECT version FROM "{schema}".pgqueue_migrations ORDER BY version')
    assert [v for (v,) in versions] == list(range(1, latest + 1))


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.id)
def test_demo_in_every_driver_mode(mode: Mode, database_url: str, db) -> None:
    env = {**clean_env(), **dict(mode.env)}
    result = run(
        ["demo", "--jobs", "20", "--dsn", url_for(database_url, mode.scheme), *mode.args], env
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"workers started ({mode.runtime} client)" in result.stdout
    assert re.search(r"demo\.email\s+completed\s+10\s+1\n", result.stdout), result.stdout
    assert re.search(r"demo\.broken\s+failed\s+1\s+3\n", result.stdout), result.stdout
    assert re.search(r"demo\.flaky\s+completed\s+1\s+3\n", result.stdout), result.stdout
    assert "Traceback" not in result.stderr  # the jobs' planned failures are one line each
    assert db.rows("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'pgqueue_demo%'") == []


class WorkerProcess:
    """One ``pgqueue worker`` process, its stderr (the log) in a file; killed if a test leaves it
    running."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(
                pgqueue_cmd("worker", *args),
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    def text(self) -> str:
        return self.log.read_text()

    def started_line(self) -> str:
        def line() -> str | None:
            assert self.proc.poll() is None, self.text()
            found = re.search(r"^.*worker started.*$", self.text(), re.M)
            return found.group() if found else None

        found: str = wait_until(line, 60, interval=0.05, what="the worker's start line")
        return found

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[[list[str], dict[str, str]], WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(args: list[str], env: dict[str, str]) -> WorkerProcess:
        worker = WorkerProcess(args, env, tmp_path / f"worker-{len(started)}.log")
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


def start_line(driver: str, runtime: str, schema: str, queues: str) -> re.Pattern[str]:
    return re.compile(
        rf"INFO pgqueue .*worker started \(pid \d+\): driver {re.escape(driver)}, {runtime} "
        rf"runtime, schema '{schema}', prefix 'pgqueue_', queues {re.escape(queues)}; "
        r"registry tests\.jobs:registry with \d+ kind\(s\)$"
    )


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.id)
def test_worker_in_every_driver_mode_runs_jobs_and_says_what_it_runs(
    mode: Mode, database_url: str, settings: pgqueue.Settings, start_worker, db
) -> None:
    with pgqueue.Client.connect(database_url, settings=settings) as client:
        client.migrate()
        job = client.add_job(jobs.Record(token="cli"))
    env = {**clean_env(), **dict(mode.env), "PGQUEUE_SCHEMA": settings.schema}
    args = ["tests.jobs:registry", "--dsn", url_for(database_url, mode.scheme), *mode.args]
    worker = start_worker([*args, "--queues", "default=3,other=1"], env)
    line = worker.started_line()
    assert start_line(mode.driver, mode.runtime, settings.schema, "default=3,other=1").search(
        line
    ), line
    table = f'"{settings.schema}".pgqueue_jobs'
    wait_until(
        lambda: db.value(f"SELECT status FROM {table} WHERE id = $1", (job.id,)) == "completed",
        30,
        what="the job completed",
    )
    assert worker.stop() == 0, worker.text()
    assert worker.text().count("worker started") == 1


# -- driver precedence (the same rule as resolve_driver_name, tested in test_imports.py) -----


@pytest.mark.parametrize(
    ("scheme", "flag", "env_driver", "expected"),
    [
        # --driver beats a URL scheme and the environment
        ("postgresql+asyncpg", "psycopg", "sqlalchemy", ("psycopg", "sync")),
        ("postgresql", "asyncpg", "psycopg", ("asyncpg", "asyncio")),
        # a URL scheme beats the environment
        ("postgresql+asyncpg", None, "psycopg", ("asyncpg", "asyncio")),
        ("postgresql+psycopg", None, "asyncpg", ("psycopg", "sync")),
        # then the environment
        ("postgresql", None, "asyncpg", ("asyncpg", "asyncio")),
        ("postgresql", None, "sqlalchemy", ("sqlalchemy (psycopg)", "sync")),
        # then psycopg
        ("postgresql", None, None, ("psycopg", "sync")),
    ],
    ids=["flag>url", "flag>env", "url>env", "url>env-2", "env", "env-sqlalchemy", "default"],
)
def test_worker_driver_precedence(
    scheme: str,
    flag: str | None,
    env_driver: str | None,
    expected: tuple[str, str],
    database_url: str,
    settings: pgqueue.Settings,
    start_worker,
) -> None:
    with pgqueue.Client.connect(database_url, settings=settings) as client:
        client.migrate()
    env = {**clean_env(), "PGQUEUE_SCHEMA": settings.schema}
    if env_driver:
        env["PGQUEUE_DRIVER"] = env_driver
    args = ["tests.jobs:registry", "--dsn", url_for(database_url, scheme)]
    worker = start_worker([*args, *(["--driver", flag] if flag else [])], env)
    line = worker.started_line()
    assert start_line(*expected, settings.schema, "default=10").search(line), line
    assert worker.stop() == 0, worker.text()


def test_driver_help_states_the_precedence() -> None:
    result = run(["worker", "--help"], clean_env())
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.replace("\u2502", " ").split())  # without the help's frame
    assert (
        "default: the driver a postgresql+<driver>:// URL names, else $PGQUEUE_DRIVER, else "
        "psycopg" in text
    ), text


# -- a registry path that names nothing ------------------------------------------------------


def test_worker_with_a_missing_attribute_names_it_and_the_registries_there(
    database_url: str,
) -> None:
    env = {**clean_env(), "PGQUEUE_DSN": database_url}
    result = run(["worker", "tests.jobs:nope"], env, timeout=60)
    assert result.returncode == 1
    assert result.stderr == (
        "pgqueue: error: module 'tests.jobs' has no attribute 'nope' (its WorkerRegistry "
        "objects: registry): write the registry as module:attribute\n"
    )
    # an attribute that exists but is something else
    result = run(["worker", "tests.jobs:Record"], env, timeout=60)
    assert result.returncode == 1
    assert "tests.jobs:Record is a type, not a pgqueue.WorkerRegistry" in result.stderr
    # a module without any registry
    result = run(["worker", "tests.helpers_missing_registry:registry"], env, timeout=60)
    assert result.returncode == 1
    assert "cannot import 'tests.helpers_missing_registry'" in result.stderr
    result = run(["worker", "tests._sync.helpers:registry"], env, timeout=60)
    assert result.returncode == 1
    assert result.stderr == (
        "pgqueue: error: module 'tests._sync.helpers' has no attribute 'registry': "
        "write the registry as module:attribute\n"
    )


@pytest.mark.parametrize("mode", [MODES[0], MODES[2]], ids=lambda m: m.id)
def test_demo_stopped_by_sigterm_drops_its_schema(
    mode: Mode, database_url: str, db, tmp_path: Path
) -> None:
    log = tmp_path / "demo.log"
    env = {**clean_env(), **dict(mode.env)}
    args = ["demo", "--jobs", "5000", "--dsn", url_for(database_url, mode.scheme), *mode.args]
    with open(log, "wb") as out:
        proc = subprocess.Popen(pgqueue_cmd(*args), cwd=ROOT, env=env, stdout=out, stderr=out)
    try:
        wait_until(
            lambda: proc.poll() is None and "workers started" in log.read_text(),
            60,
            interval=0.05,
            what="the demo's workers started",
        )
        # what the demo's signals looked like (CI once saw it ignore SIGTERM, never alone)
        state = [
            line
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
            if line.startswith(("SigBlk", "SigIgn", "SigCgt"))
        ]
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the demo did not stop on SIGTERM ({state}): {log.read_text()}")
        assert code == 130, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert "interrupted" in log.read_text()
    assert db.rows("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'pgqueue_demo%'") == []
