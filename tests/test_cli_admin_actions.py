"""The operator's actions end to end, through real processes on a real PostgreSQL, in the
psycopg mode: ``jobs retry|cancel|delete`` by id and by filter (confirmation, --dry-run,
refusals, exit statuses) and ``queues pause|resume|purge``. The module works in a schema of its
own; each test seeds its jobs into queues named for it.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

import pgqueue
from tests import jobs
from tests._sync.helpers import wait_until
from tests.cli_admin_helpers import ROOT, Cli, admin_schema, read_terminal, unique_name

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def module_settings(database_url: str, db) -> Iterator[pgqueue.Settings]:
    with admin_schema(database_url, db) as settings:
        yield settings


@pytest.fixture
def cli(database_url: str, module_settings: pgqueue.Settings, db) -> Cli:
    return Cli(database_url, module_settings, db)


def records(n: int) -> list[jobs.Record]:
    return [jobs.Record(token=f"r{i}") for i in range(n)]


# -- retry, cancel, delete ------------------------------------------------------------------


def test_retry_by_ids_reports_refused_and_missing_jobs(cli: Cli) -> None:
    queue = unique_name("retry-ids")
    failed, running = cli.seed(queue, records(2))
    cli.set_state([failed], "failed")
    cli.set_state([running], "processing")
    missing = 987654321

    result = cli("jobs", "retry", str(failed), str(running), str(missing), "--format", "table")
    assert result.returncode == 4, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "retried 1 job; 1 refused:",
        f"  job {running}: it is running: wait for it to end, or cancel it first",
        f"not found: {missing}",
    ]
    assert cli.statuses([failed, running]) == {failed: "pending", running: "processing"}
    # a job that used its last attempt has one more
    assert cli.json("jobs", "show", str(failed))["max_attempts"] == 26

    again = cli.json("jobs", "retry", str(running), code=4)
    assert again == {
        "action": "retry",
        "matched": 1,
        "changed": 0,
        "refused": {str(running): "it is running: wait for it to end, or cancel it first"},
        "missing": [],
        "dry_run": False,
    }
    nothing = cli("jobs", "retry", str(missing), "--format", "table")
    assert nothing.returncode == 3
    assert "not found: 987654321" in nothing.stdout


def test_a_filter_action_needs_yes_without_a_terminal_and_dry_run_changes_nothing(
    cli: Cli,
) -> None:
    queue = unique_name("confirm")
    ids = cli.seed(queue, records(3))
    cli.set_state(ids, "failed")
    before = cli.snapshot()

    refused = cli("jobs", "retry", "--queue", queue, "--status", "failed")
    assert refused.returncode == 2
    assert refused.stderr == (
        f"pgqueue: error: pass --yes to confirm: this would retry 3 jobs (status=failed, "
        f"queue={queue}); nothing changed (--dry-run counts without asking)\n"
    )
    assert refused.stdout == ""
    dry = cli.json("jobs", "retry", "--queue", queue, "--dry-run")
    assert dry == {
        "action": "retry",
        "matched": 3,
        "changed": 0,
        "refused": {},
        "missing": [],
        "dry_run": True,
    }
    dry_table = cli("jobs", "delete", "--queue", queue, "--dry-run", "--format", "table")
    assert dry_table.stdout == (
        f"would delete 3 jobs (queue={queue}, status=pending,completed,failed,cancelled); "
        "nothing changed (--dry-run)\n"
    )
    dry_ids = cli("jobs", "delete", *map(str, ids), "--dry-run", "--format", "table")
    assert dry_ids.returncode == 0
    every = cli.json("jobs", "retry", "--all", "--dry-run")
    assert every["matched"] >= 3
    assert cli.snapshot() == before

    done = cli("jobs", "retry", "--queue", queue, "--yes", "--batch-size", "2", "--format", "table")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "retried 3 jobs\n"
    assert set(cli.statuses(ids).values()) == {"pending"}
    # again: nothing matches now ($PGQUEUE_YES confirms too)
    again = cli("jobs", "retry", "--queue", queue, "--format", "table", env={"PGQUEUE_YES": "1"})
    assert again.returncode == 3
    assert again.stdout == (
        f"no job to retry: nothing matched (queue={queue}, status=failed,cancelled)\n"
    )


def test_cancel_and_delete_a_job_a_worker_runs(cli: Cli) -> None:
    queue = unique_name("running")
    with cli.client(jobs.registry) as client:
        block = client.add_job(jobs.Block(token="cli-block", seconds=60), queue=queue)
        waiting = client.add_job(
            jobs.Record(token="cli-wait"), queue=queue, run_in=timedelta(hours=1)
        )
        client.start({queue: 1}, config=pgqueue.RuntimeConfig(poll_interval=0.05))
        try:
            wait_until(lambda: cli.statuses([block.id])[block.id] == "processing", 30)
            workers = cli.json("workers")
            mine = [w for w in workers if w["pid"] == os.getpid()]
            assert len(mine) == 1, workers
            assert mine[0]["queues"] == {queue: 1}
            assert [job["id"] for job in mine[0]["running"]] == [block.id]
            table = cli("workers", "--format", "table")
            assert re.search(rf"\s{os.getpid()}\s+{re.escape(queue)}=1\s", table.stdout)
            assert f"{block.id} (block)" in table.stdout

            refused = cli("jobs", "delete", str(block.id), "--format", "table")
            assert refused.returncode == 4
            assert "cancel it, and delete it once it has stopped" in refused.stdout
            cancelled = cli("jobs", "cancel", "--queue", queue, "--yes", "--format", "table")
            assert cancelled.returncode == 0, cancelled.stderr
            assert cancelled.stdout == "cancelled 2 jobs\n"
            wait_until(
                lambda: (
                    cli.statuses([block.id, waiting.id])
                    == {block.id: "cancelled", waiting.id: "cancelled"}
                ),
                30,
                what="both cancelled",
            )
        finally:
            client.stop()
    # cancelling a finished job is refused; deleting it is not
    finished = cli.json("jobs", "cancel", str(block.id), code=4)
    assert finished["refused"] == {str(block.id): "it has already ended (cancelled)"}
    deleted = cli.json("jobs", "delete", "--queue", queue, "--status", "cancelled", "--yes")
    assert (deleted["matched"], deleted["changed"]) == (2, 2)
    assert cli.statuses([block.id, waiting.id]) == {}


def _pty_run(cli: Cli, args: list[str], answer: bytes) -> tuple[int, str, str]:
    """Run with stdin and stderr on a terminal (stdout piped); answer the question."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        cli.argv(*args),
        cwd=ROOT,
        env=cli.env(),
        stdin=follower,
        stdout=subprocess.PIPE,
        stderr=follower,
        text=True,
    )
    os.close(follower)
    os.write(leader, answer)
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, out, read_terminal(leader)


def test_a_terminal_asks_before_a_filter_action(cli: Cli) -> None:
    queue = unique_name("ask")
    ids = cli.seed(queue, records(4))
    cli.set_state(ids, "failed")
    before = cli.snapshot()
    args = ["jobs", "retry", "--queue", queue, "--format", "table", "--batch-size", "1"]

    code, out, screen = _pty_run(cli, args, b"n\n")
    assert code == 1
    assert f"Retry 4 jobs (queue={queue}, status=failed,cancelled)? [y/N]" in screen
    assert "pgqueue: error: not confirmed: nothing changed" in screen
    assert out == ""
    assert cli.snapshot() == before

    code, out, screen = _pty_run(cli, args, b"y\n")
    assert code == 0, screen
    assert out == "retried 4 jobs\n"
    assert set(cli.statuses(ids).values()) == {"pending"}


# -- queues -----------------------------------------------------------------------------------


def test_pause_shows_in_queues_list_and_resume_ends_it(cli: Cli) -> None:
    queue = unique_name("pause")
    cli.seed(queue, records(2))
    paused = cli("queues", "pause", queue, "--format", "table")
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.startswith(f"paused {queue} (")

    listed = {q["queue"]: q for q in cli.json("queues", "list")}
    assert listed[queue]["paused"] is True
    assert datetime.fromisoformat(listed[queue]["paused_at"]).tzinfo is not None
    assert listed[queue]["counts"]["available"] == 2
    assert "kinds" not in listed[queue]
    table = cli("queues", "list", "--format", "table")
    assert re.search(rf"^{re.escape(queue)}\s+paused .*\s2\s", table.stdout, re.M), table.stdout

    assert cli.json("queues", "resume", queue) == {"resumed": [queue]}
    again = cli("queues", "resume", queue, "--format", "table")
    assert again.returncode == 3
    assert again.stdout == f"nothing to resume: {queue} is not paused\n"
    assert {q["queue"]: q for q in cli.json("queues", "list")}[queue]["paused"] is False


def test_pause_and_resume_every_queue(database_url: str, db) -> None:
    with admin_schema(database_url, db) as settings:
        cli = Cli(database_url, settings, db)
        empty = cli("queues", "pause", "--all", "--format", "table")
        assert empty.returncode == 3
        assert empty.stdout.startswith("no queue to pause")
        cli.seed("a", records(1))
        cli.seed("b", records(1))
        assert cli.json("queues", "pause", "*") == {"paused": ["a", "b"]}
        assert cli.json("queues", "resume", "--all") == {"resumed": ["a", "b"]}
        assert cli("queues", "resume", "*").returncode == 3


def test_purge_deletes_finished_jobs_older_than_the_age(cli: Cli) -> None:
    queue = unique_name("purge")
    old_done, old_failed, recent, waiting = cli.seed(queue, records(4))
    cli.set_state([old_done], "completed", finished_ago="10 days")
    cli.set_state([old_failed], "failed", finished_ago="8 days")
    cli.set_state([recent], "completed", finished_ago="1 hour")
    before = cli.snapshot()

    dry = cli.json("queues", "purge", queue, "--older-than", "7d", "--dry-run")
    assert (dry["matched"], dry["dry_run"]) == (2, True)
    unconfirmed = cli("queues", "purge", queue, "--older-than", "1w")
    assert unconfirmed.returncode == 2
    assert "pass --yes to confirm: this would purge 2 jobs" in unconfirmed.stderr
    assert cli.snapshot() == before

    only = cli("queues", "purge", queue, "--older-than", "7d", "--status", "failed", "--yes",
               "--format", "table")  # fmt: skip
    assert only.returncode == 0, only.stderr
    assert only.stdout == "purged 1 job\n"
    assert cli.statuses([old_done, old_failed]) == {old_done: "completed"}
    rest = cli.json("queues", "purge", queue, "--older-than", "7d", "--yes")
    assert (rest["action"], rest["changed"]) == ("purge", 1)
    assert cli.statuses([old_done, recent, waiting]) == {recent: "completed", waiting: "pending"}
    nothing = cli("queues", "purge", queue, "--older-than", "7d", "--yes", "--format", "table")
    assert nothing.returncode == 3
    assert nothing.stdout.startswith("no job to purge: nothing matched")
