"""``pgqueue migrate`` run by several processes at once applies each migration exactly once."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pgqueue.queries import migrations_for
from pgqueue.settings import Settings

pytestmark = pytest.mark.timeout(120)


def test_parallel_migrate_processes(database_url: str, schema: str, db) -> None:
    env = {**os.environ, "PGQUEUE_DSN": database_url, "PGQUEUE_SCHEMA": schema}
    env.pop("PGQUEUE_DRIVER", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "pgqueue", "migrate"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    outputs = [p.communicate(timeout=90) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, outputs
    latest = len(migrations_for(Settings()))
    applied = [out for out, _ in outputs if "applied" in out and "nothing" not in out]
    assert len(applied) == 1, outputs  # one process did the work, the others found it done
    assert all(f"version {latest}" in out for out, _ in outputs)
    assert db.rows(f'SELECT version FROM "{schema}".pgqueue_migrations ORDER BY version') == [
        (v,) for v in range(1, latest + 1)
    ]


def test_migrate_with_a_bad_url_fails_cleanly(schema: str) -> None:
    env = {**os.environ, "PGQUEUE_SCHEMA": schema}
    result = subprocess.run(
        [sys.executable, "-m", "pgqueue", "migrate", "--dsn", "postgresql://nobody@127.0.0.1:1/x"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "pgqueue: error: cannot connect" in result.stderr
    assert "Traceback" not in result.stderr
