"""Worker processes that die, stall, block or are told to stop: kill -9, SIGSTOP, SIGTERM."""

from __future__ import annotations

import signal
import time
from datetime import timedelta

import pytest

import pgqueue
from tests.faults import jobs
from tests.faults.harness import (
    LEADER_INTERVAL,
    RESCUE_AFTER,
    Fleet,
    Worker,
    note_time,
    wait_for,
)

# A dead worker's jobs: stale after rescue_after, seen at the leader's next tick, claimed at
# once (the rescue notifies, and they keep their place in the queue), plus the job's own run
# time and a slow machine's slack.
RESCUE_BOUND = RESCUE_AFTER + 4 * LEADER_INTERVAL + 3.0


def held_by(fleet: Fleet, pid: int) -> list[int]:
    """Ids of the jobs a worker process holds (status processing, its instance)."""
    return [
        job_id
        for (job_id,) in fleet.observer.rows(
            f"SELECT j.id FROM {fleet.jobs_table} j "
            f'JOIN "{fleet.schema}".pgqueue_instances i USING (instance_id) '
            "WHERE j.status = 'processing' AND i.pid = $1",
            (pid,),
        )
    ]


def unfinished_runs(fleet: Fleet, pid: int) -> int:
    return int(
        fleet.observer.value(
            f"SELECT count(*) FROM {fleet.runs_table} WHERE pid = $1 AND returned_at IS NULL",
            (pid,),
        )
    )


def finish(fleet: Fleet, expect: dict[int, str] | None = None) -> None:
    fleet.stop_all()
    fleet.check_invariants(expect)
    fleet.check_no_leaks()


# Jobs whose process is a plain function, and jobs whose process is a coroutine (on the
# asyncio runtime it runs on the loop; on the thread runtime, on a loop of its own per job).
JOB_KINDS = pytest.mark.parametrize(
    "kind", [jobs.Work, jobs.AsyncWork], ids=["sync-jobs", "async-jobs"]
)


def kind_label(kind: type[pgqueue.Worker]) -> str:
    return " (async jobs)" if kind is jobs.AsyncWork else ""


def sigkill_mid_job(
    fleet: Fleet, victim: Worker, what: str, kind: type[pgqueue.Worker] = jobs.Work
) -> None:
    """Kill ``victim`` in the middle of its jobs: they complete elsewhere, each rescued once.

    Every job of the batch completes; the victim's are charged the lost attempt, with the
    rescue's error. ``what`` names the recovery time noted for the docs.
    """
    fleet.add_rolled_back()
    ids = fleet.add(40, job=kind, sleep=0.3)
    wait_for(lambda: unfinished_runs(fleet, victim.pid) >= 2, 20, "the victim mid-job")
    start = time.monotonic()
    fleet.kill_and_settle(victim)
    held = held_by(fleet, victim.pid)
    assert held, "the victim held no job when killed"
    fleet.wait_final(held, 30, "the killed worker's jobs")
    note_time(what, fleet.mode, time.monotonic() - start, RESCUE_BOUND)
    fleet.wait_final(ids, 60)
    rescued = fleet.observer.value(
        f"SELECT count(*) FROM {fleet.jobs_table} WHERE id = ANY($1) AND attempts = 2 "
        "AND last_error LIKE '%stopped heartbeating%'",
        (held,),
    )
    assert rescued == len(held)


@JOB_KINDS
def test_sigkill_mid_job(fleet: Fleet, kind: type[pgqueue.Worker]) -> None:
    victim, survivor = fleet.start(), fleet.start()
    fleet.wait_ready(victim, survivor)
    what = "SIGKILL mid-job: its jobs completed elsewhere" + kind_label(kind)
    sigkill_mid_job(fleet, victim, what, kind)
    finish(fleet)
    survivor_log = survivor.log()
    assert "Traceback" not in survivor_log, survivor_log


def test_sigkill_after_process_returned_before_the_outcome_was_written(fleet: Fleet) -> None:
    # Fast jobs at full speed: at any moment some have returned and wait for (or are in) the
    # flusher's batch write. Kill the worker then: those jobs are rescued and run again.
    survivor = fleet.start(queues="default=4")
    fleet.wait_ready(survivor)
    ids = fleet.add(3000)
    caught: list[int] = []
    for _round in range(3):
        victim = fleet.start(queues="default=10")
        fleet.wait_ready(victim)
        wait_for(
            lambda v=victim: (
                fleet.observer.value(
                    f"SELECT count(*) FROM {fleet.runs_table} WHERE pid = $1", (v.pid,)
                )
                >= 100
            ),
            30,
            "the victim busy",
        )
        start = time.monotonic()
        fleet.kill_and_settle(victim)
        # jobs whose code had returned while the database still shows them processing
        caught = [
            job_id
            for (job_id,) in fleet.observer.rows(
                f"SELECT r.job_id FROM {fleet.runs_table} r JOIN {fleet.jobs_table} j "
                "ON j.id = r.job_id WHERE r.pid = $1 AND r.returned_at IS NOT NULL "
                "AND j.status = 'processing' AND j.attempts = r.attempt",
                (victim.pid,),
            )
        ]
        if caught:
            break
    assert caught, "never caught a job between its return and its recorded outcome"
    fleet.wait_final(caught, 30, "the returned-but-unrecorded jobs")
    note_time(
        "SIGKILL between return and outcome write: job completed again",
        fleet.mode,
        time.monotonic() - start,
        RESCUE_BOUND,
    )
    for job_id in caught:
        assert len(fleet.runs(job_id)) == 2, fleet.runs(job_id)
    fleet.wait_final(ids, 120)
    finish(fleet)


def test_sigstop_past_the_heartbeat_threshold_then_sigcont(fleet: Fleet) -> None:
    stalled = fleet.start()
    fleet.wait_ready(stalled)
    # the first run outlasts the other worker's start (seconds on a busy machine); the rerun
    # takes a second
    (job,) = fleet.add(1, sleep=1.0, first_sleep=5.0)
    wait_for(lambda: fleet.runs(job), 20, "the job started")
    other = fleet.start()
    fleet.wait_ready(other)
    assert fleet.runs(job)[0][3] is None, "the job ended before the worker was stopped"
    fleet.signal(stalled, signal.SIGSTOP)
    start = time.monotonic()
    # rescued from the stalled process and completed by the other one
    wait_for(
        lambda: fleet.statuses([job])[job] == "completed", RESCUE_BOUND + 5, "rescue and rerun"
    )
    note_time(
        "SIGSTOP past rescue_after: job completed by another process",
        fleet.mode,
        time.monotonic() - start,
        RESCUE_BOUND + 1.0,
    )
    runs = fleet.runs(job)
    assert [r[1] for r in runs] == [stalled.pid, other.pid]
    assert runs[1][3] is not None
    # it wakes up: its run finishes, and its late completion is refused
    stalled.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: fleet.runs(job)[0][3] is not None, 20, "the stalled run returned")
    wait_for(lambda: "no longer ours" in stalled.log(), 20, "the late write refused")
    assert fleet.observer.rows(
        f"SELECT status, attempts FROM {fleet.jobs_table} WHERE id = $1", (job,)
    ) == [("completed", 2)]
    # and it is a working member again
    fleet.stop(other)
    more = fleet.add(5)
    fleet.wait_final(more, 20, "jobs run by the resumed process")
    assert {r[1] for j in more for r in fleet.runs(j)} == {stalled.pid}
    finish(fleet)


@JOB_KINDS
def test_sigterm_then_a_second_sigterm(fleet: Fleet, kind: type[pgqueue.Worker]) -> None:
    worker = fleet.start(shutdown_timeout=300)
    fleet.wait_ready(worker)
    # a job that ignores its context, and one that ends in a second
    stubborn_kind = jobs.AsyncStubborn if kind is jobs.AsyncWork else jobs.Stubborn
    stubborn = fleet.add(1, job=stubborn_kind)[0]
    quick = fleet.add(1, job=kind, sleep=1.0)[0]
    wait_for(lambda: fleet.runs(stubborn) and fleet.runs(quick), 20, "both jobs running")
    worker.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "stopping gracefully" in worker.log(), 10, "the first SIGTERM seen")
    # the graceful stop lets the quick job finish and record its outcome ...
    wait_for(lambda: fleet.statuses([quick])[quick] == "completed", 10, "the quick job done")
    assert worker.alive()  # ... and waits on for the stubborn one
    fleet.fault("SIGTERM twice", worker.pid, fatal=True)
    worker.proc.send_signal(signal.SIGTERM)
    start = time.monotonic()
    assert worker.proc.wait(30) == 0, worker.log()
    note_time(
        "second SIGTERM: process exited" + kind_label(kind),
        fleet.mode,
        time.monotonic() - start,
        5.0,
    )
    assert "stopping now" in worker.log()
    assert fleet.runs(stubborn)[0][3] is None  # cut off, never returned
    # handed back without charging an attempt; nobody is left registered
    assert fleet.observer.rows(
        f"SELECT status, attempts FROM {fleet.jobs_table} WHERE id = $1", (stubborn,)
    ) == [("pending", 0)]
    assert fleet.observer.value(f'SELECT count(*) FROM "{fleet.schema}".pgqueue_instances') == 0
    assert fleet.client is not None
    assert fleet.client.cancel_job(stubborn) == "pending"
    finish(fleet, {stubborn: "cancelled"})
    fleet.check_logs()


def test_handler_blocking_past_the_heartbeat_threshold_is_not_rescued(fleet: Fleet) -> None:
    workers = [fleet.start(), fleet.start()]
    fleet.wait_ready(*workers)
    # asleep (GIL released) and spinning (GIL held) for three times rescue_after
    blocked = fleet.add(2, sleep=3 * RESCUE_AFTER) + fleet.add(2, spin=3 * RESCUE_AFTER)
    fleet.wait_final(blocked, 3 * RESCUE_AFTER + 20, "the blocking jobs")
    for job_id in blocked:
        runs = fleet.runs(job_id)
        assert len(runs) == 1, runs
    assert (
        fleet.observer.value(
            f"SELECT max(attempts) FROM {fleet.jobs_table} WHERE id = ANY($1)", (blocked,)
        )
        == 1
    )
    finish(fleet)
    fleet.check_logs()
    for worker in workers:
        assert "presumed dead" not in worker.log()


def test_handler_that_kills_its_process_fails_after_max_attempts(fleet: Fleet) -> None:
    workers = [fleet.start(), fleet.start()]
    fleet.wait_ready(*workers)
    (deadly,) = fleet.add(1, exit_until_attempt=99, options=pgqueue.JobOptions(max_attempts=3))
    others = fleet.add(60, sleep=0.05)
    start = time.monotonic()
    restarts = 0

    def done() -> bool:
        nonlocal restarts
        # a supervisor's job (systemd, Kubernetes): replace workers that died
        for worker in list(fleet.workers):
            if not worker.alive() and not getattr(worker, "replaced", False):
                fleet.fault("process exited", worker.pid, fatal=True)
                worker.replaced = True  # type: ignore[attr-defined]
                restarts += 1
                fleet.start()
        return fleet.statuses([deadly])[deadly] == "failed"

    wait_for(done, 3 * (RESCUE_BOUND + 5), "the deadly job failed")
    note_time(
        "handler os._exit: job failed after max_attempts=3",
        fleet.mode,
        time.monotonic() - start,
        3 * (RESCUE_BOUND + 3),
    )
    assert restarts == 3
    assert len(fleet.runs(deadly)) == 3
    assert fleet.observer.rows(
        f"SELECT attempts FROM {fleet.jobs_table} WHERE id = $1", (deadly,)
    ) == [(3,)]
    fleet.wait_final(others, 60)
    finish(fleet, {deadly: "failed"})


def test_resumed_worker_claims_its_own_rescued_job_again(fleet: Fleet) -> None:
    # A stalled worker's job is rescued; when it resumes, its old run is still going and it
    # claims the same job again: two runs of one job in one process, each with its own lease.
    # The newer run's outcome must be recorded; the older one's refused.
    stalled = fleet.start(queues="default=2")
    fleet.wait_ready(stalled)
    leader = fleet.start(queues="elsewhere=1")  # leads and rescues, never claims this job
    fleet.wait_ready(leader)
    (job,) = fleet.add(1, sleep=6.0)
    wait_for(lambda: fleet.runs(job), 20, "the job started")
    fleet.signal(stalled, signal.SIGSTOP)
    wait_for(
        lambda: (
            fleet.observer.value(f"SELECT status FROM {fleet.jobs_table} WHERE id = $1", (job,))
            == "pending"
        ),
        RESCUE_BOUND + 5,
        "the job rescued",
    )
    stalled.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: len(fleet.runs(job)) == 2, 20, "the job claimed again by the same process")
    # the second run (6 s) ends, and its outcome is recorded
    fleet.wait_final([job], 20, "the second run recorded")
    runs = fleet.runs(job)
    assert [r[:2] for r in runs] == [(1, stalled.pid), (2, stalled.pid)]
    assert fleet.observer.rows(
        f"SELECT status, attempts FROM {fleet.jobs_table} WHERE id = $1", (job,)
    ) == [("completed", 2)]
    finish(fleet)
    fleet.check_logs()


def test_async_jobs_cut_off_by_their_timeout_and_by_a_cancel(fleet: Fleet) -> None:
    worker = fleet.start()
    fleet.wait_ready(worker)
    one_try = pgqueue.JobOptions(timeout=timedelta(seconds=1), max_attempts=1)
    (timed,) = fleet.add(1, job=jobs.AsyncWork, sleep=600, options=one_try)
    (cancelled,) = fleet.add(1, job=jobs.AsyncStubborn)
    wait_for(lambda: fleet.runs(timed) and fleet.runs(cancelled), 20, "both jobs running")
    assert fleet.client is not None
    assert fleet.client.cancel_job(cancelled) == "processing"
    fleet.wait_final([timed, cancelled], 10, "the timed-out and the cancelled job")
    rows = {
        job_id: rest
        for job_id, *rest in fleet.observer.rows(
            f"SELECT id, status, attempts, last_error FROM {fleet.jobs_table} WHERE id = ANY($1)",
            ([timed, cancelled],),
        )
    }
    assert rows == {
        timed: ["failed", 1, "timed out after 1s"],
        cancelled: ["cancelled", 1, "cancelled while running"],
    }
    # both coroutines were cancelled: neither returned
    assert [r[3] for r in fleet.runs(timed) + fleet.runs(cancelled)] == [None, None]
    # their slots are free again: four more jobs run at once
    more = fleet.add(4, job=jobs.AsyncWork, sleep=2.0)
    assert fleet.wait_final(more, 10, "jobs in the freed slots") < 3.5  # two rounds: 4 s
    assert "overran its timeout" not in worker.log()
    finish(fleet, {timed: "failed", cancelled: "cancelled"})
    fleet.check_logs()
