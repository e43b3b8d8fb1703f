"""Every operator command in every driver mode, through real processes: the sync client for
psycopg and SQLAlchemy on psycopg, the asyncio client for asyncpg (by --driver, URL scheme or
$PGQUEUE_DRIVER) and SQLAlchemy on asyncpg. test_cli_admin.py tests the commands in depth in
one mode; here each runs once per mode, and ``stats --watch`` ends on SIGINT."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import pgqueue
from tests import jobs
from tests._sync.helpers import wait_until
from tests.cli_admin_helpers import MODES, ROOT, Cli, Mode, admin_schema, lines_of, unique_name

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def module_settings(database_url: str, db) -> Iterator[pgqueue.Settings]:
    with admin_schema(database_url, db) as settings:
        yield settings


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.id)
def test_every_command_in_every_driver_mode(
    mode: Mode, database_url: str, module_settings: pgqueue.Settings, db
) -> None:
    cli = Cli(database_url, module_settings, db, mode)
    queue = unique_name(mode.id)
    failed, running, pending, old = cli.seed(
        queue, [jobs.Record(token=str(n), n=n) for n in range(4)]
    )
    cli.set_state([failed], "failed")
    cli.set_state([running], "processing")
    cli.set_state([old], "completed", finished_ago="10 days")

    # the read-only commands at once (each a process of its own)
    listed, shown = cli.many(
        [
            ["jobs", "list", "--queue", queue, "--args", '{"n": 0}', "--format", "json"],
            ["jobs", "show", str(failed), "--format", "json"],
        ]
    )
    assert [j["id"] for j in json.loads(listed.stdout)] == [failed], listed.stderr
    assert json.loads(shown.stdout)["last_error"] == "ValueError: boom", shown.stderr
    refused = cli("jobs", "retry", str(failed), str(running), "--format", "table")
    assert refused.returncode == 4, refused.stdout + refused.stderr
    assert refused.stdout.startswith("retried 1 job; 1 refused:")
    cancelled = cli.json("jobs", "cancel", "--queue", queue, "--status", "pending", "--yes")
    assert (cancelled["matched"], cancelled["changed"]) == (2, 2)  # the retried one too
    deleted = cli.json("jobs", "delete", str(pending))
    assert deleted["changed"] == 1
    assert cli.statuses([failed, running, pending]) == {failed: "cancelled", running: "processing"}

    assert cli.json("queues", "pause", queue) == {"paused": [queue]}
    queues = {q["queue"]: q for q in cli.json("queues", "list")}
    assert queues[queue]["paused"] is True
    assert cli.json("queues", "resume", queue) == {"resumed": [queue]}
    purged = cli.json("queues", "purge", queue, "--older-than", "7d", "--yes")
    assert purged["changed"] == 1
    assert old not in cli.statuses([old])

    stats, workers = cli.many(
        [
            ["stats", "--queue", queue, "--completed", "--format", "json"],
            ["workers", "--format", "json"],
        ]
    )
    (found,) = json.loads(stats.stdout)
    assert found["counts"]["processing"] == 1
    assert found["counts"]["cancelled"] == 1
    assert found["counts"]["completed"] == 0
    assert workers.returncode == 0, workers.stderr
    assert isinstance(json.loads(workers.stdout), list)


@pytest.mark.parametrize("mode", [MODES[0], MODES[2]], ids=lambda m: m.id)
def test_stats_watch_ends_with_status_0_on_sigint(
    mode: Mode, database_url: str, module_settings: pgqueue.Settings, db, tmp_path: Path
) -> None:
    cli = Cli(database_url, module_settings, db, mode)
    queue = unique_name("watch")
    cli.seed(queue, [jobs.Record(token="w")])
    out = tmp_path / "watch.jsonl"
    with open(out, "wb") as sink:
        proc = subprocess.Popen(
            cli.argv("stats", "--queue", queue, "--watch", "0.1"),
            cwd=ROOT,
            env=cli.env(),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.PIPE,
        )
    try:
        wait_until(
            lambda: proc.poll() is None and len(out.read_bytes().splitlines()) >= 2,
            60,
            interval=0.02,
            what="two snapshots",
        )
        proc.send_signal(signal.SIGINT)
        code = proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    assert code == 0, err
    assert "Traceback" not in err
    snapshots = lines_of(out.read_text())
    assert len(snapshots) >= 2
    assert all(s["queues"][0]["queue"] == queue for s in snapshots)
