"""Worker processes behind a real PgBouncer in transaction pooling mode: kill -9 and rescue.

Every statement of the workers goes through the pooler (``pgqueue worker --pgbouncer``); the
LISTEN session and the leader's lock go straight to PostgreSQL (``--listen-dsn``, route
``direct``), or there are none (route ``poll``: the workers poll and the leader holds a lease).
Behind the pooler a dead worker's sessions are not its own: the pooler keeps its server
sessions, and rolls back whatever transaction the dead client left open.
"""

from __future__ import annotations

import time

import psutil
import pytest

from tests.faults import jobs
from tests.faults.harness import LEADER_INTERVAL, RESCUE_AFTER, Fleet, note_time, wait_for
from tests.faults.test_processes import held_by, unfinished_runs
from tests.pgbouncer import PgBouncer

# As in test_processes: stale after rescue_after, seen at a leader's next tick (a lease passes
# to the survivor at the same moment the victim's heartbeat is stale), run at once.
RESCUE_BOUND = RESCUE_AFTER + 4 * LEADER_INTERVAL + 3.0

ROUTES = pytest.mark.parametrize("route", ["direct", "poll"])


def _options(fleet: Fleet, route: str) -> tuple[str, ...]:
    if fleet.mode.startswith("sqlalchemy"):
        pytest.skip("pgbouncer=True takes the psycopg and asyncpg drivers (docs/deployment.md)")
    if route == "direct":
        return ("--pgbouncer", f"--listen-dsn={fleet.mode_url()}")
    return ("--pgbouncer",)


def _pooler_backends(fleet: Fleet, pgbouncer: PgBouncer) -> set[int]:
    """Backend pids of the pooler's own server sessions to the test database."""
    ports = {
        c.laddr.port
        for c in psutil.Process(pgbouncer.proc.pid).net_connections(kind="tcp")
        if c.raddr and c.raddr.port == pgbouncer.server_port
    }
    rows = fleet.observer.rows(
        "SELECT pid, client_port FROM pg_stat_activity "
        "WHERE datname = current_database() AND client_port IS NOT NULL"
    )
    return {pid for pid, port in rows if port in ports}


def _check_no_leaks(fleet: Fleet, pgbouncer: PgBouncer) -> None:
    """No advisory lock held and no session left, but the pooler's own idle ones."""
    state: list[object] = []

    def clean() -> bool:
        pooled = _pooler_backends(fleet, pgbouncer)
        mine = fleet.observer.value("SELECT pg_backend_pid()")
        locks = fleet.observer.rows(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        others = fleet.observer.rows(
            "SELECT pid, state, query FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> $1 AND NOT pid = ANY($2)",
            (mine, sorted(pooled)),
        )
        busy = fleet.observer.rows(
            "SELECT pid FROM pg_stat_activity WHERE pid = ANY($1) AND state <> 'idle'",
            (sorted(pooled),),
        )
        state[:] = [locks, others, busy]
        return not locks and not others and not busy

    try:
        wait_for(clean, 10, "no advisory locks, sessions or open transactions left")
    except AssertionError:
        raise AssertionError(f"left behind (locks, sessions, busy pooled): {state}") from None


@ROUTES
def test_sigkill_mid_job_behind_the_pooler(fleet: Fleet, pgbouncer: PgBouncer, route: str) -> None:
    options = _options(fleet, route)
    victim = fleet.start(*options, port=pgbouncer.port)
    survivor = fleet.start(*options, port=pgbouncer.port)
    fleet.wait_ready(victim, survivor)
    fleet.add_rolled_back()
    ids = fleet.add(40, job=jobs.Work, sleep=0.3)
    wait_for(lambda: unfinished_runs(fleet, victim.pid) >= 2, 20, "the victim mid-job")
    start = time.monotonic()
    fleet.kill_and_settle(victim)  # its direct sessions, if any; the pooler keeps its own
    held = held_by(fleet, victim.pid)
    assert held, "the victim held no job when killed"
    fleet.wait_final(held, 30, "the killed worker's jobs")
    note_time(
        f"SIGKILL mid-job behind PgBouncer ({route}): its jobs completed elsewhere",
        fleet.mode,
        time.monotonic() - start,
        RESCUE_BOUND,
    )
    fleet.wait_final(ids, 60)
    rescued = fleet.observer.value(
        f"SELECT count(*) FROM {fleet.jobs_table} WHERE id = ANY($1) AND attempts = 2 "
        "AND last_error LIKE '%stopped heartbeating%'",
        (held,),
    )
    assert rescued == len(held)
    # the survivor leads now, by the advisory lock on its direct session or by the lease
    leader = fleet.observer.value(
        f'SELECT pid FROM "{fleet.schema}".pgqueue_instances WHERE is_leader'
    )
    assert leader == survivor.pid
    fleet.stop_all()
    fleet.check_invariants()
    _check_no_leaks(fleet, pgbouncer)
    assert "prepared statement" not in survivor.log(), survivor.log()
    # a worker that polls says so when it starts
    assert ("polling only: no LISTEN" in survivor.log()) is (route == "poll"), survivor.log()
    assert "Traceback" not in survivor.log(), survivor.log()
