"""Admin actions racing real worker processes: retry, delete, pause and cancel (issue 14).

Each case runs ``pgqueue worker`` processes of one driver mode while the test process acts on
their queue through the admin API of the same mode (the harness's ``ModeClient``), then checks
against the jobs' run log (``fault_runs``) and the jobs table that nothing was lost, that no job
ran twice or ran at the same time twice beyond what the operator asked for, and that no action
touched a running job it must leave alone.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

import pgqueue
from tests.faults import jobs
from tests.faults.harness import (
    POLL_INTERVAL,
    START_SLACK,
    Fleet,
    ModeClient,
    deadline_loop,
    note_time,
    wait_for,
)

# The mode that runs every case at full size; the others run fewer rounds (the suite's time).
PRIMARY = "psycopg-sync"
# A paused queue's workers are started with this poll interval, so that only the NOTIFY of
# resume_queue can wake them in time for the bound.
SLOW_POLL = 30.0
RESUME_BOUND = 2.0


@pytest.fixture
def admin(fleet: Fleet) -> Iterator[ModeClient]:
    """The mode's own client in the test process: the operator."""
    client = ModeClient(fleet)
    try:
        yield client
    finally:
        client.close()


class ActionLog:
    """The AdminAction events of the operator's client: which jobs each call changed."""

    def __init__(self, admin: ModeClient) -> None:
        self.events: list[pgqueue.events.AdminAction] = []
        admin.client.events.subscribe(self.events.append, pgqueue.events.AdminAction)

    def last(self) -> pgqueue.events.AdminAction:
        return self.events[-1]


def scale(fleet: Fleet, full: int, other: int) -> int:
    return full if fleet.mode == PRIMARY else other


def db_now(fleet: Fleet) -> datetime:
    return fleet.observer.value("SELECT clock_timestamp()")  # type: ignore[no-any-return]


def run_counts(fleet: Fleet, ids: list[int]) -> dict[int, int]:
    """Job id -> how many runs the run log holds (0 for none)."""
    rows = fleet.observer.rows(
        f"SELECT job_id, count(*) FROM {fleet.runs_table} WHERE job_id = ANY($1) GROUP BY 1",
        (ids,),
    )
    counts = dict.fromkeys(ids, 0)
    counts.update({job_id: n for job_id, n in rows})
    return counts


def status_count(fleet: Fleet, status: str) -> int:
    return int(
        fleet.observer.value(
            f"SELECT count(*) FROM {fleet.jobs_table} WHERE status = $1", (status,)
        )
    )


def running_for(fleet: Fleet, ids: list[int]) -> dict[int, float]:
    """Of ``ids``, the jobs processing with a run in progress: job id -> seconds it has run."""
    rows = fleet.observer.rows(
        f"SELECT r.job_id, extract(epoch FROM clock_timestamp() - r.started_at)::float8 "
        f"FROM {fleet.runs_table} r JOIN {fleet.jobs_table} j ON j.id = r.job_id "
        "WHERE r.job_id = ANY($1) AND r.returned_at IS NULL AND j.status = 'processing'",
        (ids,),
    )
    return {job_id: seconds for job_id, seconds in rows}


def wait_progress(fleet: Fleet) -> None:
    """Wait until the workers complete another job: paces a test's rounds by their progress."""
    done = status_count(fleet, "completed")
    wait_for(lambda: status_count(fleet, "completed") > done, 10, "the workers progressing")


def check_no_overlap(fleet: Fleet) -> None:
    """No job ever had two runs in progress at once."""
    overlapping = fleet.observer.rows(
        f"SELECT a.job_id, a.run_id, b.run_id FROM {fleet.runs_table} a "
        f"JOIN {fleet.runs_table} b ON b.job_id = a.job_id AND b.run_id > a.run_id "
        "WHERE b.started_at < coalesce(a.returned_at, 'infinity')"
    )
    assert not overlapping, f"runs of one job in progress at the same time: {overlapping[:10]}"


def check_outcomes_ours(fleet: Fleet) -> None:
    """No worker logged an unhandled error, or an outcome refused because the job was changed
    under its run (the writer's "no longer ours": the lease was gone)."""
    fleet.check_logs()
    for worker in fleet.workers:
        assert "no longer ours" not in worker.log(), worker.log()


def finish(fleet: Fleet, admin: ModeClient, expect: dict[int, str] | None = None) -> None:
    admin.close()  # its sessions too must be gone for the leak check
    fleet.stop_all()
    fleet.check_invariants(expect)
    check_no_overlap(fleet)
    check_outcomes_ours(fleet)
    fleet.check_no_leaks()


def refused_as_running(result: pgqueue.BulkResult) -> int:
    """Check that a bulk action by filter left alone only jobs claimed since it read them
    (refused: they run now); return how many."""
    odd = {i: r for i, r in result.refused.items() if not r.startswith("it is running")}
    assert not odd, f"{result.action} refused jobs that do not run: {odd}"
    return len(result.refused)


def wait_running(fleet: Fleet, ids: list[int], timeout: float = 20) -> dict[int, float]:
    def all_running() -> dict[int, float] | None:
        found = running_for(fleet, ids)
        return found if len(found) == len(ids) else None

    return wait_for(all_running, timeout, f"jobs {ids} running")  # type: ignore[no-any-return]


def act(action: Any, job_id: int) -> tuple[Any, Exception | None]:
    """Call an admin action on one job; return (its result, None) or (None, what it raised)."""
    try:
        return action(job_id), None
    except (pgqueue.JobActionRefused, pgqueue.JobNotFound) as exc:
        return None, exc


# -- retry ------------------------------------------------------------------------------------


def test_retry_races_claims(fleet: Fleet, admin: ModeClient) -> None:
    actions = ActionLog(admin)
    workers = [fleet.start(queues="default=4") for _ in range(2)]
    fleet.wait_ready(*workers)
    rng = random.Random(14)
    # Two slow jobs, retried by id while they surely run (each has at least a second left).
    slow = fleet.add(2, sleep=1.5)
    elapsed = wait_running(fleet, slow)
    assert max(elapsed.values()) < 0.5, elapsed
    for job_id in slow:
        with pytest.raises(pgqueue.JobActionRefused) as refused:
            admin.retry_job(job_id)
        assert (refused.value.job_id, refused.value.status) == (job_id, "processing")
        assert "running" in refused.value.reason
    result = admin.retry_jobs(slow)
    assert (result.changed, sorted(result.refused)) == (0, sorted(slow)), result
    # Jobs failing their only attempt: retried by filter while the others race.
    failing = fleet.add(
        scale(fleet, 10, 4), fail_until_attempt=1, options=pgqueue.JobOptions(max_attempts=1)
    )
    ids: list[int] = []
    pulled = by_id = refused_running = reran_completed = 0
    retried_failed: set[int] = set()

    def retry_failed() -> None:
        result = admin.retry_jobs(status="failed", queue="default")
        assert not result.refused, result.refused
        if result.changed:
            changed = set(actions.last().job_ids)
            assert len(changed) == result.changed
            assert changed <= set(failing)
            assert not changed & retried_failed, "a failed job was retried twice"
            retried_failed.update(changed)

    for _round in range(scale(fleet, 30, 8)):
        # a wave: some due now, some due in a moment (the retries pull those forward while
        # the workers claim the due ones)
        ids += fleet.add(4, sleep=0.01)
        ids += fleet.add(
            8, sleep=0.01, options=pgqueue.JobOptions(run_in=timedelta(seconds=rng.uniform(0.3, 2)))
        )
        result = admin.retry_jobs(status="pending", queue="default", batch_size=5)
        refused_running += refused_as_running(result)
        pulled += result.changed
        retry_failed()
        # by id: the jobs due first, likely being claimed at this very moment
        for job in admin.list_jobs(status="pending", queue="default", sort="due", limit=3).jobs:
            _, exc = act(admin.retry_job, job.id)
            if exc is not None:
                assert isinstance(exc, pgqueue.JobActionRefused), exc
                assert exc.status == "processing", exc
                refused_running += 1
            else:
                was = actions.last().detail["was"]
                assert was in ("pending", "completed"), was
                if was == "completed":  # it finished in between: the operator ran it again
                    fleet.operator_retries[job.id] = fleet.operator_retries.get(job.id, 0) + 1
                    reran_completed += 1
                by_id += 1
        wait_progress(fleet)
    # every failing job fails once, is retried once, and then completes
    for _ in deadline_loop(20, "every failed job retried"):
        retry_failed()
        if retried_failed == set(failing):
            break
    for job_id in failing:  # one retry each after the failure (and maybe one by id above)
        fleet.operator_retries[job_id] = fleet.operator_retries.get(job_id, 0) + 1
    fleet.wait_final(ids + failing + slow, 60)
    print(
        f"[{fleet.mode}] {len(ids)} jobs: {pulled} pulled forward by filter, {by_id} retried by "
        f"id ({reran_completed} of them completed meanwhile), {refused_running} refused as "
        f"running; {len(failing)} failed jobs retried"
    )
    assert pulled > 0
    assert by_id > 0
    for job_id in failing:
        attempts = [r[0] for r in fleet.runs(job_id)]
        assert attempts == list(range(1, 2 + fleet.operator_retries[job_id])), attempts
    counts = run_counts(fleet, ids + slow)
    reran = {i: n for i, n in counts.items() if n != 1 + fleet.operator_retries.get(i, 0)}
    assert not reran, f"jobs that ran other than once (plus operator retries): {reran}"
    finish(fleet, admin)


# -- delete -----------------------------------------------------------------------------------


def log_deletes(fleet: Fleet) -> None:
    """Record every deleted job row with the status it had when it was deleted."""
    s = f'"{fleet.schema}"'
    fleet.observer.rows(
        f"""
        CREATE TABLE {s}.fault_deletes (
            job_id bigint, status text, at timestamptz DEFAULT clock_timestamp()
        );
        CREATE FUNCTION {s}.fault_log_delete() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO {s}.fault_deletes (job_id, status) VALUES (OLD.id, OLD.status);
            RETURN OLD;
        END $$;
        CREATE TRIGGER fault_log_delete AFTER DELETE ON {s}.pgqueue_jobs FOR EACH ROW
        EXECUTE FUNCTION {s}.fault_log_delete();
        """
    )


def test_delete_races_completion(fleet: Fleet, admin: ModeClient) -> None:
    log_deletes(fleet)
    workers = [fleet.start(queues="default=4") for _ in range(2)]
    fleet.wait_ready(*workers)
    rng = random.Random(14)
    # Running jobs are never deleted, by id or by filter.
    slow = fleet.add(2, sleep=1.5, tag="doomed")
    wait_running(fleet, slow)
    for job_id in slow:
        with pytest.raises(pgqueue.JobActionRefused) as refused:
            admin.delete_job(job_id)
        assert (refused.value.job_id, refused.value.status) == (job_id, "processing")
    result = admin.delete_jobs(slow)
    assert (result.changed, sorted(result.refused)) == (0, sorted(slow)), result
    ids: list[int] = list(slow)
    deleted = by_id = refused_running = 0
    for _round in range(scale(fleet, 30, 8)):
        # half of each wave is doomed: deleted once pending or completed, whichever comes first
        doomed = fleet.add(6, sleep=0.01, tag="doomed")
        ids += doomed + fleet.add(6, sleep=0.01, tag="kept")
        result = admin.delete_jobs(
            queue="default", status=["pending", "completed"], args={"tag": "doomed"}, batch_size=4
        )
        refused_running += refused_as_running(result)
        deleted += result.changed
        for job_id in rng.sample(ids[-40:], 3):
            was, exc = act(admin.delete_job, job_id)
            if isinstance(exc, pgqueue.JobActionRefused):
                assert exc.status == "processing", exc
                refused_running += 1
            elif exc is None:
                assert was in ("pending", "completed"), was
                by_id += 1
            # else JobNotFound: deleted already
        wait_progress(fleet)
    fleet.wait_final(list(fleet.statuses(ids)), 60)
    gone = dict(fleet.observer.rows(f'SELECT job_id, status FROM "{fleet.schema}".fault_deletes'))
    print(
        f"[{fleet.mode}] {len(ids)} jobs: {deleted} deleted by filter, {by_id} by id "
        f"({sum(s == 'pending' for s in gone.values())} pending, "
        f"{sum(s == 'completed' for s in gone.values())} completed), "
        f"{refused_running} refused as running"
    )
    # what the calls said they deleted is exactly what is gone, and none of it was running
    assert len(gone) == deleted + by_id
    assert set(gone.values()) <= {"pending", "completed"}, gone
    assert set(fleet.statuses(ids)) == set(ids) - set(gone)
    assert deleted > 0
    assert {"pending", "completed"} <= set(gone.values())
    # a deleted pending job never ran; a deleted completed one ran once, to its end
    counts = run_counts(fleet, list(gone))
    for job_id, status in gone.items():
        assert counts[job_id] == (1 if status == "completed" else 0), (job_id, status)
    fleet.committed -= set(gone)
    finish(fleet, admin)


# -- pause ------------------------------------------------------------------------------------


def test_pause_while_jobs_run(fleet: Fleet, admin: ModeClient) -> None:
    workers = [fleet.start(queues="default=2", poll_interval=SLOW_POLL) for _ in range(2)]
    fleet.wait_ready(*workers)
    running = fleet.add(4, sleep=1.0)  # fills the four slots
    backlog = fleet.add(scale(fleet, 20, 8), sleep=0.02)
    wait_running(fleet, running)
    assert admin.pause_queue("default") == ["default"]
    paused_at = db_now(fleet)
    (stats,) = admin.queue_stats("default")
    assert stats.paused
    assert stats.paused_at is not None
    assert stats.paused_at <= paused_at
    # the pause outlives the workers: a new one (polling often) starts while paused ...
    fresh = fleet.start(queues="default=2")
    # ... the running jobs finish, and their slots claim nothing ...
    fleet.wait_final(running, 10, "the jobs running when the queue was paused")
    # ... and one of the old workers stops
    fleet.stop(workers[0])
    fleet.wait_ready(fresh)
    late = fleet.add(3, sleep=0.02)  # still enqueued; the NOTIFY wakes the workers in vain
    (stats,) = admin.queue_stats("default")
    assert stats.paused
    assert stats.counts.available == len(backlog) + len(late)
    # hold on for a few of the new worker's polls: nothing is claimed
    waiting = backlog + late
    for elapsed in deadline_loop(10, "the hold"):
        assert set(fleet.statuses(waiting).values()) == {"pending"}, fleet.statuses(waiting)
        if elapsed > 2.5 * POLL_INTERVAL:
            break
    resume_called = db_now(fleet)
    assert admin.resume_queue("default") == ["default"]
    # nothing was claimed between the pause's commit and the resume (a claim that started
    # before the pause committed may have gone on; its locked_at is before paused_at)
    late_claims = fleet.observer.rows(
        f"SELECT id, locked_at FROM {fleet.jobs_table} WHERE locked_at BETWEEN $1 AND $2",
        (paused_at, resume_called),
    )
    assert not late_claims, f"claimed while paused: {late_claims}"
    late_runs = fleet.observer.rows(
        f"SELECT job_id, started_at FROM {fleet.runs_table} WHERE started_at BETWEEN $1 AND $2",
        (paused_at + START_SLACK, resume_called),
    )
    assert not late_runs, f"started while paused: {late_runs}"
    for job_id in running:
        ((_, _, started, returned),) = fleet.runs(job_id)
        assert started < paused_at < returned  # ran through the pause, to its end
    # resumed: woken by the NOTIFY (the old workers poll every 30 s), all drain
    first = wait_for(
        lambda: fleet.observer.value(
            f"SELECT min(started_at) FROM {fleet.runs_table} WHERE started_at > $1 AND pid = $2",
            (resume_called, workers[1].pid),
        ),
        RESUME_BOUND + 5,
        "a job started after the resume by a worker polling every 30 s",
    )
    note_time(
        "queue resumed: first job started (NOTIFY)",
        fleet.mode,
        (first - resume_called).total_seconds(),
        RESUME_BOUND,
    )
    fleet.wait_final(waiting, 10, "the paused queue drained after the resume")
    assert not admin.queue_stats("default")[0].paused
    finish(fleet, admin)


# -- cancel -----------------------------------------------------------------------------------


def test_cancel_races_running_jobs(fleet: Fleet, admin: ModeClient) -> None:
    workers = [fleet.start(queues="default=4") for _ in range(2)]
    fleet.wait_ready(*workers)
    # long async jobs end only when cancelled; sync ones cannot be interrupted and complete
    stuck = fleet.add(3, job=jobs.AsyncWork, sleep=60)
    ignoring = fleet.add(3, sleep=1.0)
    # and a flow of short jobs through the two slots left, claimed as the cancel runs
    flow = fleet.add(scale(fleet, 200, 60), sleep=0.02)
    wait_running(fleet, stuck + ignoring)
    wait_for(lambda: status_count(fleet, "completed") >= 10, 10, "the flow under way")
    result = admin.cancel_jobs(queue="default", batch_size=25)
    cancelled_at = db_now(fleet)
    # left alone: only jobs that ended between the cancel's reading them and its acting
    ended = {i: r for i, r in result.refused.items() if not r.startswith("it has already ended")}
    assert not ended, ended
    assert result.changed >= len(stuck + ignoring), result
    fleet.wait_final(stuck + ignoring + flow, 10, "every job ended after the cancel")
    ran = {job_id: n for job_id, n in run_counts(fleet, flow).items() if n}
    print(
        f"[{fleet.mode}] cancel: {result.changed} of {result.matched} changed; "
        f"{len(ran)} of {len(flow)} flow jobs ran"
    )
    # nothing was claimed after the cancel returned
    late = fleet.observer.rows(
        f"SELECT id, locked_at FROM {fleet.jobs_table} WHERE locked_at > $1", (cancelled_at,)
    )
    assert not late, f"claimed after the cancel: {late}"
    never_ran = [job_id for job_id in flow if job_id not in ran]
    assert never_ran, "the flow ended before the cancel"
    rows = fleet.observer.rows(
        f"SELECT id, status, last_error FROM {fleet.jobs_table} WHERE id = ANY($1)",
        (stuck + ignoring + flow,),
    )
    info: dict[int, Any] = {job_id: (status, error) for job_id, status, error in rows}
    for job_id in never_ran:
        assert info[job_id] == ("cancelled", "cancelled before it ran"), (job_id, info[job_id])
    for job_id in stuck:
        assert info[job_id] == ("cancelled", "cancelled while running"), (job_id, info[job_id])
        assert fleet.runs(job_id)[0][3] is None  # cut off, never returned
    # a sync job is only told (ctx.cancelled); one that ignores it completes
    assert fleet.observer.value(
        f"SELECT count(*) FROM {fleet.jobs_table} WHERE id = ANY($1) "
        "AND cancel_requested_at IS NOT NULL",
        (ignoring,),
    ) == len(ignoring)
    expect = dict.fromkeys(never_ran + stuck, "cancelled")
    finish(fleet, admin, expect)


# -- a filter's status, checked again under the action's lock -------------------------------


def claim_uncommitted(fleet: Fleet, job_id: int) -> psycopg.Connection[Any]:
    """A session playing a worker: its claim of the job, not committed yet (it holds the row)."""
    conn = psycopg.connect(fleet.base_url)
    conn.execute(
        f"UPDATE {fleet.jobs_table} SET status = 'processing', attempts = 1, locked_at = now() "
        "WHERE id = %s",
        (job_id,),
    )
    return conn


# What the session playing a worker has done to the job by the time the action gets its lock.
RACES: dict[str, tuple[str, Callable[[ModeClient], pgqueue.BulkResult]]] = {
    # read as pending; claimed, run and completed before the retry locks it
    "retry": ("completed", lambda a: a.retry_jobs(status="pending", queue="default")),
    # read as pending; completed before the delete locks it
    "delete": ("completed", lambda a: a.delete_jobs(status="pending", queue="default")),
    # read as pending; claimed (running) before the cancel locks it
    "cancel": ("processing", lambda a: a.cancel_jobs(status="pending", queue="default")),
}


@pytest.mark.parametrize("action", sorted(RACES))
def test_bulk_action_by_filter_checks_the_status_again_under_its_lock(
    fleet: Fleet, admin: ModeClient, action: str
) -> None:
    (job_id,) = fleet.add(1)
    status, call = RACES[action]
    worker = claim_uncommitted(fleet, job_id)
    try:
        out: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: out.update(result=call(admin)), daemon=True)
        thread.start()  # reads the job as pending (the claim is not committed), then waits
        wait_for(
            lambda: fleet.observer.value(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"
            ),
            10,
            f"the {action} waiting for the job's row",
        )
        if status == "completed":
            worker.execute(
                f"UPDATE {fleet.jobs_table} SET status = 'completed', finished_at = now() "
                "WHERE id = %s",
                (job_id,),
            )
        worker.commit()
        thread.join(10)
        assert not thread.is_alive()
    finally:
        worker.close()
    rows = fleet.observer.rows(
        f"SELECT status, cancel_requested_at FROM {fleet.jobs_table} WHERE id = $1", (job_id,)
    )
    # the job is no longer pending: the filter no longer matches it, so it is left as it is
    assert rows == [(status, None)], (out, rows)
    assert out["result"].changed == 0, out
