"""Many worker processes draining a large backlog: each job runs once, each process its share
(issue 21).

With the queue paused, one ``add_jobs`` call (``COPY``) enqueues the backlog of a job that does
nothing; ``pgqueue worker`` processes (each at the worker's default concurrency of 10) start and
register; the queue is resumed, so that they all begin together, and the test waits, with a
deadline, until no job is left. Then: every job completed with exactly one run and one claim
(``attempts`` 1), none lost; every process ran at least a quarter of the average share; the
claims the jobs table records (the instance on each row) agree with the runs the processes
record, process by process; and the fleet's invariants, leak and log checks hold.

Sixteen processes (as many as this 2-core machine holds) and 200,000 jobs in one mode, asyncpg
(the fastest drain), or the first mode selected when ``$PGQUEUE_FAULT_MODES`` leaves it out:
about a minute. Four processes and 10,000 jobs in each other mode, which differ only in the
driver under the same statements: 16 interpreters take 5-10 s to start on two cores, and five
drains of 200,000 would take minutes; this way the test stays within about 90 s of the fault
suite's budget.

The backlog is there before the workers start, not enqueued while they idle: a session that has
run the claim a few times on an empty jobs table keeps a generic plan made for it, which finds
the rows to update by a sequential scan of the table (about 40 ms a claim on 200,000 rows, until
an ANALYZE invalidates it). Whichever processes happened to idle long enough drained at a
fraction of the others' rate: a problem of the claim's plan, not of many processes, and not what
this test is about.

A run record per job in ``fault_runs`` (``tests/faults/jobs.py``: two statements per run, over a
connection of their own) would cost more than the drain it checks. The job here appends (job id,
attempt, time) to a list in its process, which writes the list to a file when the process
exits; once the workers have stopped, the test loads those records into the fleet's
``fault_runs`` table (one ``COPY``) and the fleet's checks run on them as in every other fault
test. The job classes and their registries are defined here, so the workers import this module.

The workers run with the product's heartbeat, rescue and leader timings, not the fleet's short
ones: nothing is faulted here, and 16 processes heartbeating four times a second would be a load
of their own on two cores. Sixteen processes hold about 80 sessions: with PostgreSQL's default
``max_connections`` of 100, nothing else may use many of the server's connections meanwhile.
"""

from __future__ import annotations

import atexit
import json
import os
import statistics
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

import pgqueue
from tests.faults.conftest import _selected_modes
from tests.faults.harness import MODES, Fleet, deadline_loop, note_time

PROCESSES = 16
PROCESSES_OTHER_MODES = 4
CONCURRENCY = 10  # per process: `pgqueue worker`'s default
FULL_MODE = "asyncpg"
QUEUE = "default"
JOBS = 200_000
JOBS_OTHER_MODES = 10_000
# Every process must run at least this share of the average (the jobs over the processes): it
# fails if a few processes take the work of the others, and holds with room to spare when all
# take turns (in every run here the least ran over half the average, 0.94 of it with 200,000
# jobs).
FAIR_SHARE = 0.25
# The drain's bound: at least this many jobs a second, from the queue's resumption to the last
# outcome, plus 20 s (16 processes drained 2,400-5,400 a second here, with the machine busy
# with other work as well).
MIN_RATE = 1_000
# The product's defaults, overriding the fleet's short recovery timings.
DEFAULTS = pgqueue.RuntimeConfig()
MODULE = "tests.faults.test_scale"
# The workers' sessions (all but the observer's): their most, sampled during the drain.
SESSIONS = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
)

# -- the job, as the worker processes run it ----------------------------------------------------

RUNS_DIR = "SCALE_RUNS_DIR"  # set in the workers' environment only
_runs: list[tuple[int, int, float]] = []


def _write_runs() -> None:
    path = Path(os.environ[RUNS_DIR]) / f"{os.getpid()}.json"
    path.write_text(json.dumps(_runs))


if os.environ.get(RUNS_DIR):
    atexit.register(_write_runs)


@dataclass
class Tick(pgqueue.Worker):
    """Does nothing but note its run (a list append: the GIL makes it safe across threads)."""

    kind = "scale.tick"

    def process(self, ctx: pgqueue.JobContext) -> None:
        _runs.append((ctx.id, ctx.attempt, time.time()))


@dataclass
class AsyncTick(pgqueue.Worker):
    """The same on the event loop, for the asyncio modes."""

    kind = "scale.tick"

    async def process(self, ctx: pgqueue.JobContext) -> None:
        _runs.append((ctx.id, ctx.attempt, time.time()))


sync_registry = pgqueue.WorkerRegistry(Tick)
async_registry = pgqueue.WorkerRegistry(AsyncTick)

# -- the test ----------------------------------------------------------------------------------


def full_mode() -> str:
    """The mode that drains the full backlog: ``FULL_MODE``, or the first selected."""
    selected = _selected_modes()
    return FULL_MODE if FULL_MODE in selected else selected[0]


def read_runs(fleet: Fleet, runs_dir: Path) -> dict[int, list[tuple[int, int, float]]]:
    """Each worker's run records (pid -> [(job id, attempt, time)]), from the files they wrote."""
    out: dict[int, list[tuple[int, int, float]]] = {}
    for worker in fleet.workers:
        path = runs_dir / f"{worker.pid}.json"
        assert path.exists(), f"worker {worker.pid} wrote no run records:\n{worker.log()[-3000:]}"
        out[worker.pid] = [(int(i), int(a), float(t)) for i, a, t in json.loads(path.read_text())]
    return out


def load_runs(fleet: Fleet, runs: dict[int, list[tuple[int, int, float]]]) -> None:
    """Copy the run records into the fleet's ``fault_runs``, in the order the runs happened (the
    job does nothing: it returns as it starts)."""
    rows = sorted(
        (
            (t, job_id, attempt, pid)
            for pid, records in runs.items()
            for job_id, attempt, t in records
        )
    )
    with psycopg.connect(fleet.base_url) as conn, conn.cursor() as cur:
        columns = "job_id, attempt, pid, tag, started_at, returned_at"
        with cur.copy(f"COPY {fleet.runs_table} ({columns}) FROM STDIN") as copy:
            for t, job_id, attempt, pid in rows:
                at = datetime.fromtimestamp(t, UTC)
                copy.write_row((job_id, attempt, pid, "scale", at, at))


def test_many_processes_drain_a_backlog_each_job_once(fleet: Fleet, tmp_path: Path) -> None:
    full = fleet.mode == full_mode()
    n, processes = (JOBS, PROCESSES) if full else (JOBS_OTHER_MODES, PROCESSES_OTHER_MODES)
    is_async = MODES[fleet.mode][2]
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    registry = f"{MODULE}:{'async_registry' if is_async else 'sync_registry'}"
    assert fleet.client is not None
    fleet.client.pause_queue(QUEUE)
    start = time.monotonic()
    ids = fleet.add(n, job=AsyncTick if is_async else Tick)
    enqueued = time.monotonic() - start
    workers = [
        fleet.start(
            queues=f"{QUEUE}={CONCURRENCY}",
            registry=registry,
            env={RUNS_DIR: str(runs_dir)},
            heartbeat_interval=DEFAULTS.heartbeat_interval,
            rescue_after=DEFAULTS.rescue_after,
            leader_interval=DEFAULTS.leader_interval,
        )
        for _ in range(processes)
    ]
    fleet.wait_ready(*workers, timeout=60)
    # which process each claim came from: completed jobs keep their instance, and instances are
    # removed when their process stops
    instances: dict[Any, int] = dict(
        fleet.observer.rows(f'SELECT instance_id, pid FROM "{fleet.schema}".pgqueue_instances')
    )
    assert sorted(instances.values()) == sorted(w.pid for w in workers)

    start = time.monotonic()
    fleet.client.resume_queue(QUEUE)
    bound = n / MIN_RATE + 20
    sessions = 0
    for _ in deadline_loop(bound, f"{n:,} jobs drained by {processes} processes", 0.5):
        # (the fleet's wait_final would send the 200,000 ids twice a second)
        sessions = max(sessions, fleet.observer.value(SESSIONS))
        if not fleet.observer.value(
            f"SELECT count(*) FROM {fleet.jobs_table} WHERE status IN ('pending', 'processing')"
        ):
            break
    drained = time.monotonic() - start
    note_time(f"{processes} processes drain {n:,} jobs", fleet.mode, drained, bound)
    fleet.stop_all()

    runs = read_runs(fleet, runs_dir)
    ran = sorted(job_id for records in runs.values() for job_id, _, _ in records)
    assert len(ran) == n, f"{len(ran):,} runs of {n:,} jobs"
    assert ran == sorted(ids), "some job ran twice, or never"
    # one claim per job, and the same split by process in the database as in the runs
    claims = {
        instances.get(instance, -1): (count, attempts)
        for instance, count, attempts in fleet.observer.rows(
            f"SELECT instance_id, count(*), max(attempts) FROM {fleet.jobs_table} "
            "GROUP BY instance_id"
        )
    }
    assert all(attempts == 1 for _, attempts in claims.values()), claims
    per_process = {pid: len(records) for pid, records in runs.items()}
    assert {pid: count for pid, (count, _) in claims.items()} == per_process
    average = n / processes
    shares = sorted(per_process.values())
    print(
        f"SCALE [{fleet.mode}] {n:,} jobs, {processes} processes at {CONCURRENCY}: enqueued in "
        f"{enqueued:.1f}s, drained in {drained:.1f}s ({n / drained:,.0f} jobs/s); runs per "
        f"process min {shares[0]:,} median {statistics.median(shares):,.0f} max {shares[-1]:,} "
        f"(average {average:,.0f}); at most {sessions} sessions"
    )
    if shares[0] < FAIR_SHARE * average:
        low = min(per_process, key=per_process.__getitem__)
        worker = next(w for w in fleet.workers if w.pid == low)
        warnings = [line for line in worker.log().splitlines() if " WARNING " in line]
        raise AssertionError(
            f"process {low} ran {per_process[low]:,} jobs, under {FAIR_SHARE:.0%} of the "
            f"average {average:,.0f}: {per_process}; its warnings: {warnings[-20:]}"
        )

    load_runs(fleet, runs)
    fleet.check_invariants()
    fleet.check_no_leaks()
    fleet.check_logs()
