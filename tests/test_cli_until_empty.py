"""``pgqueue worker --until-empty`` as a real process: it runs what is due, then exits with 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

import pgqueue
from tests import jobs, until_empty_jobs
from tests._sync.helpers import wait_until

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parent.parent
REGISTRY = "tests.until_empty_jobs:registry"


@pytest.fixture
def env(database_url: str, schema: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
    env.pop("DATABASE_URL", None)
    # a long poll: the run must not need one to end, or to find the jobs that fall due
    return {
        **env,
        "PGQUEUE_DSN": database_url,
        "PGQUEUE_SCHEMA": schema,
        "PGQUEUE_POLL_INTERVAL": "30",
    }


@pytest.fixture
def client(database_url: str, settings: pgqueue.Settings) -> Iterator[pgqueue.Client]:
    with pgqueue.Client.connect(database_url, settings=settings) as c:
        c.migrate()
        yield c


@pytest.mark.parametrize("runtime", [[], ["--asyncio"]], ids=["sync", "asyncio"])
def test_worker_until_empty_runs_what_is_due_and_exits_0(
    client: pgqueue.Client,
    env: dict[str, str],
    database_url: str,
    db,
    jobs_table: str,
    runtime: list[str],
) -> None:
    schema = client.settings.schema
    client.add_jobs([jobs.Record(token="cli", n=i) for i in range(20)])
    # a retry with no delay, and jobs that a job enqueues, are due: the worker runs them
    client.add_job(jobs.AFlaky(token="cli", failures=1), retry_backoff=timedelta(0))
    client.add_job(until_empty_jobs.ChainStep(token="cli", url=database_url, schema=schema, left=2))
    later = client.add_job(jobs.Record(token="cli"), run_in=timedelta(hours=1))
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pgqueue", "worker", REGISTRY, "--until-empty", *runtime],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 25  # well below the poll interval
    assert dict(db.rows(f"SELECT status, count(*) FROM {jobs_table} GROUP BY status")) == {
        "completed": 24,
        "pending": 1,  # due in an hour: not waited for
    }
    assert db.value(f"SELECT status FROM {jobs_table} WHERE id = $1", (later.id,)) == "pending"
    # 20 records, the flaky job's two runs, three steps of the chain
    assert "worker done (--until-empty): 25 job run(s) recorded" in result.stderr


def test_worker_until_empty_still_stops_on_sigterm(
    client: pgqueue.Client, env: dict[str, str], db, jobs_table: str, tmp_path: Path
) -> None:
    job = client.add_job(jobs.Block(token="cli", seconds=60))
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgqueue", "worker", REGISTRY, "--until-empty"],
            cwd=ROOT,
            env={**env, "PGQUEUE_SHUTDOWN_TIMEOUT": "0.2"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(
            lambda: (
                db.value(f"SELECT status FROM {jobs_table} WHERE id = $1", (job.id,))
                == "processing"
            ),
            60,
            what="the job running",
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = log.read_text()
    assert "stopping gracefully" in text
    assert "worker done" not in text
    # cut off by the stop: handed back, the attempt not charged
    assert db.rows(f"SELECT status, attempts FROM {jobs_table}") == [("pending", 0)]


@pytest.mark.parametrize("runtime", [[], ["--asyncio"]], ids=["sync", "asyncio"])
def test_worker_poll_only_runs_the_jobs_without_listen(
    client: pgqueue.Client, env: dict[str, str], db, jobs_table: str, runtime: list[str]
) -> None:
    # `--poll-only` (what --pgbouncer without --listen-dsn implies): no LISTEN session, the
    # queues polled, and the worker says so when it starts
    client.add_jobs([jobs.Record(token="poll", n=i) for i in range(10)])
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pgqueue",
            "worker",
            REGISTRY,
            "--until-empty",
            "--poll-only",
            *runtime,
        ],
        cwd=ROOT,
        env={**env, "PGQUEUE_POLL_INTERVAL": "0.2"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "polling only: no LISTEN (queues checked every 0.2s)" in result.stderr
    assert dict(db.rows(f"SELECT status, count(*) FROM {jobs_table} GROUP BY status")) == {
        "completed": 10
    }
