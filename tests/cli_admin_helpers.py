"""What the tests of the operator commands share: running ``pgqueue`` as a process, a schema of
their own per test module, seeding jobs with the API (and plain SQL for the states a test needs),
and a snapshot of the tables to check that bad input changed nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pgqueue
from tests.conftest import Db
from tests.test_cli_drivers import MODES, Mode, clean_env, url_for

__all__ = [
    "MODES",
    "PSYCOPG",
    "Cli",
    "Mode",
    "admin_schema",
    "lines_of",
    "read_terminal",
    "unique_name",
]

ROOT = Path(__file__).resolve().parent.parent
PSYCOPG = MODES[0]
assert PSYCOPG.id == "psycopg"


@dataclass
class Cli:
    """Runs ``pgqueue`` commands against one schema, in one driver mode."""

    database_url: str
    settings: pgqueue.Settings
    db: Db
    mode: Mode = PSYCOPG

    @property
    def table(self) -> str:
        return f'"{self.settings.schema}".{self.settings.prefix}jobs'

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **clean_env(),
            **dict(self.mode.env),
            "PGQUEUE_DSN": url_for(self.database_url, self.mode.scheme),
            "PGQUEUE_SCHEMA": self.settings.schema,
            "TZ": "UTC",
            **extra,
        }

    def argv(self, *args: str) -> list[str]:
        # the driver options go after the command: each command takes them
        return [sys.executable, "-m", "pgqueue", *args, *self.mode.args]

    def __call__(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args),
            cwd=ROOT,
            env=self.env(**(env or {})),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def many(self, argvs: list[list[str]]) -> list[subprocess.CompletedProcess[str]]:
        """Run independent commands at once (each a process of its own); their results."""
        procs = [
            (
                argv,
                subprocess.Popen(
                    self.argv(*argv),
                    cwd=ROOT,
                    env=self.env(),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                ),
            )
            for argv in argvs
        ]
        results = []
        for argv, proc in procs:
            out, err = proc.communicate(timeout=120)
            results.append(subprocess.CompletedProcess(argv, proc.returncode, out, err))
        return results

    def json(self, *args: str, code: int = 0) -> Any:
        result = self(*args, "--format", "json")
        assert result.returncode == code, result.stdout + result.stderr
        return json.loads(result.stdout)

    def client(self, registry: pgqueue.WorkerRegistry | None = None) -> pgqueue.Client:
        return pgqueue.Client.connect(self.database_url, settings=self.settings, registry=registry)

    def seed(self, queue: str, items: list[Any]) -> list[int]:
        with self.client() as client:
            return [
                h.id
                for h in client.add_jobs(
                    [(item, pgqueue.JobOptions(queue=queue)) for item in items]
                )
            ]

    def set_state(self, ids: list[int], status: str, finished_ago: str = "2 days") -> None:
        """Put jobs in a finished (or running) state as a worker would have left them."""
        finished = "NULL" if status == "processing" else f"now() - interval '{finished_ago}'"
        attempts = "1" if status == "processing" else "max_attempts"
        self.db.rows(
            f"UPDATE {self.table} SET status = $1, attempts = {attempts}, "
            f"finished_at = {finished}, last_error = CASE WHEN $1 = 'failed' "
            "THEN 'ValueError: boom' END WHERE id = ANY($2)",
            (status, ids),
        )

    def statuses(self, ids: list[int]) -> dict[int, str]:
        rows = self.db.rows(f"SELECT id, status FROM {self.table} WHERE id = ANY($1)", (ids,))
        return dict(rows)  # type: ignore[arg-type]

    def snapshot(self) -> list[tuple[Any, ...]]:
        """Everything an admin command could change: the jobs and the queues' pause state."""
        schema = f'"{self.settings.schema}"'
        jobs = self.db.rows(
            f"SELECT id, status, queue, attempts, max_attempts, scheduled_for, finished_at, "
            f"cancel_requested_at FROM {self.table} ORDER BY id"
        )
        queues = self.db.rows(
            f"SELECT name, paused_at FROM {schema}.{self.settings.prefix}queues ORDER BY name"
        )
        return [*jobs, ("queues", *queues)]


def read_terminal(leader: int) -> str:
    """Everything a process that has ended wrote to its terminal."""
    screen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        screen += chunk
    os.close(leader)
    return screen.decode(errors="replace")


def lines_of(text: str) -> list[Any]:
    """Parse JSON lines."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@contextmanager
def admin_schema(database_url: str, db: Db) -> Iterator[pgqueue.Settings]:
    """A schema of the module's own, migrated, and dropped at the end."""
    settings = pgqueue.Settings(schema=f"cli_admin_{uuid.uuid4().hex[:10]}")
    with pgqueue.Client.connect(database_url, settings=settings) as client:
        client.migrate()
    try:
        yield settings
    finally:
        db.rows(f'DROP SCHEMA IF EXISTS "{settings.schema}" CASCADE')


def unique_name(prefix: str) -> str:
    """A queue name no other test of the module uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
