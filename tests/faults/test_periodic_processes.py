"""Periodic jobs across real worker processes: exactly one job per tick (issue 15).

Each case runs ``pgqueue worker`` processes whose registry (``tests/faults/periodic_jobs.py``)
schedules entries on a 1-second interval, chosen per process by ``$FAULT_PERIODIC``, and checks
the tick ledger (``cron_ticks``), the jobs table and the jobs' run log (``fault_runs``): one
job per tick, none missing, each run once, and the missed-tick policies exactly as documented,
computed from instants read from the database's clock.

Every mode runs the first case (three processes on one entry; 60 ticks in the primary mode,
fewer in the others, which share the scheduler's code and differ only in the driver under the
tick's statement). The other cases are about processes, not drivers, and run in the primary
mode only: the suite's time budget is tight.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.faults import periodic_jobs
from tests.faults.harness import Fleet, Worker, deadline_loop, wait_for

PRIMARY = "psycopg-sync"
REGISTRY = "tests.faults.periodic_jobs:registry"
SECOND = timedelta(seconds=1)
# Ticks the first case waits for: the 60 in the primary mode, fewer in the others.
TICKS = 60
TICKS_OTHER_MODES = 4
# How long the third case's processes all stay stopped, in ticks.
DOWN_TICKS = 5
# A tick's statement that began before a newer declaration committed still acts on the older
# one; it can only record a tick of at most its start, a few milliseconds after the newer
# declaration's declared_at (the declaring statement's own run time).
DECLARE_RACE = timedelta(seconds=0.1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# From a scheduler's look at its clock to the start of the statement it then sends.
LOOK_LATENCY = timedelta(seconds=0.5)


@pytest.fixture
def primary(mode: str) -> None:
    """Skip a case that runs in the primary mode only (before its processes start)."""
    if mode != PRIMARY:
        pytest.skip(f"about processes, not drivers: runs in {PRIMARY} only")


# -- helpers ----------------------------------------------------------------------------------


def start(fleet: Fleet, *entries: dict[str, Any], queues: str = "default=4") -> Worker:
    """Start a worker whose registry schedules ``entries`` (see periodic_jobs.py)."""
    return fleet.start(queues=queues, registry=REGISTRY, env=periodic_jobs.environment(*entries))


def db_now(fleet: Fleet) -> datetime:
    return fleet.observer.value("SELECT clock_timestamp()")  # type: ignore[no-any-return]


def floor_tick(at: datetime, step: timedelta = SECOND) -> datetime:
    """The tick of an ``every=step`` entry at or before ``at`` (ticks count from the epoch)."""
    return at - (at - EPOCH) % step


def ledger(fleet: Fleet, name: str) -> list[tuple[datetime, int | None, str, datetime]]:
    """The entry's ticks, oldest first: (tick, job id, how, enqueued_at)."""
    return fleet.observer.rows(
        f'SELECT tick, job_id, how, enqueued_at FROM "{fleet.schema}".pgqueue_cron_ticks '
        "WHERE name = $1 ORDER BY tick",
        (name,),
    )


def ticks_after(fleet: Fleet, name: str, after: datetime) -> list[datetime]:
    return [row[0] for row in ledger(fleet, name) if row[0] > after]


def wait_ticks(fleet: Fleet, name: str, n: int, after: datetime) -> list[datetime]:
    """Wait until ``n`` ticks of ``name`` after ``after`` are in the ledger; return them."""
    return wait_for(  # type: ignore[no-any-return]
        lambda: (ticks := ticks_after(fleet, name, after)) and len(ticks) >= n and ticks,
        n + 15,
        f"{n} ticks of {name} after {after}",
    )


def missing_between(ticks: list[datetime], step: timedelta = SECOND) -> list[datetime]:
    """The ticks of an ``every=step`` entry between the first and the last that are absent."""
    present = set(ticks)
    out, at = [], ticks[0]
    while at < ticks[-1]:
        at += step
        if at not in present:
            out.append(at)
    return out


def check_one_job_per_tick(fleet: Fleet, name: str) -> dict[datetime, tuple[int, dict[str, Any]]]:
    """Every tick in the ledger has exactly one job, that job carries that tick, and no other
    job of the entry exists. Returns tick -> (job id, job row)."""
    rows = ledger(fleet, name)
    assert rows, f"no tick of {name} in the ledger"
    unenqueued = [row for row in rows if row[1] is None]
    assert not unenqueued, f"ticks recorded without a job: {unenqueued}"
    jobs = fleet.observer.rows(
        "SELECT id, options->'periodic'->>'tick', status, queue, payload->>'label' "
        f"FROM {fleet.jobs_table} WHERE options->'periodic'->>'name' = $1",
        (name,),
    )
    by_id = {
        job_id: {"tick": datetime.fromisoformat(tick), "status": status, "queue": q, "label": lb}
        for job_id, tick, status, q, lb in jobs
    }
    assert len(by_id) == len(jobs)
    ledger_ids = [row[1] for row in rows]
    assert len(set(ledger_ids)) == len(ledger_ids), "one job for two ticks"
    extra = set(by_id) - set(ledger_ids)
    assert not extra, f"jobs of {name} that no tick records (a tick enqueued twice?): {extra}"
    assert set(ledger_ids) == set(by_id), "a tick's job is missing from the jobs table"
    out = {}
    for tick, job_id, _how, _at in rows:
        assert job_id is not None
        assert by_id[job_id]["tick"] == tick, (tick, job_id, by_id[job_id])
        out[tick] = (job_id, by_id[job_id])
    return out


def check_ran_once(fleet: Fleet, name: str, jobs: dict[datetime, tuple[int, Any]]) -> None:
    """Each job ran exactly once, and knew its entry and tick (ctx.periodic, ctx.tick)."""
    ids = [job_id for job_id, _ in jobs.values()]
    runs = fleet.observer.rows(
        f"SELECT job_id, count(*), min(tag) FROM {fleet.runs_table} "
        "WHERE job_id = ANY($1) GROUP BY job_id",
        (ids,),
    )
    counts = {job_id: n for job_id, n, _ in runs}
    not_once = {i: counts.get(i, 0) for i in ids if counts.get(i, 0) != 1}
    assert not not_once, f"jobs that ran other than once: {not_once}"
    tags = {job_id: tag for job_id, _, tag in runs}
    for tick, (job_id, job) in jobs.items():
        assert tags[job_id] == f"{name}|{tick.isoformat()}|{job['label'] or ''}", tags[job_id]


def finish(fleet: Fleet, name: str, through: list[datetime]) -> dict[datetime, Any]:
    """Let the jobs of the ticks ``through`` run, stop every worker, check the ledger."""
    jobs = check_one_job_per_tick(fleet, name)
    wanted = [jobs[tick][0] for tick in through]
    fleet.wait_final(wanted, 20, f"the jobs of {len(wanted)} ticks of {name}")
    fleet.stop_all()
    jobs = check_one_job_per_tick(fleet, name)  # and the ticks acted on while stopping
    fleet.committed.update(wanted)
    return jobs


def end_checks(fleet: Fleet) -> None:
    fleet.check_invariants()
    fleet.check_logs()
    fleet.check_no_leaks()


# -- 1. many processes, one job per tick -----------------------------------------------------


def test_three_processes_one_job_per_tick(fleet: Fleet) -> None:
    name = "p.every-second"
    workers = [start(fleet, {"name": name, "every": 1}) for _ in range(3)]
    fleet.wait_ready(*workers)
    since = db_now(fleet)
    n = TICKS if fleet.mode == PRIMARY else TICKS_OTHER_MODES
    waited = wait_ticks(fleet, name, n, since)
    jobs = finish(fleet, name, waited)
    rows = ledger(fleet, name)
    ticks = [row[0] for row in rows]
    assert not missing_between(ticks), f"ticks missing: {missing_between(ticks)}"
    assert {row[2] for row in rows} == {"scheduled"}, rows
    assert all(t == floor_tick(t) for t in ticks), "a tick off the 1-second grid"
    check_ran_once(fleet, name, {t: jobs[t] for t in waited})
    for t in waited:
        assert jobs[t][1]["status"] == "completed"
    late = max(row[3] - row[0] for row in rows)
    print(f"[{fleet.mode}] {len(ticks)} ticks by 3 processes; latest enqueue {late} after its tick")
    end_checks(fleet)


# -- 2. the leader killed ---------------------------------------------------------------------


def leader_of(fleet: Fleet, workers: list[Worker]) -> Worker:
    """The worker whose session holds the leader lock (waiting for one)."""
    key = fleet.settings.advisory_key("leader")
    halves = ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF)
    for _ in deadline_loop(20, "a leader"):
        holders = [
            pid
            for (pid,) in fleet.observer.rows(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND classid::bigint = $1 AND objid::bigint = $2",
                halves,
            )
        ]
        for worker in workers:
            if holders and holders[0] in fleet.backends(worker):
                return worker
    raise AssertionError("unreachable")  # pragma: no cover


def test_leader_killed_ticks_go_on(primary: None, fleet: Fleet) -> None:
    name = "p.leader-killed"
    spec = {"name": name, "every": 1}
    workers = [start(fleet, spec) for _ in range(3)]
    fleet.wait_ready(*workers)
    leader = leader_of(fleet, workers)
    first = wait_ticks(fleet, name, 2, db_now(fleet))
    # kill it just after a tick falls due: while the schedulers act on it
    due = first[-1] + SECOND
    for _ in deadline_loop(5, "the next tick due"):
        if db_now(fleet) >= due:
            break
    fleet.kill_and_settle(leader)
    killed = fleet.faults[-1].at
    # the survivors go on alone for a few ticks, then a new process joins
    down = wait_ticks(fleet, name, 2, killed)
    replacement = start(fleet, spec)
    fleet.wait_ready(replacement)
    joined = db_now(fleet)
    after = wait_ticks(fleet, name, 2, joined)
    jobs = finish(fleet, name, [t for t in jobs_ticks(fleet, name) if t <= after[-1]])
    ticks = sorted(jobs)
    assert not missing_between(ticks), f"ticks missing: {missing_between(ticks)}"
    # every tick from the kill to the replacement's start came from the two survivors
    while_down = [t for t in ticks if killed < t <= joined]
    assert while_down[0] <= floor_tick(killed) + SECOND, (killed, while_down)
    assert while_down == [while_down[0] + i * SECOND for i in range(len(while_down))]
    assert len(while_down) >= len(down) >= 2
    assert {row[2] for row in ledger(fleet, name)} == {"scheduled"}
    # the killed leader's jobs (if it was running one) run again, excused by the fault
    end_checks(fleet)


def jobs_ticks(fleet: Fleet, name: str) -> list[datetime]:
    return [row[0] for row in ledger(fleet, name)]


# -- 3. every process stopped, then started again ---------------------------------------------


def test_restart_missed_ticks_default_and_backfill(primary: None, fleet: Fleet) -> None:
    default = {"name": "p.default", "every": 1}
    backfill = {"name": "p.backfill", "every": 1, "backfill": 30}
    names = ("p.default", "p.backfill")
    workers = [start(fleet, default, backfill) for _ in range(2)]
    fleet.wait_ready(*workers)
    since = db_now(fleet)
    for name in names:
        wait_ticks(fleet, name, 2, since)
    fleet.stop_all()
    last = {name: jobs_ticks(fleet, name)[-1] for name in names}
    # stopped (all of them) for DOWN_TICKS ticks by the database's clock
    resume = max(last.values()) + DOWN_TICKS * SECOND + SECOND / 2
    for _ in deadline_loop(DOWN_TICKS + 5, "the stop's ticks passed", interval=0.1):
        if db_now(fleet) >= resume:
            break
    restarted = db_now(fleet)
    workers = [start(fleet, default, backfill) for _ in range(2)]
    fleet.wait_ready(*workers)
    ready = db_now(fleet)
    through = {name: wait_ticks(fleet, name, 2, ready)[-1] for name in names}
    wanted = [
        job_id
        for name in names
        for tick, job_id, _, _ in ledger(fleet, name)
        if tick <= through[name] and job_id is not None
    ]
    fleet.wait_final(wanted, 20, "the jobs of the ticks")
    fleet.stop_all()
    fleet.committed.update(wanted)
    jobs = {name: check_one_job_per_tick(fleet, name) for name in names}
    for name in names:
        check_ran_once(fleet, name, {t: j for t, j in jobs[name].items() if t <= through[name]})
    # The ticks no process was up for: after the last one acted on, before the restart.
    # (The tick at the restart itself is the newest when the first scheduler looks.)
    missed: dict[str, list[datetime]] = {name: [] for name in names}
    for name in names:
        at = last[name] + SECOND
        while at < floor_tick(restarted):
            missed[name].append(at)
            at += SECOND
        assert len(missed[name]) >= DOWN_TICKS - 1, (name, last[name], restarted)

    # default: the missed ticks are passed over; the first tick after the restart is the
    # newest one when the first scheduler looked, within its grace (1 s, the interval) of
    # that look. With a 1-second interval it is never over LATE_AFTER old, so it is recorded
    # as 'scheduled', not 'late'.
    rows = ledger(fleet, "p.default")
    ticks = [row[0] for row in rows]
    after = [row for row in rows if row[0] > last["p.default"]]
    assert not set(missed["p.default"]) & set(ticks), f"old missed ticks enqueued: {rows}"
    first, _, _, looked = after[0]
    assert first >= floor_tick(restarted), (restarted, after[0])
    assert first <= looked <= first + SECOND + LOOK_LATENCY, after[0]
    assert not missing_between([row[0] for row in after])
    assert not missing_between([t for t in ticks if t <= last["p.default"]])
    assert {row[2] for row in rows} == {"scheduled"}, rows

    # backfill=30 s: every missed tick enqueued, oldest first, marked 'backfill'
    rows = ledger(fleet, "p.backfill")
    ticks = [row[0] for row in rows]
    assert not missing_between(ticks), f"ticks missing: {missing_between(ticks)}"
    how = {row[0]: row[2] for row in rows}
    assert [how[t] for t in missed["p.backfill"]] == ["backfill"] * len(missed["p.backfill"])
    assert {how[t] for t in ticks if t <= last["p.backfill"]} == {"scheduled"}
    assert set(how.values()) <= {"scheduled", "backfill"}, rows
    # oldest first: ids and enqueue times grow with the tick
    window = [row for row in rows if row[0] > last["p.backfill"]]
    job_ids = [row[1] or 0 for row in window]  # none is None: check_one_job_per_tick
    assert job_ids == sorted(job_ids), window
    enqueued = [row[3] for row in window]
    assert enqueued == sorted(enqueued), window
    print(
        f"[{fleet.mode}] last ticks {last}, restarted {restarted}: default resumed at "
        f"{first} (enqueued {looked}), backfill enqueued {len(missed['p.backfill'])} missed ticks"
    )
    end_checks(fleet)


# -- 4. two deploys, two schedules, one name --------------------------------------------------

SUPERSEDED = (
    "periodic entry 'p.two-deploys' is declared differently by a worker that started later: "
    "this worker stops evaluating it"
)
WINS = "periodic entry 'p.two-deploys' was declared differently by another worker; this"


def test_two_schedules_for_one_name_newest_wins(primary: None, fleet: Fleet) -> None:
    name = "p.two-deploys"
    old = start(fleet, {"name": name, "every": 1, "label": "old"})
    fleet.wait_ready(old)
    wait_ticks(fleet, name, 2, db_now(fleet))
    new = start(fleet, {"name": name, "every": 2, "label": "new"})
    fleet.wait_ready(new)
    # its scheduler declares the entry a moment after the process registers
    declared = wait_for(
        lambda: fleet.observer.value(
            f'SELECT max(declared_at) FROM "{fleet.schema}".pgqueue_cron_entries '
            "WHERE name = $1 AND schedule = 'every 2s'",
            (name,),
        ),
        10,
        "the new deploy's declaration",
    )
    wait_for(lambda: SUPERSEDED in old.log(), 10, "the old deploy's warning")
    later = wait_ticks(fleet, name, 2, declared + DECLARE_RACE)
    assert old.alive(), "the old deploy stops evaluating the entry, not running"
    jobs = finish(fleet, name, jobs_ticks(fleet, name))
    check_ran_once(fleet, name, jobs)
    ticks = sorted(jobs)
    before = [t for t in ticks if t <= declared]
    after = [t for t in ticks if t > declared + DECLARE_RACE]
    # before: the old schedule's every-second ticks (the last may be the new one's first look)
    assert len(before) >= 2, (declared, ledger(fleet, name))
    assert not missing_between(before), missing_between(before)
    assert {jobs[t][1]["label"] for t in before[:-1]} == {"old"}
    # after: the new schedule's ticks only, every one of them, its job
    two = 2 * SECOND
    assert all(t == floor_tick(t, two) for t in after), f"odd ticks after the new deploy: {after}"
    expected = [floor_tick(declared + DECLARE_RACE, two) + two]
    while expected[-1] < later[-1]:
        expected.append(expected[-1] + two)
    assert after[: len(expected)] == expected, (declared, after)
    assert {jobs[t][1]["label"] for t in after} == {"new"}
    in_race = [t for t in ticks if declared < t <= declared + DECLARE_RACE]
    assert len(in_race) <= 1, in_race
    assert (
        fleet.observer.value(
            f'SELECT schedule FROM "{fleet.schema}".pgqueue_cron_entries WHERE name = $1',
            (name,),
        )
        == "every 2s"
    )
    assert WINS in new.log(), new.log()
    assert SUPERSEDED not in new.log()
    end_checks(fleet)


# -- 5. an entry for a queue its worker does not serve ----------------------------------------

UNKNOWN = (
    "due job(s) of kind 'fault.periodic' wait in queue 'elsewhere', and no running worker "
    "registers that kind"
)


def test_entry_for_a_queue_its_worker_does_not_serve(primary: None, fleet: Fleet) -> None:
    """The entry's kind is registered by schedule() in the scheduling worker, which serves only
    'default'; the worker that serves 'elsewhere' (another deploy) does not know the kind. The
    ticks are still enqueued, one each; the jobs wait, and the serving worker says why."""
    name = "p.elsewhere"
    scheduling = start(fleet, {"name": name, "every": 1, "queue": "elsewhere"})
    fleet.wait_ready(scheduling)
    wait_ticks(fleet, name, 2, db_now(fleet))
    serving = start(fleet, queues="elsewhere=2")  # $FAULT_PERIODIC empty: no fault.periodic
    fleet.wait_ready(serving)
    wait_for(lambda: UNKNOWN in serving.log(), 10, "the unknown-kind warning")
    wait_ticks(fleet, name, 2, db_now(fleet))
    fleet.stop_all()
    jobs = check_one_job_per_tick(fleet, name)
    ticks = sorted(jobs)
    assert len(ticks) >= 4
    assert not missing_between(ticks), missing_between(ticks)
    assert {(job["status"], job["queue"]) for _, job in jobs.values()} == {("pending", "elsewhere")}
    assert not fleet.observer.rows(f"SELECT job_id FROM {fleet.runs_table}"), "a job ran"
    assert "no running worker registers" not in scheduling.log()  # it does not serve the queue
    end_checks(fleet)
