"""``pgqueue worker`` exits when told to, whatever its jobs do (issue 12, item 6).

A coroutine job that swallows its cancellation once held the asyncio worker up for ever, even
after the second SIGTERM (``asyncio.run`` waits for every task it cancels at exit).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import pgqueue
from tests import hostile_jobs as hj
from tests._sync.helpers import wait_until

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parent.parent
MODES = {
    "sync": [],
    "asyncio": ["--asyncio"],
    "asyncpg": ["--driver", "asyncpg"],
}


@pytest.fixture
def client(database_url: str, settings: pgqueue.Settings) -> Iterator[pgqueue.Client]:
    with pgqueue.Client.connect(database_url, settings=settings) as c:
        c.migrate()
        yield c


@pytest.fixture
def start(database_url: str, schema: str, tmp_path: Path) -> Iterator[Any]:
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def launch(*args: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = tmp_path / f"worker-{len(procs)}.log"
        env = {**os.environ, "PGQUEUE_DSN": database_url, "PGQUEUE_SCHEMA": schema}
        env.pop("PGQUEUE_DRIVER", None)
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "pgqueue", "worker", "tests.hostile_jobs:registry", *args],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        procs.append((proc, log))
        return proc, log

    yield launch
    for proc, _ in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def status(db: Any, table: str, job_id: int) -> tuple[str, int]:
    row = db.rows(f"SELECT status, attempts FROM {table} WHERE id = $1", (job_id,))[0]
    return row[0], row[1]


@pytest.mark.parametrize("mode", list(MODES))
def test_second_sigterm_exits_although_a_coroutine_ignores_cancellation(
    client: pgqueue.Client, start: Any, db: Any, jobs_table: str, mode: str
) -> None:
    job = client.add_job(hj.SwallowCancel(token="t", seconds=600))
    proc, log = start(*MODES[mode], "--shutdown-timeout", "300", "--poll-interval", "0.2")
    wait_until(lambda: status(db, jobs_table, job.id) == ("processing", 1), 30, what="claimed")
    proc.send_signal(signal.SIGTERM)
    wait_until(lambda: "stopping gracefully" in log.read_text(), 10, what="first signal seen")
    assert proc.poll() is None  # the graceful stop waits for the job (up to 300 s)
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    # cut off at once (0.2 s), plus the 1 s an asyncio worker gives leftover tasks
    assert time.monotonic() - began < 5
    assert status(db, jobs_table, job.id) == ("pending", 0)  # handed back, no attempt charged


@pytest.mark.parametrize("mode", list(MODES))
def test_graceful_stop_exits_although_a_coroutine_ignores_cancellation(
    client: pgqueue.Client, start: Any, db: Any, jobs_table: str, mode: str
) -> None:
    job = client.add_job(hj.SwallowCancel(token="t", seconds=600))
    proc, log = start(*MODES[mode], "--shutdown-timeout", "1", "--poll-interval", "0.2")
    wait_until(lambda: status(db, jobs_table, job.id) == ("processing", 1), 30, what="claimed")
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    # 1 s to finish, 2 s after the cut-off, 1 s for leftover tasks (asyncio), and a margin
    assert time.monotonic() - began < 8
    assert status(db, jobs_table, job.id) == ("pending", 0)
    if mode != "sync":
        assert "still going (they ignore cancellation)" in log.read_text()
