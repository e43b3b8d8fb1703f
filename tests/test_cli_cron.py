"""``pgqueue cron list|pause|resume|trigger|history`` and ``pgqueue worker --no-periodic``, end to
end through real processes on a real PostgreSQL.

The module works in a schema of its own. Its entries are declared the way production declares
them: an in-process client whose registry schedules them runs for a few ticks (the 1-second
``ping`` completes, the 1-second ``broken`` fails), then stops; the commands then read and change
what it left. Nothing ticks while the commands run, so what they print is fixed. The tests that
pause an entry resume it before they end.
"""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import pgqueue
from pgqueue.cli import main
from pgqueue.cli import worker as worker_command
from pgqueue.cli.worker import WorkerOptions
from tests import jobs
from tests._sync.helpers import wait_until
from tests.cli_admin_helpers import MODES, ROOT, Cli, Mode, admin_schema, lines_of, read_terminal

pytestmark = pytest.mark.timeout(240)

QUEUE = "cron"
NAMES = ["broken", "nightly-report", "old-export", "ping"]  # as cron list sorts them

# The module's entries; `pgqueue worker tests.test_cli_cron:registry` runs them too.
registry = pgqueue.WorkerRegistry()
registry.schedule(
    pgqueue.Periodic(
        "ping",
        jobs.Record(token="cron-ping"),
        every=timedelta(seconds=1),
        options=pgqueue.JobOptions(queue=QUEUE),
    )
)
registry.schedule(
    pgqueue.Periodic(
        "broken",
        jobs.Fail(token="cron-broken", message="smtp refused"),
        every=timedelta(seconds=1),
        options=pgqueue.JobOptions(queue=QUEUE, max_attempts=1),
    )
)
registry.schedule(
    pgqueue.Periodic(
        "nightly-report",
        jobs.Record(token="cron-nightly"),
        cron="30 2 * * *",
        timezone="Europe/Paris",
        options=pgqueue.JobOptions(queue=QUEUE),
    )
)
# shown as retired: the module ages its last sighting past RETIRED_AFTER
registry.schedule(
    pgqueue.Periodic(
        "old-export",
        jobs.Record(token="cron-old"),
        cron="0 3 1 1 *",
        options=pgqueue.JobOptions(queue=QUEUE),
    )
)


@pytest.fixture(scope="module")
def module_settings(database_url: str, db) -> Iterator[pgqueue.Settings]:
    with admin_schema(database_url, db) as settings:
        with pgqueue.Client.connect(database_url, settings=settings, registry=registry) as client:
            client.start({QUEUE: 2}, config=pgqueue.RuntimeConfig(poll_interval=0.1))
            try:
                wait_until(
                    lambda: (
                        _finished(client, "ping", "completed") >= 3
                        and _finished(client, "broken", "failed") >= 2
                    ),
                    30,
                    interval=0.1,
                    what="three completed ticks of ping, two failed ones of broken",
                )
            finally:
                client.stop()
        db.rows(
            f'UPDATE "{settings.schema}".{settings.prefix}cron_entries '
            "SET seen_at = now() - interval '1 hour' WHERE name = 'old-export'"
        )
        yield settings


def _finished(client: pgqueue.Client, name: str, status: str) -> int:
    return sum(t.status == status for t in client.cron_history(name))


@pytest.fixture
def cli(database_url: str, module_settings: pgqueue.Settings, db) -> Cli:
    return Cli(database_url, module_settings, db)


def entries_by_name(cli: Cli) -> dict[str, Any]:
    return {e["name"]: e for e in cli.json("cron", "list")}


def ledger(cli: Cli) -> list[tuple[Any, ...]]:
    """Everything a cron command could change: the entries, the ticks and the jobs."""
    schema, prefix = f'"{cli.settings.schema}"', cli.settings.prefix
    entries = cli.db.rows(
        f"SELECT name, paused_at, resumed_at FROM {schema}.{prefix}cron_entries ORDER BY name"
    )
    ticks = cli.db.rows(f"SELECT name, tick, job_id FROM {schema}.{prefix}cron_ticks ORDER BY 1, 2")
    return [*entries, *ticks, *cli.snapshot()]


# -- list -------------------------------------------------------------------------------------


def test_list_in_json_has_each_entry_with_its_last_tick_last_run_and_next_tick(cli: Cli) -> None:
    before = datetime.now(UTC)
    found = cli.json("cron", "list")
    assert [e["name"] for e in found] == NAMES
    by_name = {e["name"]: e for e in found}

    ping = by_name["ping"]
    assert (ping["schedule"], ping["timezone"], ping["queue"], ping["kind"]) == (
        "every 1s", "UTC", QUEUE, "record"
    )  # fmt: skip
    assert (ping["paused"], ping["retired"]) == (False, False)
    assert ping["last_how"] in ("scheduled", "late")
    assert ping["last_run"]["status"] == "completed"
    assert ping["last_run"]["job_id"] is not None
    last_tick = datetime.fromisoformat(ping["last_tick"])
    assert last_tick.microsecond == 0
    assert before - last_tick < timedelta(minutes=1)
    assert datetime.fromisoformat(ping["next_tick"]) > before

    broken = by_name["broken"]
    assert broken["last_run"]["status"] == "failed"
    assert broken["last_run"]["last_error"] == "ValueError: smtp refused"
    with cli.client() as client:
        failed = client.get_job(broken["last_run"]["job_id"])
    assert failed is not None
    assert (failed.status, failed.kind) == ("failed", "fail")

    nightly = by_name["nightly-report"]
    assert (nightly["schedule"], nightly["timezone"]) == ("30 2 * * *", "Europe/Paris")
    assert (nightly["last_tick"], nightly["last_run"]) == (None, None)
    next_tick = datetime.fromisoformat(nightly["next_tick"])
    # 02:30 in Paris, whatever the offset that day, within the next day
    paris = next_tick.astimezone(ZoneInfo("Europe/Paris"))
    assert (paris.hour, paris.minute) == (2, 30)
    assert timedelta(0) < next_tick - before <= timedelta(days=1)

    assert by_name["old-export"]["retired"] is True

    jsonl = cli("cron", "list", "--format", "jsonl")
    assert jsonl.returncode == 0, jsonl.stderr
    assert [e["name"] for e in lines_of(jsonl.stdout)] == NAMES


def test_list_table(cli: Cli) -> None:
    result = cli("cron", "list", "--format", "table")
    assert result.returncode == 0, result.stderr
    header, *lines = result.stdout.splitlines()
    assert header.split() == [
        "NAME", "SCHEDULE", "STATE", "LAST", "TICK", "LAST", "RUN", "NEXT", "TICK", "QUEUE/KIND"
    ]  # fmt: skip
    rows = {line.split()[0]: line for line in lines}
    assert sorted(rows) == NAMES
    ago = r"(?:just now|\d+s ago|\d+m \d+s ago)"
    assert re.search(
        rf"^ping\s+every 1s\s+active\s+{ago} \((?:scheduled|late)\)\s+completed {ago}\s+"
        rf"(?:in \d+s|just now)\s+cron/record\s*$",
        rows["ping"],
    ), rows["ping"]
    assert re.search(rf"\s+failed {ago}\s+", rows["broken"]), rows["broken"]
    assert re.search(
        r"^nightly-report\s+30 2 \* \* \* \(Europe/Paris\)\s+active\s+never\s+none yet\s+"
        r"in (?:\d+h \d+m|\d+m \d+s|[\d.]+m?s)\s+cron/record",  # minutes away from 1:30 (Paris)
        rows["nightly-report"],
    ), rows["nightly-report"]
    # (never ticked; cron trigger may have run it by hand)
    assert re.search(
        r"^old-export\s+0 3 1 1 \*\s+retired\s+(?:never|.*\(manual\))\s+none yet\s+-\s+",
        rows["old-export"],
    ), rows["old-export"]
    assert "\x1b[" not in result.stdout  # no colour codes when piped


def test_a_failed_last_run_is_red_on_a_terminal(cli: Cli) -> None:
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        cli.argv("cron", "list"),
        cwd=ROOT,
        env=cli.env(COLUMNS="160"),
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.PIPE,
    )
    os.close(follower)
    assert proc.wait(60) == 0
    screen = read_terminal(leader)
    broken = next(line for line in screen.splitlines() if "broken" in line)
    # "failed" and its age red; a completed run is not red
    assert re.search(r"\x1b\[[0-9;]*31mfailed\x1b\[0m\x1b\[[0-9;]*31m [^\x1b]*ago", broken), broken
    ping = next(line for line in screen.splitlines() if "ping" in line)
    assert "31m" not in ping, ping


def test_list_of_a_schema_without_entries_says_so(database_url: str, db) -> None:
    with admin_schema(database_url, db) as settings:
        empty = Cli(database_url, settings, db)
        assert empty.json("cron", "list") == []
        table = empty("cron", "list", "--format", "table")
    assert table.returncode == 0, table.stderr
    assert table.stdout.startswith("no periodic entries: a worker declares")


# -- pause, resume, trigger -------------------------------------------------------------------


def test_pause_then_resume(cli: Cli) -> None:
    paused = cli("cron", "pause", "nightly-report", "--format", "table")
    try:
        assert paused.returncode == 0, paused.stderr
        assert paused.stdout.startswith("paused nightly-report (its ticks enqueue nothing until")
        nightly = entries_by_name(cli)["nightly-report"]
        assert nightly["paused"] is True
        assert nightly["paused_at"] is not None
        # pausing a paused entry changes nothing, and is no error
        assert cli.json("cron", "pause", "nightly-report") == {"paused": ["nightly-report"]}
        with cli.client() as client:
            (info,) = [e for e in client.cron_list() if e.name == "nightly-report"]
        assert info.paused_at is not None
        assert info.paused_at.isoformat() == nightly["paused_at"]
        table = cli("cron", "list", "--format", "table")
        row = next(line for line in table.stdout.splitlines() if line.startswith("nightly"))
        assert re.search(r"\)\s+paused (?:just now|\d+s ago)\s+never\s+none yet\s+-\s+cron/", row)
    finally:
        resumed = cli("cron", "resume", "nightly-report", "--format", "table")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith("resumed nightly-report (its next tick is enqueued")
    assert entries_by_name(cli)["nightly-report"]["paused"] is False

    # nothing to resume: status 3, in every format
    again = cli("cron", "resume", "nightly-report", "--format", "table")
    assert (again.returncode, again.stdout) == (
        3,
        "nothing to resume: nightly-report is not paused\n",
    )
    assert cli.json("cron", "resume", "nightly-report", code=3) == {"resumed": []}
    jsonl = cli("cron", "resume", "nightly-report", "--format", "jsonl")
    assert (jsonl.returncode, lines_of(jsonl.stdout)) == (3, [{"resumed": []}])


def test_trigger_enqueues_the_entry_s_job_now_paused_or_not(cli: Cli) -> None:
    job_id = cli.json("cron", "trigger", "ping")["job_id"]
    with cli.client() as client:
        job = client.get_job(job_id)
        assert job is not None
        assert (job.kind, job.queue, job.status, job.payload) == (
            "record", QUEUE, "pending", {"token": "cron-ping", "n": 0}
        )  # fmt: skip
        assert job.options["periodic"]["name"] == "ping"
        newest = client.cron_history("ping", limit=1)[0]
    assert (newest.how, newest.job_id, newest.status) == ("manual", job_id, "pending")

    assert cli.json("cron", "pause", "old-export") == {"paused": ["old-export"]}
    try:
        table = cli("cron", "trigger", "old-export", "--format", "table")
    finally:
        assert cli.json("cron", "resume", "old-export") == {"resumed": ["old-export"]}
    assert table.returncode == 0, table.stderr
    found = re.fullmatch(r"triggered old-export: enqueued job (\d+) \(.*\)\n", table.stdout)
    assert found, table.stdout
    assert cli.statuses([int(found.group(1))]) == {int(found.group(1)): "pending"}
    jsonl = cli("cron", "trigger", "old-export", "--format", "jsonl")
    (line,) = lines_of(jsonl.stdout)
    assert line["job_id"] > int(found.group(1))


# -- history ----------------------------------------------------------------------------------


def test_history_lists_the_ticks_newest_first_with_their_jobs(cli: Cli) -> None:
    found = cli.json("cron", "history", "broken")
    with cli.client() as client:
        expected = client.cron_history("broken")
    assert [t["job_id"] for t in found] == [t.job_id for t in expected]
    assert len(found) >= 2
    ticks = [datetime.fromisoformat(t["tick"]) for t in found]
    assert ticks == sorted(ticks, reverse=True)
    assert len(set(ticks)) == len(ticks)
    # ticks a second apart, on the second (every=1s counts from the epoch)
    assert all(tick.microsecond == 0 for tick in ticks)
    # the newest job may still have been pending when the client stopped
    assert {t["status"] for t in found} <= {"failed", "pending"}
    done = [t for t in found if t["status"] == "failed"]
    assert len(done) >= 2
    assert {t["last_error"] for t in done} == {"ValueError: smtp refused"}
    assert {t["how"] for t in found} <= {"scheduled", "late"}

    table = cli("cron", "history", "broken", "--format", "table")
    assert table.returncode == 0, table.stderr
    header, *lines = table.stdout.splitlines()
    assert header.split() == ["TICK", "HOW", "JOB", "STATUS", "FINISHED", "ERROR"]
    assert len(lines) == len(found)
    newest_done = next(t for t in found if t["status"] == "failed")
    assert any(
        re.search(
            rf"^\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d\s+(?:scheduled|late)\s+{newest_done['job_id']}\s+"
            r"failed\s+(?:just now|\d+s ago)\s+ValueError: smtp refused\s*$",
            line,
        )
        for line in lines
    ), table.stdout


def test_history_pages_with_limit_and_before(cli: Cli) -> None:
    everything = cli.json("cron", "history", "broken")
    first = cli("cron", "history", "broken", "--limit", "1", "--format", "jsonl")
    assert first.returncode == 0, first.stderr
    assert lines_of(first.stdout) == everything[:1]
    hint = re.search(r"add --before (\S+) for the next page", first.stderr)
    assert hint, first.stderr
    second = cli.json("cron", "history", "broken", "--limit", "1", "--before", hint.group(1))
    assert second == everything[1:2]
    # the whole history in one page: no hint
    whole = cli("cron", "history", "broken", "--limit", str(len(everything) + 1))
    assert "--before" not in whole.stderr
    # a duration means that long ago: before the entries existed
    assert cli.json("cron", "history", "broken", "--before", "1h") == []
    earlier = cli("cron", "history", "broken", "--before", "2026-01-01", "--format", "table")
    assert (earlier.returncode, earlier.stdout) == (0, "no ticks before that\n")


def test_history_of_an_entry_without_ticks_and_of_a_deleted_job(cli: Cli) -> None:
    assert cli.json("cron", "history", "nightly-report") == []
    table = cli("cron", "history", "nightly-report", "--format", "table")
    assert (table.returncode, table.stdout) == (0, "no ticks yet\n")
    # a job deleted since its tick (retention, an operator): the tick stays, the job is gone
    oldest = cli.json("cron", "history", "ping")[-1]
    assert cli.json("jobs", "delete", str(oldest["job_id"]))["changed"] == 1
    after = cli.json("cron", "history", "ping")[-1]
    assert (after["tick"], after["job_id"], after["status"]) == (
        oldest["tick"], oldest["job_id"], None
    )  # fmt: skip
    table = cli("cron", "history", "ping", "--format", "table")
    assert re.search(rf"\s{oldest['job_id']}\s+gone\s*$", table.stdout, re.M), table.stdout


# -- unknown entries, bad input ---------------------------------------------------------------


def test_unknown_entries_are_status_3_and_bad_input_status_2_nothing_changed(cli: Cli) -> None:
    before = ledger(cli)
    unknown = [
        ["cron", verb, "no-such-entry"] for verb in ("pause", "resume", "trigger", "history")
    ]
    bad_names = [["cron", verb, "bad name!"] for verb in ("pause", "resume", "trigger", "history")]
    bad_values = [
        ["cron", "history", "ping", "--limit", "0"],
        ["cron", "history", "ping", "--limit", "1001"],
        ["cron", "history", "ping", "--limit", "many"],
        ["cron", "history", "ping", "--before", "7"],
        ["cron", "pause", "x" * 129],
    ]
    results = cli.many([[*argv, "--format", "json"] for argv in unknown + bad_names + bad_values])
    for result in results[: len(unknown)]:
        assert result.returncode == 3, (result.args, result.stdout, result.stderr)
        assert result.stdout == ""
        assert result.stderr == (
            "pgqueue: error: no periodic entry named 'no-such-entry': `pgqueue cron list` shows "
            "the entries workers have declared\n"
        )
    for result in results[len(unknown) :]:
        assert result.returncode == 2, (result.args, result.stdout, result.stderr)
        assert result.stdout == ""
        (line,) = result.stderr.splitlines()  # one line, no usage, no traceback
        assert line.startswith("pgqueue: error: "), line
    assert "invalid periodic entry name 'bad name!'" in results[len(unknown)].stderr
    assert "'--limit': 0 is not in the range 1<=x<=1000" in results[-5].stderr
    assert "'--before': '7' is neither a duration" in results[-2].stderr
    assert ledger(cli) == before


# -- every driver mode ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.id)
def test_cron_commands_in_every_driver_mode(
    mode: Mode, database_url: str, module_settings: pgqueue.Settings, db
) -> None:
    cli = Cli(database_url, module_settings, db, mode)
    listed, history, trigger, resume = cli.many(
        [
            ["cron", "list", "--format", "json"],
            ["cron", "history", "broken", "--limit", "1", "--format", "json"],
            ["cron", "trigger", "no-such-entry"],
            ["cron", "resume", "ping", "--format", "json"],
        ]
    )
    assert listed.returncode == 0, listed.stderr
    assert [e["name"] for e in json.loads(listed.stdout)] == NAMES
    assert history.returncode == 0, history.stderr
    (tick,) = json.loads(history.stdout)
    assert tick["how"] in ("scheduled", "late")
    assert trigger.returncode == 3, trigger.stderr
    assert "no periodic entry named 'no-such-entry'" in trigger.stderr
    assert (resume.returncode, json.loads(resume.stdout)) == (3, {"resumed": []})


# -- worker --periodic / --no-periodic --------------------------------------------------------


@pytest.fixture
def parsed_worker(monkeypatch: pytest.MonkeyPatch) -> list[WorkerOptions]:
    """``pgqueue worker`` parses its options, then hands them to this list instead of running."""
    for name in list(os.environ):
        if name.startswith("PGQUEUE_") or name == "DATABASE_URL":
            monkeypatch.delenv(name)
    seen: list[WorkerOptions] = []

    def record(options: WorkerOptions) -> int:
        seen.append(options)
        return 0

    monkeypatch.setattr(worker_command, "run_worker", record)
    return seen


def test_worker_periodic_flag_and_its_variable(
    parsed_worker: list[WorkerOptions],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["worker", "app.jobs:registry"]
    assert main(argv) == 0
    assert main([*argv, "--no-periodic"]) == 0
    monkeypatch.setenv("PGQUEUE_PERIODIC", "false")
    assert main(argv) == 0
    assert main([*argv, "--periodic"]) == 0  # the option beats the environment
    assert [o.config.periodic for o in parsed_worker] == [True, False, False, True]
    assert parsed_worker[1].config == pgqueue.RuntimeConfig(periodic=False)
    assert main(["worker", "-h"]) == 0
    out = capsys.readouterr().out
    for word in ("--periodic", "--no-periodic", "PGQUEUE_PERIODIC"):
        assert word in out, word


def test_a_worker_with_no_periodic_runs_jobs_but_no_schedule(cli: Cli, tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    argv = cli.argv("worker", f"{__name__}:registry", "--queues", f"{QUEUE}=1", "--no-periodic")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=cli.env(), stdin=subprocess.DEVNULL, stdout=out, stderr=out
        )
    try:
        wait_until(
            lambda: proc.poll() is None and "periodic entries not evaluated" in log.read_text(),
            60,
            interval=0.05,
            what="the worker started",
        )
        started = datetime.now(UTC)
        assert (
            "periodic entries not evaluated here (--no-periodic): ping, broken, nightly-report, "
            "old-export" in log.read_text()
        )
        with cli.client() as client:
            job_id = client.cron_trigger("ping")
            # it runs jobs: the triggered one
            wait_until(
                lambda: (job := client.get_job(job_id)) is not None and job.status == "completed",
                30,
                interval=0.05,
                what="the triggered job completed",
            )
            # A worker evaluating `ping` (every second, its last tick within its grace) enqueues
            # a tick within a second or two of starting; this one must not, in that window.
            time.sleep(2.5)
            ticks = client.cron_history("ping", limit=5)
        assert proc.poll() is None, log.read_text()
        newer = [t for t in ticks if t.enqueued_at >= started - timedelta(seconds=1)]
        assert [(t.how, t.job_id) for t in newer] == [("manual", job_id)]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
