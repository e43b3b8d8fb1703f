"""The database side breaks: killed backends, a restarted server, a network that loses replies."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

import pgqueue
from tests.faults.harness import RECONNECT_MAX, Fleet, Worker, note_time, wait_for
from tests.faults.proxy import Proxy


def listener_backend(fleet: Fleet, worker: Worker) -> int | None:
    """The backend of the worker's LISTEN session, once it is listening."""
    backends = fleet.backends(worker)
    rows = fleet.observer.rows(
        "SELECT pid FROM pg_stat_activity WHERE pid = ANY($1) AND query LIKE 'LISTEN %'",
        (backends,),
    )
    return rows[0][0] if rows else None


def completed(fleet: Fleet) -> int:
    return int(
        fleet.observer.value(f"SELECT count(*) FROM {fleet.jobs_table} WHERE status = 'completed'")
    )


def check_connections(fleet: Fleet, *workers: Worker) -> None:
    """No worker holds more sessions than its pool, listener and leader lock allow."""
    for worker in workers:
        count = len(fleet.backends(worker, recorders=False))
        assert count <= fleet.max_connections(), f"worker {worker.pid} holds {count} sessions"


def test_listener_backend_terminated_repeatedly(fleet: Fleet) -> None:
    # The fallback poll is set to a minute, so only a working listener (or its reconnect
    # re-check) can start the jobs in time.
    worker = fleet.start(poll_interval=60)
    fleet.wait_ready(worker)
    old = None
    worst = 0.0
    for _ in range(6):
        pid = wait_for(
            lambda old=old: (p := listener_backend(fleet, worker)) != old and p, 10, "a listener"
        )
        fleet.observer.value("SELECT pg_terminate_backend($1)", (pid,))
        old = pid
        (job,) = fleet.add(1)
        worst = max(worst, fleet.wait_final([job], 10, "a job added after the kill"))
    note_time("listener terminated (x6): job added meanwhile started", fleet.mode, worst, 2.0)
    # and once the listener is back, a job starts at NOTIFY speed again
    wait_for(lambda: listener_backend(fleet, worker) not in (None, old), 10, "listening again")
    (job,) = fleet.add(1)
    assert fleet.wait_final([job], 5) < 1.0
    check_connections(fleet, worker)
    assert "listener lost" in worker.log()
    fleet.stop_all()
    fleet.check_invariants()
    fleet.check_no_leaks()
    fleet.check_logs()


def test_every_backend_terminated_during_completion_writes(fleet: Fleet) -> None:
    workers = [fleet.start(queues="default=8"), fleet.start(queues="default=8")]
    fleet.wait_ready(*workers)
    ids = fleet.add(4000)
    wait_for(lambda: completed(fleet) >= 300, 30, "the drain under way")
    worst = 0.0
    for _ in range(3):
        backends = [pid for w in workers for pid in fleet.backends(w)]
        fleet.fault("every backend terminated", None)
        fleet.observer.rows(
            "SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid", (backends,)
        )
        start = time.monotonic()
        before = completed(fleet)
        wait_for(lambda b=before: completed(fleet) > b + 50, 30, "progress after the kill")
        worst = max(worst, time.monotonic() - start)
    note_time(
        "every backend terminated (x3): completions resumed", fleet.mode, worst, RECONNECT_MAX + 4.0
    )
    fleet.wait_final(ids, 120)
    check_connections(fleet, *workers)
    fleet.stop_all()
    fleet.check_invariants()
    fleet.check_no_leaks()
    fleet.check_logs()
    logs = "".join(w.log() for w in workers)
    assert "will retry" in logs or "claim failed" in logs


def restart_postgres(how: str) -> None:
    """Restart the local server (``fast``: clean shutdown; ``immediate``: crash recovery)."""
    version = next(Path("/etc/postgresql").iterdir()).name
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart", "-m", how],
        check=True,
        capture_output=True,
        timeout=120,
    )


def ensure_postgres() -> None:
    if subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1"], check=False).returncode != 0:
        version = next(Path("/etc/postgresql").iterdir()).name
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start"],
            check=False,
            timeout=120,
        )


@pytest.mark.skipif(not Path("/etc/postgresql").is_dir(), reason="needs a local pg_ctlcluster")
@pytest.mark.parametrize("how", ["fast", "immediate"])
def test_postgres_restarted_under_load(fleet: Fleet, how: str) -> None:
    workers = [fleet.start(queues="default=8"), fleet.start(queues="default=8")]
    fleet.wait_ready(*workers)
    fleet.add_rolled_back()
    ids = fleet.add(2000, sleep=0.002)
    # Enqueuers keep adding through the restart, retrying as an application would; only the
    # jobs whose add_job returned count as committed.
    stop = threading.Event()
    errors: list[pgqueue.DatabaseError] = []

    def enqueue() -> None:
        while not stop.is_set():
            try:
                fleet.add(1)
            except pgqueue.DatabaseError as exc:  # the server is down: retry, as an app would
                errors.append(exc)
                time.sleep(0.05)

    enqueuer = threading.Thread(target=enqueue, daemon=True)
    enqueuer.start()
    try:
        wait_for(lambda: completed(fleet) >= 300, 30, "the drain under way")
        fleet.fault(f"restart -m {how}", None)
        restart_postgres(how)
        up = time.monotonic()
        before = completed(fleet)
        wait_for(lambda: completed(fleet) > before + 50, 60, "progress after the restart")
        note_time(
            f"PostgreSQL restart ({how}): completions resumed",
            fleet.mode,
            time.monotonic() - up,
            RECONNECT_MAX + 6.0,
        )
        # and the application's own enqueues go through again
        added = len(fleet.committed)
        wait_for(lambda: len(fleet.committed) > added + 20, 30, "enqueues after the restart")
    finally:
        stop.set()
        enqueuer.join(30)
        ensure_postgres()
    assert errors, "the enqueuer never saw the restart"
    fleet.wait_final(fleet.committed, 120)
    assert all(w.alive() for w in workers), "a worker died with the database"
    check_connections(fleet, *workers)
    fleet.stop_all()
    fleet.check_invariants()
    fleet.check_no_leaks()
    fleet.check_logs()
    assert set(ids) <= fleet.committed


def test_network_cut_loses_a_claims_reply(fleet: Fleet) -> None:
    # The claim reaches the server and commits, but its reply is lost and the connection dies:
    # the jobs are 'processing' under a live worker that never got them. Nothing would rescue
    # them (the worker heartbeats on); the worker must hand them back itself.
    proxy = Proxy()
    try:
        worker = fleet.start(port=proxy.port, poll_interval=0.2)
        fleet.wait_ready(worker)
        caught: list[int] = []
        for _round in range(5):
            # every driver runs a claim as one autocommitted statement: lose its reply
            proxy.drop_replies = "all"
            fleet.fault("network cut: replies lost", worker.pid)
            ids = fleet.add(3)
            try:
                caught = wait_for(
                    lambda ids=ids: (
                        len(
                            held := [i for i, s in fleet.statuses(ids).items() if s == "processing"]
                        )
                        == len(ids)
                        and held
                    ),
                    3,
                    "a claim whose reply is lost",
                )
            except AssertionError:
                caught = []  # a claim went out before the jobs were there: try again
            proxy.drop_replies = None
            proxy.cut()
            if caught:
                break
            # let the worker reconnect and run this round's jobs before the next try
            fleet.wait_final(ids, 30, "jobs of a round that missed")
        assert caught, "never lost a claim's reply"
        start = time.monotonic()
        fleet.wait_final(caught, 20, "the jobs of the lost claim")
        note_time(
            "network cut lost a claim's reply: its jobs handed back and run",
            fleet.mode,
            time.monotonic() - start,
            RECONNECT_MAX + 4.0,
        )
        for job_id in caught:
            # the lost claim never ran it, and handing it back did not charge the attempt
            assert [r[0] for r in fleet.runs(job_id)] == [1], worker.log()
        assert "handed back" in worker.log()
        fleet.stop_all()
        fleet.check_invariants()
        fleet.check_no_leaks()
        fleet.check_logs()
    finally:
        proxy.close()
