"""Structured logs (issue 16, first part): JSON lines with the job's fields.

The formatter on its own, and ``pgqueue worker --log-format json`` as a real process: every
line it writes is one JSON object, and the lines about jobs carry their fields.
"""

from __future__ import annotations

import io
import json
import logging
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import pgqueue
from pgqueue.logs import JsonFormatter, configure_logging
from tests import jobs
from tests._sync.helpers import wait_until
from tests.test_cli_runtime import ROOT, clean_env

pytestmark = pytest.mark.timeout(120)


def test_a_record_is_one_json_line_with_its_extra_fields() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.getLogger("pgqueue").makeRecord(
            "pgqueue",
            logging.WARNING,
            __file__,
            1,
            "job %s failed",
            (7,),
            sys.exc_info(),
            extra={"job_id": 7, "job_kind": "k", "instance_id": object()},
        )
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["message"] == "job 7 failed"
    assert (entry["level"], entry["logger"], entry["job_id"], entry["job_kind"]) == (
        "WARNING",
        "pgqueue",
        7,
        "k",
    )
    assert entry["time"].endswith("+00:00")
    assert "ValueError: boom" in entry["traceback"]
    assert entry["instance_id"].startswith("<object")  # what JSON cannot hold, as its str()
    assert not {"args", "msg", "exc_info", "levelno"} & set(entry)


def test_configure_logging_writes_json_to_the_stream() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging("info", "json", stream)
        logging.getLogger("pgqueue.job").info("hello", extra={"job_queue": "emails"})
        logging.getLogger("pgqueue").debug("not shown at INFO")
        with pytest.raises(ValueError, match="'text' or 'json'"):
            configure_logging(format="yaml")  # type: ignore[arg-type]
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    (line,) = stream.getvalue().splitlines()
    assert json.loads(line)["job_queue"] == "emails"


def lines(path: Path) -> list[dict[str, Any]]:
    """The log's lines, each parsed as JSON (a line that is not JSON fails the test)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_worker_writes_json_lines_with_the_jobs_fields(
    database_url: str, schema: str, tmp_path: Path, db: Any
) -> None:
    client = pgqueue.Client.connect(database_url, settings=pgqueue.Settings(schema=schema))
    client.migrate()
    failing = client.add_job(jobs.Fail(token="logs", message="no such order"), max_attempts=1)
    done = client.add_job(jobs.Record(token="logs"), run_in=timedelta(0))
    env = {**clean_env(), "PGQUEUE_DSN": database_url, "PGQUEUE_SCHEMA": schema}
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pgqueue",
                "worker",
                "tests.jobs:registry",
                "--log-format",
                "json",
                "--log-level",
                "debug",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
    try:
        table = f'"{schema}".pgqueue_jobs'
        wait_until(
            lambda: db.value(f"SELECT count(*) FROM {table} WHERE finished_at IS NOT NULL") == 2,
            60,
            what="both jobs ended",
        )
        wait_until(lambda: '"outcome": "completed"' in log.read_text(), 10, what="logged")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        client.close()
    entries = lines(log)
    started = next(e for e in entries if e["message"].startswith("worker started"))
    assert (started["pid"], started["queues"], started["schema"]) == (
        proc.pid,
        {"default": 10},
        schema,
    )
    failed = next(e for e in entries if e.get("job_id") == failing.id)
    assert failed["level"] == "WARNING"
    assert (failed["job_kind"], failed["job_queue"], failed["outcome"]) == (
        "fail",
        "default",
        "failed",
    )
    assert (failed["job_attempt"], failed["job_max_attempts"]) == (1, 1)
    assert failed["error"] == "ValueError: no such order"
    assert "ValueError: no such order" in failed["traceback"]
    assert failed["duration"] >= 0
    completed = next(e for e in entries if e.get("job_id") == done.id)
    assert (completed["level"], completed["outcome"]) == ("DEBUG", "completed")
    assert completed["instance_id"] == failed["instance_id"]
    assert any(e.get("leader") is True for e in entries)
