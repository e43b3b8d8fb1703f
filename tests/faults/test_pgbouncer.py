"""Worker processes behind a real PgBouncer in transaction pooling mode: kill -9 and rescue.

Every statement of the workers goes through the pooler (``pgqueue worker --pgbouncer``); the
LISTEN session and the leader's lock go straight to PostgreSQL (``--listen-dsn``, route
``direct``), or there are none (route ``poll``: the workers poll and the leader holds a lease).
Behind the pooler a dead worker's sessions are not its own: the pooler keeps its server
sessions, and rolls back whatever transaction the dead client left open.
"""

from __future__ import annotations

import psutil
import pytest

from tests.faults.harness import Fleet, wait_for
from tests.faults.test_processes import sigkill_mid_job
from tests.pgbouncer import PgBouncer

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
    # its direct sessions, if any, are waited for; the pooler keeps its own
    sigkill_mid_job(fleet, victim, f"SIGKILL mid-job behind PgBouncer ({route})")
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
