"""The README's quickstart, run as a reader would: its files written out as they are printed, the
script enqueueing, a ``pgqueue worker`` process running the jobs and stopping on SIGTERM."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests._sync.helpers import wait_until
from tests.conftest import Db

pytestmark = pytest.mark.timeout(120)
README = Path(__file__).resolve().parent.parent / "README.md"
README_URL = "postgresql://postgres@127.0.0.1/postgres"  # what the quickstart connects to


def quickstart() -> tuple[dict[str, str], list[str]]:
    """The quickstart's files (python blocks that start with ``# name.py``) and its commands."""
    text = README.read_text()
    section = text[text.index("## Quickstart") :]
    section = section[: re.search(r"\n##+ ", section[1:]).start() + 1]  # type: ignore[union-attr]
    files: dict[str, str] = {}
    commands: list[str] = []
    for lang, body in re.findall(r"```(\w+)\n(.*?)```", section, re.S):
        first = body.splitlines()[0]
        if lang == "python" and re.fullmatch(r"# \w+\.py", first):
            files[first[2:]] = body
        elif lang == "sh":
            commands += [line for line in body.splitlines() if line.strip()]
    return files, commands


def test_the_readme_quickstart_runs(fresh_database: str, tmp_path: Path) -> None:
    files, commands = quickstart()
    assert set(files) == {"tasks.py", "enqueue.py"}, files
    assert "add_job" not in files["tasks.py"]  # importing the jobs module enqueues nothing
    assert len(commands) == 2, commands
    for name, body in files.items():
        assert README_URL in body or name == "tasks.py"
        (tmp_path / name).write_text(body.replace(README_URL, fresh_database))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
    env.pop("DATABASE_URL", None)

    def argv(command: str) -> list[str]:
        words = shlex.split(command.replace(README_URL, fresh_database))
        assert words[0] in ("python", "pgqueue"), command
        return (
            [sys.executable, *words[1:]]
            if words[0] == "python"
            else [
                sys.executable,
                "-m",
                "pgqueue",
                *words[1:],
            ]
        )

    enqueue, worker_command = commands
    assert enqueue == "python enqueue.py"
    result = subprocess.run(
        argv(enqueue), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "enqueued job 1\n"

    db = Db(fresh_database)
    try:

        def statuses() -> dict[str, int]:
            rows = db.rows("SELECT status, count(*) FROM pgqueue_jobs GROUP BY status")
            return {status: count for status, count in rows}

        assert statuses() == {"pending": 102}
        assert worker_command.startswith("pgqueue worker tasks:registry ")
        worker = subprocess.Popen(
            argv(worker_command),
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # everything due now runs; the job scheduled 5 minutes ahead waits; nothing more is
            # enqueued by the worker importing tasks.py
            wait_until(
                lambda: statuses() == {"completed": 101, "pending": 1},
                60,
                interval=0.1,
                what="the quickstart's jobs ran",
            )
            worker.send_signal(signal.SIGTERM)
            out, err = worker.communicate(timeout=30)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait(10)
        assert worker.returncode == 0, err
        # (lines printed by concurrent jobs may interleave: count matches, not lines)
        assert "sending 'Hi' to a@example.com (attempt 1)" in out
        assert len(re.findall(r"sending 'News' to user\d+@example\.com \(attempt 1\)", out)) == 100
        assert "worker started" in err
        assert "stopping gracefully" in err
        assert statuses() == {"completed": 101, "pending": 1}
    finally:
        db.conn.close()


def operator_commands() -> tuple[str, list[str]]:
    """The "Operating it" block: its ``export PGQUEUE_DSN=...`` URL and its commands."""
    text = README.read_text()
    section = text[text.index("### Operating it") :]
    section = section[: re.search(r"\n##+ ", section[1:]).start() + 1]  # type: ignore[union-attr]
    (block,) = re.findall(r"```sh\n(.*?)```", section, re.S)
    lines = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    export, *commands = lines
    assert export.startswith("export PGQUEUE_DSN="), export
    return export.removeprefix("export PGQUEUE_DSN="), commands


def test_the_readme_operator_commands_run(fresh_database: str) -> None:
    url, commands = operator_commands()
    assert url == README_URL
    assert commands == [
        "pgqueue stats",
        "pgqueue jobs list --status failed",
        "pgqueue jobs retry --status failed",
    ]
    db = Db(fresh_database)
    try:
        subprocess.run(
            [sys.executable, "-m", "pgqueue", "migrate", "--dsn", fresh_database],
            check=True,
            capture_output=True,
        )
        db.rows(
            "INSERT INTO pgqueue_jobs (kind, queue, payload, status, attempts, max_attempts, "
            "finished_at, last_error) VALUES ('send_email', 'default', '{}', 'failed', 3, 3, "
            "now(), 'SMTPError: 421 try again later')"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
        env.pop("DATABASE_URL", None)
        env["PGQUEUE_DSN"] = fresh_database

        def run(command: str) -> subprocess.CompletedProcess[str]:
            argv = [sys.executable, "-m", "pgqueue", *shlex.split(command)[1:]]
            return subprocess.run(
                argv, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
            )

        stats, listing, retry = commands
        result = run(stats)
        assert result.returncode == 0, result.stderr
        assert '"default"' in result.stdout  # JSON when piped
        result = run(listing)
        assert result.returncode == 0, result.stderr
        assert "SMTPError: 421 try again later" in result.stdout
        # "asks first": with no terminal to ask on, it refuses and changes nothing...
        result = run(retry)
        assert result.returncode == 2, result.stderr
        assert "--yes" in result.stderr
        assert db.value("SELECT status FROM pgqueue_jobs") == "failed"
        # ... and with --yes, as in a script, the job is pending again with one more attempt
        result = run(retry + " --yes")
        assert result.returncode == 0, result.stderr
        assert db.rows("SELECT status, max_attempts FROM pgqueue_jobs") == [("pending", 4)]
    finally:
        db.conn.close()
