"""The operator commands that read (``jobs list|show``, ``stats``, ``--help``) and bad input, end to
end through real processes on a real PostgreSQL, in the psycopg mode (the actions:
test_cli_admin_actions.py; every mode: test_cli_admin_modes.py). The thirty bad values run through
:func:`pgqueue.cli.main` in this process (their messages and statuses are the subject; thirty
processes cost about 8 s of start-up), and three more through real processes.

The module works in a schema of its own; each test seeds its jobs into queues named for it, so
that the tests share the schema without seeing each other's jobs.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

import pgqueue
from pgqueue.cli import main
from tests import jobs
from tests._sync.helpers import wait_until
from tests.cli_admin_helpers import ROOT, Cli, admin_schema, lines_of, read_terminal, unique_name

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def module_settings(database_url: str, db) -> Iterator[pgqueue.Settings]:
    with admin_schema(database_url, db) as settings:
        yield settings


@pytest.fixture
def cli(database_url: str, module_settings: pgqueue.Settings, db) -> Cli:
    return Cli(database_url, module_settings, db)


def records(n: int, **payload: object) -> list[jobs.Record]:
    return [jobs.Record(token=f"r{i}", **payload) for i in range(n)]  # type: ignore[arg-type]


# -- jobs list --------------------------------------------------------------------------------


def test_list_filters_by_status_queue_kind_args_and_time(cli: Cli) -> None:
    queue, other = unique_name("list"), unique_name("list-other")
    pending = cli.seed(queue, records(2))
    marked = cli.seed(queue, [jobs.Record(token="marked", n=42)])
    failed = cli.seed(queue, [jobs.Fail(token="f0"), jobs.Fail(token="f1")])
    cli.set_state(failed, "failed", finished_ago="2 days")
    cli.seed(other, records(1))

    everything = cli.json("jobs", "list", "--queue", queue)
    assert [j["id"] for j in everything] == sorted(pending + marked + failed, reverse=True)
    assert {j["queue"] for j in everything} == {queue}

    assert [j["id"] for j in cli.json("jobs", "list", "--queue", queue, "--status", "failed")] == (
        sorted(failed, reverse=True)
    )
    both = cli.json("jobs", "list", "--queue", queue, "--queue", other, "--kind", "record")
    assert len(both) == 4
    assert {j["kind"] for j in both} == {"record"}
    by_args = cli.json("jobs", "list", "--queue", queue, "--args", '{"n": 42}')
    assert [j["id"] for j in by_args] == marked
    # time ranges: durations and ISO 8601 datetimes (naive = UTC)
    assert cli.json("jobs", "list", "--queue", queue, "--created-before", "1h") == []
    assert len(cli.json("jobs", "list", "--queue", queue, "--created-after", "1h30m")) == 5
    old = cli.json("jobs", "list", "--queue", queue, "--finished-before", "1d")
    assert sorted(j["id"] for j in old) == sorted(failed)
    cutoff = (datetime.now(UTC) - timedelta(days=1)).replace(tzinfo=None).isoformat()
    assert cli.json("jobs", "list", "--queue", queue, "--finished-after", cutoff) == []
    assert len(cli.json("jobs", "list", "--queue", queue, "--scheduled-before", "0s")) == 5
    assert cli.json("jobs", "list", "--queue", queue, "--status", "cancelled") == []


def test_list_formats(cli: Cli) -> None:
    queue = unique_name("fmt")
    ids = cli.seed(queue, [jobs.Record(token="[red]not markup[/red]"), *records(2)])
    failed = ids[1:2]
    cli.set_state(failed, "failed")

    result = cli("jobs", "list", "--queue", queue, "--format", "jsonl")
    assert result.returncode == 0, result.stderr
    rows = lines_of(result.stdout)
    assert [r["id"] for r in rows] == sorted(ids, reverse=True)
    first = rows[-1]
    assert first["payload"] == {"token": "[red]not markup[/red]", "n": 0}
    created = datetime.fromisoformat(first["created_at"])
    assert created.tzinfo is not None
    assert abs((datetime.now(UTC) - created).total_seconds()) < 600

    # piped without --format: JSON, one array
    piped = cli("jobs", "list", "--queue", queue)
    assert piped.returncode == 0
    assert [j["id"] for j in json.loads(piped.stdout)] == [r["id"] for r in rows]
    # $PGQUEUE_FORMAT
    env_jsonl = cli("jobs", "list", "--queue", queue, env={"PGQUEUE_FORMAT": "jsonl"})
    assert lines_of(env_jsonl.stdout) == lines_of(result.stdout)

    table = cli("jobs", "list", "--queue", queue, "--format", "table")
    assert table.returncode == 0, table.stderr
    header, *lines = table.stdout.splitlines()
    assert header.split() == [
        "ID", "KIND", "QUEUE", "STATUS", "TRIES", "CREATED", "WHEN", "LAST", "ERROR"
    ]  # fmt: skip
    assert len(lines) == 3
    row = next(line for line in lines if line.split()[0] == str(failed[0]))
    assert re.search(rf"^\s*{failed[0]}\s+record\s+{queue}\s+failed\s+25/25\s+", row), row
    assert "ended 2d 0h ago" in row
    assert "ValueError: boom" in row
    assert "\x1b[" not in table.stdout  # no colour codes when piped

    show = cli("jobs", "show", str(ids[0]), "--format", "table")
    assert "[red]not markup[/red]" in show.stdout  # user data is never console markup


def test_a_terminal_gets_a_coloured_table_by_default(cli: Cli) -> None:
    queue = unique_name("tty")
    failed = cli.seed(queue, records(1))
    cli.set_state(failed, "failed")
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        cli.argv("jobs", "list", "--queue", queue),
        cwd=ROOT,
        env=cli.env(COLUMNS="120"),
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.PIPE,
    )
    os.close(follower)
    assert proc.wait(60) == 0
    screen = read_terminal(leader)
    assert "\x1b[" in screen  # coloured
    plain = re.sub(r"\x1b\[[0-9;]*m", "", screen)
    assert re.search(rf"^\s*{failed[0]}\s+record\s+{queue}\s+failed\s", plain, re.M), plain


def test_list_pages_with_the_cursor_printed_on_stderr(cli: Cli) -> None:
    queue = unique_name("page")
    ids = cli.seed(queue, records(5))
    for sort, expected in (("-id", sorted(ids, reverse=True)), ("id", sorted(ids))):
        seen: list[int] = []
        cursor: list[str] = []
        for _ in range(4):
            result = cli(
                "jobs", "list", "--queue", queue, "--limit", "2", "--sort", sort, *cursor
            )  # fmt: skip
            assert result.returncode == 0, result.stderr
            seen += [j["id"] for j in json.loads(result.stdout)]
            found = re.search(r"--cursor (\S+)", result.stderr)
            if found is None:
                break
            cursor = ["--cursor", found.group(1)]
        assert seen == expected, sort
    # a cursor of another sort, or no cursor at all: bad input
    result = cli("jobs", "list", "--queue", queue, "--limit", "2")
    token = re.search(r"--cursor (\S+)", result.stderr)
    assert token is not None
    wrong = cli("jobs", "list", "--queue", queue, "--sort", "due", "--cursor", token.group(1))
    assert wrong.returncode == 2
    assert wrong.stderr.startswith("pgqueue: error: this cursor belongs to a listing sorted by")
    # table and jsonl print the hint too
    for fmt in ("table", "jsonl"):
        hinted = cli("jobs", "list", "--queue", queue, "--limit", "4", "--format", fmt)
        assert "--cursor " in hinted.stderr, fmt


# -- jobs show --------------------------------------------------------------------------------


def test_show_has_the_attempt_history_of_a_job_a_worker_ran(cli: Cli) -> None:
    queue = unique_name("show")
    with cli.client(jobs.registry) as client:
        handle = client.add_job(
            jobs.Fail(token="show", message="no such user"),
            queue=queue,
            max_attempts=2,
            retry_backoff=timedelta(milliseconds=10),
        )
        client.start({queue: 1}, config=pgqueue.RuntimeConfig(poll_interval=0.05))
        try:
            wait_until(
                lambda: cli.statuses([handle.id])[handle.id] == "failed", 30, what="job failed"
            )
        finally:
            client.stop()

    shown = cli.json("jobs", "show", str(handle.id))
    assert shown["id"] == handle.id
    assert shown["status"] == "failed"
    history = shown["attempt_history"]
    assert [a["number"] for a in history] == [1, 2]
    assert {a["outcome"] for a in history} == {"failed"}
    assert all(a["error"] == "ValueError: no such user" for a in history)
    assert "Traceback" in history[-1]["traceback"]
    uuid_text = history[-1]["instance_id"]
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", uuid_text)
    datetime.fromisoformat(history[-1]["started_at"])

    table = cli("jobs", "show", str(handle.id), "--format", "table")
    assert table.returncode == 0, table.stderr
    out = table.stdout
    assert re.search(r"^status\s+failed\s*$", out, re.M), out
    assert re.search(r"^attempts\s+2 of 2\s*$", out, re.M), out
    assert re.search(r"^\s*2\s+failed\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+", out, re.M), out
    assert "traceback of attempt 2" in out
    assert "ValueError: no such user" in out

    jsonl = cli("jobs", "show", str(handle.id), "--format", "jsonl")
    assert len(jsonl.stdout.splitlines()) == 1
    assert json.loads(jsonl.stdout)["attempt_history"] == history


def test_show_of_a_missing_job_is_status_3(cli: Cli) -> None:
    result = cli("jobs", "show", "987654321")
    assert result.returncode == 3
    assert result.stdout == ""
    assert result.stderr == (
        "pgqueue: error: no job 987654321: it never existed, or it was deleted (retention "
        "removes finished jobs)\n"
    )


# -- stats ------------------------------------------------------------------------------------


def test_stats_per_queue_and_kind(cli: Cli) -> None:
    queue, other = unique_name("stats"), unique_name("stats-other")
    ids = cli.seed(queue, [*records(3), jobs.Fail(token="s")])
    cli.set_state(ids[:1], "completed")
    cli.set_state(ids[3:], "failed")
    cli.seed(other, records(1))

    found = cli.json("stats", "--queue", queue)
    assert [q["queue"] for q in found] == [queue]
    (stats,) = found
    assert stats["counts"]["available"] == 2
    assert stats["counts"]["failed"] == 1
    assert stats["counts"]["completed"] is None
    assert set(stats["kinds"]) == {"record", "fail"}
    assert stats["unknown_kinds"] == ["record"]
    assert stats["oldest_available_age"] >= 0
    both = cli.json("stats", "--queue", queue, "--queue", other, "--completed")
    assert {q["queue"]: q["counts"]["completed"] for q in both} == {queue: 1, other: 0}

    table = cli("stats", "--queue", queue, "--completed", "--format", "table")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:3] == ["QUEUE", "/", "KIND"]
    assert "COMPLETED" in lines[0]
    assert re.match(rf"{re.escape(queue)}\s+2\s+0\s+0\s+1\s+0\s+1\s+", lines[1]), lines[1]
    assert re.match(r"\s+fail\s+0\s+0\s+0\s+1\s+0\s+0", lines[2]), lines[2]
    assert re.match(r"\s+record \(no worker\)\s+2\s+0\s+0\s+0\s+0\s+1\s", lines[3]), lines[3]


def test_stats_watch_prints_a_snapshot_per_interval(cli: Cli) -> None:
    queue = unique_name("watch")
    cli.seed(queue, records(1))
    started = time.monotonic()
    result = cli("stats", "--queue", queue, "--watch", "0.2", "--count", "3")
    assert result.returncode == 0, result.stderr
    snapshots = lines_of(result.stdout)
    assert len(snapshots) == 3
    assert time.monotonic() - started >= 0.4
    for snapshot in snapshots:
        assert set(snapshot) == {"at", "queues"}
        assert [q["queue"] for q in snapshot["queues"]] == [queue]
    table = cli("stats", "--queue", queue, "--watch", "0.1", "--count", "2", "--format", "table")
    assert table.stdout.count("QUEUE / KIND") == 2


# -- bad input --------------------------------------------------------------------------------

BAD_INPUT = [
    ["jobs", "list", "--status", "bogus"],
    ["jobs", "list", "--args", "{bad json"],
    ["jobs", "list", "--args", "[1, 2]"],
    ["jobs", "list", "--args", '{"x": NaN}'],
    ["jobs", "list", "--limit", "-1"],
    ["jobs", "list", "--limit", "100000"],
    ["jobs", "list", "--queue", "x'; DROP TABLE jobs; --"],
    ["jobs", "list", "--queue", "../.."],
    ["jobs", "list", "--kind", "k" * 300],
    ["jobs", "list", "--cursor", "not-a-cursor"],
    ["jobs", "list", "--created-after", "5"],
    ["jobs", "list", "--created-after", "99999999w"],
    ["jobs", "list", "--finished-before", "yesterday"],
    ["jobs", "list", "--sort", "name"],
    ["jobs", "list", "--schema", "x; DROP"],
    ["jobs", "show", "0"],
    ["jobs", "show", "abc"],
    ["jobs", "retry"],
    ["jobs", "retry", "--status", "processing", "--yes"],
    ["jobs", "delete", "--kind", "x'; DROP TABLE jobs; --", "--yes"],
    ["jobs", "cancel", "1", "--all", "--yes"],
    ["jobs", "retry", "--all", "--yes", "--batch-size", "0"],
    ["queues", "pause", "x'; DROP TABLE jobs; --"],
    ["queues", "pause"],
    ["queues", "resume", "../.."],
    ["queues", "purge", "default", "--older-than", "7"],
    ["queues", "purge", "default", "--older-than", "7d", "--status", "pending", "--yes"],
    ["queues", "purge", "q" * 300, "--older-than", "7d", "--yes"],
    ["stats", "--queue", "../.."],
    ["stats", "--watch", "0"],
]


def in_process(
    cli: Cli, argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    """``pgqueue <argv>`` run by :func:`pgqueue.cli.main` here, with the environment ``cli``
    gives its processes: the exit status, stdout and stderr."""
    capsys.readouterr()
    with monkeypatch.context() as patch:
        for name in [*os.environ]:
            if name.startswith("PGQUEUE_") or name == "DATABASE_URL":
                patch.delenv(name)
        for name, value in cli.env().items():
            if name.startswith("PGQUEUE_"):
                patch.setenv(name, value)
        status = main([*argv, *cli.mode.args])  # the driver options after the command
    out, err = capsys.readouterr()
    return status, out, err


def test_bad_input_is_one_line_status_2_and_changes_nothing(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    queue = unique_name("bad")
    ids = cli.seed(queue, records(2))
    cli.set_state(ids[:1], "failed")
    before = cli.snapshot()
    for argv in BAD_INPUT:
        status, out, err = in_process(cli, argv, monkeypatch, capsys)
        assert status == 2, (argv, out, err)
        assert out == "", argv
        assert err.startswith("pgqueue: error: "), (argv, err)
        assert err.count("\n") == 1, (argv, err)
    assert cli.snapshot() == before
    # the same through a process: its exit status and its one line
    result = cli(*BAD_INPUT[0])
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr.startswith("pgqueue: error: "), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    # the environment's values are checked the same way
    result = cli("jobs", "list", env={"PGQUEUE_FORMAT": "xml"})
    assert (result.returncode, result.stderr.count("\n")) == (2, 1), result.stderr
    # a misspelt option is click's usage error, also status 2
    result = cli("jobs", "list", "--stauts", "failed")
    assert result.returncode == 2
    assert "No such option" in result.stderr
    assert cli.snapshot() == before


def test_help_states_the_exit_statuses(cli: Cli) -> None:
    result = subprocess.run(
        [*cli.argv("--help")[: -len(cli.mode.args) or None]],
        cwd=ROOT,
        env=cli.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0
    text = " ".join(result.stdout.replace("\u2502", " ").split())
    assert "Exit status: 0 done (an empty list too); 1 error" in text
    for command in ("jobs", "queues", "workers", "stats"):
        assert f" {command} " in result.stdout, command
