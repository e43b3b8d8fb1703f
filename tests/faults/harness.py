"""Real worker processes, the faults done to them, and the invariants checked afterwards.

A :class:`Fleet` starts ``pgqueue worker`` processes (the real command line) in one driver mode,
enqueues jobs from the test process, records every fault it causes (what, when by the database's
clock, to which process), and at the end checks the invariants of ``docs/guarantees.md``
against the ``fault_runs`` table that the jobs write (see ``tests/faults/jobs.py``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import psycopg

import pgqueue
from tests.conftest import Db
from tests.faults import jobs

ROOT = Path(__file__).resolve().parents[2]

# mode -> (URL scheme, driver, asyncio runtime?)
MODES: dict[str, tuple[str, str, bool]] = {
    "psycopg-sync": ("postgresql", "psycopg", False),
    "psycopg-async": ("postgresql", "psycopg", True),
    "sqlalchemy-sync": ("postgresql+psycopg", "sqlalchemy", False),
    "sqlalchemy-async": ("postgresql+asyncpg", "sqlalchemy", True),
    "asyncpg": ("postgresql", "asyncpg", True),
}
ALL_MODES = tuple(MODES)

# The settings the recovery bounds depend on (docs/guarantees.md quotes them).
HEARTBEAT = 0.25
RESCUE_AFTER = 2.0
LEADER_INTERVAL = 0.25
POLL_INTERVAL = 0.5
RECONNECT_MAX = 1.0
FINAL = ("completed", "failed", "cancelled")

TIMES_FILE = Path(os.environ.get("FAULT_TIMES", ROOT / ".fault-times.jsonl"))


def deadline_loop(timeout: float, what: str, interval: float = 0.02) -> Iterable[float]:
    """Yield elapsed seconds until the caller breaks out; fail after ``timeout`` seconds."""
    start = time.monotonic()
    while True:
        elapsed = time.monotonic() - start
        if elapsed > timeout:
            raise AssertionError(f"not within {timeout}s: {what}")
        yield elapsed
        time.sleep(interval)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Return ``predicate()`` once it is truthy; fail after ``timeout`` seconds."""
    for _ in deadline_loop(timeout, what):
        value = predicate()
        if value:
            return value
    raise AssertionError("unreachable")  # pragma: no cover


def note_time(case: str, mode: str, seconds: float, bound: float) -> None:
    """Print a measured recovery time and append it to ``$FAULT_TIMES`` for the docs."""
    print(f"RECOVERY {case} [{mode}]: {seconds:.2f}s (bound {bound:.1f}s)")
    with TIMES_FILE.open("a") as f:
        f.write(json.dumps({"case": case, "mode": mode, "seconds": round(seconds, 3)}) + "\n")
    assert seconds < bound, f"{case} [{mode}]: recovery took {seconds:.2f}s, bound {bound:.1f}s"


# A run's start row is stamped by the database a little after the job began (the claim came
# first); a fault that struck this much before the stamp may still have hit the run.
START_SLACK = timedelta(seconds=1)
# After ``process`` returns, its outcome waits for the process's flusher: at most one batch
# statement in flight, some milliseconds (tens on a loaded 2-core machine). A fault in that
# window still costs the run its outcome, and the job runs again. 1 s is six times the longest
# wait the suite has seen (0.16 s from return to ``finished_at``, 4,000 jobs on two workers).
OUTCOME_WRITE = timedelta(seconds=1)


@dataclass(frozen=True)
class Run:
    """One run of a job's code, as the run log recorded it (database clock)."""

    job_id: int
    pid: int
    started: datetime
    returned: datetime | None  # None: its code never returned (killed, or cut off)


@dataclass
class Fault:
    at: datetime
    what: str
    pid: int | None  # None: it hit every process (backends killed, server restarted)
    fatal: bool = False  # the process died of it

    def struck(self, run: Run) -> bool:
        """Whether this fault hit ``run`` while it was in progress: in its process (or in
        every process), after the run began and before it was over: its code still running,
        or returned so recently that its outcome may not have been written yet."""
        if self.pid is not None and self.pid != run.pid:
            return False
        if run.started > self.at + START_SLACK:
            return False  # the run began after the fault
        return run.returned is None or self.at <= run.returned + OUTCOME_WRITE


def unexcused_reruns(runs: Iterable[Run], faults: Iterable[Fault]) -> list[Run]:
    """The runs (other than each job's last) that no fault struck while they were in progress:
    their job ran again for no reason the suite caused. ``runs`` in the order they started."""
    by_job: dict[int, list[Run]] = {}
    for run in runs:
        by_job.setdefault(run.job_id, []).append(run)
    faults = list(faults)
    return [
        run
        for job_runs in by_job.values()
        for run in job_runs[:-1]
        if not any(f.struck(run) for f in faults)
    ]


@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    log_path: Path
    mode: str

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None


@dataclass
class Fleet:
    """Worker processes of one driver mode on one schema, and what was done to them."""

    mode: str
    base_url: str  # postgresql://… of the test database
    schema: str
    logs: Path
    observer: Db  # the test session's own connection (tests/conftest.py), reconnecting
    workers: list[Worker] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    committed: set[int] = field(default_factory=set)
    client: pgqueue.Client | None = None
    # Jobs an operator ran again after they had finished (retry_job/retry_jobs of a failed,
    # cancelled or completed job): job id -> how many times. Each such retry moves a finished
    # job back to pending and adds a run, on purpose; the invariants allow exactly that many.
    operator_retries: dict[int, int] = field(default_factory=dict)

    # -- set-up ---------------------------------------------------------------------------

    def setup(self) -> None:
        """Migrate, and add the run log and the guard against finished jobs coming back."""
        # no registry: it enqueues kinds the workers do not know too, as another deploy would
        self.client = pgqueue.Client.connect(
            self.base_url, driver="psycopg", settings=self.settings
        )
        self.client.migrate()
        s = f'"{self.schema}"'
        self.observer.rows(
            f"""
            CREATE TABLE {s}.fault_runs (
                run_id bigserial PRIMARY KEY, job_id bigint NOT NULL, attempt int NOT NULL,
                pid int NOT NULL, tag text NOT NULL,
                started_at timestamptz NOT NULL DEFAULT clock_timestamp(), returned_at timestamptz
            );
            CREATE TABLE {s}.fault_violations (
                job_id bigint, old_status text, new_status text,
                at timestamptz DEFAULT clock_timestamp()
            );
            CREATE FUNCTION {s}.fault_guard() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO {s}.fault_violations (job_id, old_status, new_status)
                VALUES (OLD.id, OLD.status, NEW.status);
                RETURN NEW;
            END $$;
            CREATE TRIGGER fault_guard AFTER UPDATE ON {s}.pgqueue_jobs FOR EACH ROW
            WHEN (OLD.status IN ('completed', 'failed', 'cancelled')
                  AND NEW.status IS DISTINCT FROM OLD.status)
            EXECUTE FUNCTION {s}.fault_guard();
            """
        )

    @property
    def settings(self) -> pgqueue.Settings:
        return pgqueue.Settings(schema=self.schema)

    @property
    def jobs_table(self) -> str:
        return f'"{self.schema}".pgqueue_jobs'

    @property
    def runs_table(self) -> str:
        return f'"{self.schema}".fault_runs'

    def mode_url(self, port: int | None = None) -> str:
        """The test database's URL for this mode's driver (through ``port``, if given)."""
        scheme = MODES[self.mode][0]
        url = scheme + self.base_url[self.base_url.index("://") :]
        return url if port is None else url.replace(":5432/", f":{port}/", 1)

    # -- processes ------------------------------------------------------------------------

    def start(
        self,
        *options: str,
        queues: str = "default=4",
        port: int | None = None,
        registry: str = "tests.faults.jobs:registry",
        env: dict[str, str] | None = None,
        **settings: float,
    ) -> Worker:
        """Start a ``pgqueue worker`` process with the suite's settings (overridable).

        ``port``: reach the database through a proxy on that port (the jobs' run log does not).
        ``registry``: the registry it runs; ``env``: more environment variables (a registry
        module may read them, as ``tests/faults/periodic_jobs.py`` does).
        """
        config = {
            "poll_interval": POLL_INTERVAL,
            "heartbeat_interval": HEARTBEAT,
            "rescue_after": RESCUE_AFTER,
            "leader_interval": LEADER_INTERVAL,
            # every retry loop capped as the bounds of the cases assume
            "listener_reconnect_max": RECONNECT_MAX,
            "claim_retry_max": RECONNECT_MAX,
            "outcome_retry_max": RECONNECT_MAX,
            "shutdown_timeout": 10.0,
            **settings,
        }
        args = [f"--{name.replace('_', '-')}={value}" for name, value in config.items()]
        environment = {
            **os.environ,
            "PGQUEUE_DSN": self.mode_url(port),
            "PGQUEUE_SCHEMA": self.schema,
            "FAULT_DSN": self.base_url,
            **(env or {}),
        }
        environment.pop("PGQUEUE_DRIVER", None)
        log_path = self.logs / f"worker-{len(self.workers)}.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pgqueue",
                    "worker",
                    registry,
                    f"--driver={MODES[self.mode][1]}",
                    *(["--asyncio"] if MODES[self.mode][2] else []),
                    f"--queues={queues}",
                    *args,
                    *options,
                ],
                cwd=ROOT,
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        worker = Worker(proc, log_path, self.mode)
        self.workers.append(worker)
        return worker

    def wait_ready(self, *workers: Worker, timeout: float = 30) -> None:
        """Wait until the workers have registered (their runtime is up)."""
        pids = {w.pid for w in workers}

        def ready() -> bool:
            for w in workers:
                assert w.alive(), f"worker {w.pid} exited early:\n{w.log()}"
            rows = self.observer.rows(f'SELECT pid FROM "{self.schema}".pgqueue_instances')
            return pids <= {pid for (pid,) in rows}

        wait_for(ready, timeout, f"workers {sorted(pids)} registered")

    def fault(self, what: str, pid: int | None, fatal: bool = False) -> Fault:
        """Record a fault now (by the database's clock)."""
        fault = Fault(self.observer.value("SELECT clock_timestamp()"), what, pid, fatal)
        self.faults.append(fault)
        return fault

    def signal(self, worker: Worker, sig: signal.Signals) -> None:
        """Send ``sig`` to a worker; SIGKILL, SIGSTOP and SIGTERM count as faults to its jobs."""
        self.fault(sig.name, worker.pid, fatal=sig == signal.SIGKILL)
        worker.proc.send_signal(sig)
        if sig == signal.SIGKILL:
            worker.proc.wait(10)

    def kill_and_settle(self, worker: Worker) -> None:
        """SIGKILL a worker, then wait until its sessions are gone from the server.

        A statement the worker sent just before dying still runs (and commits) on its backend;
        only once those backends have exited does the database show what the dead worker left.
        """
        backends = self.backends(worker)
        self.signal(worker, signal.SIGKILL)
        wait_for(
            lambda: (
                not self.observer.rows(
                    "SELECT pid FROM pg_stat_activity WHERE pid = ANY($1)", (backends,)
                )
            ),
            10,
            "the killed worker's sessions gone",
        )

    def stop(self, worker: Worker, timeout: float = 30) -> None:
        """Stop a worker gracefully and check that it exited cleanly."""
        worker.proc.send_signal(signal.SIGTERM)
        self._exited_cleanly(worker, timeout)

    def _exited_cleanly(self, worker: Worker, timeout: float) -> None:
        try:
            code = worker.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker {worker.pid} ignored SIGTERM:\n{worker.log()}") from None
        assert code == 0, f"worker {worker.pid} exited with {code}:\n{worker.log()}"

    def stop_all(self) -> None:
        """Stop every live worker gracefully (checking each exit), then close the client.

        All are told at once, then waited for: ten idle workers stop in the time of one.
        """
        live = [worker for worker in self.workers if worker.alive()]
        for worker in live:
            worker.proc.send_signal(signal.SIGCONT)
            worker.proc.send_signal(signal.SIGTERM)
        for worker in live:
            self._exited_cleanly(worker, 30)
        if self.client is not None:
            self.client.close()
            self.client = None

    def kill_all(self) -> None:
        """Make sure no worker outlives its test."""
        for worker in self.workers:
            if worker.alive():
                worker.proc.kill()
                worker.proc.wait(10)
        if self.client is not None:
            self.client.close()
            self.client = None

    def backends(self, worker: Worker, *, recorders: bool = True) -> list[int]:
        """The PostgreSQL backend pids of a worker's connections: pgqueue's and, unless
        ``recorders`` is false, its jobs' recorder sessions."""
        try:
            ports = {
                c.laddr.port
                for c in psutil.Process(worker.pid).net_connections(kind="tcp")
                if c.raddr and c.raddr.port == 5432
            }
        except psutil.NoSuchProcess:
            return []
        rows = self.observer.rows(
            "SELECT pid, client_port, application_name FROM pg_stat_activity "
            "WHERE datname = current_database() AND client_port IS NOT NULL"
        )
        return [
            pid
            for pid, port, app in rows
            if port in ports and (recorders or app != jobs.RECORDER_APPLICATION_NAME)
        ]

    def max_connections(self) -> int:
        """The most sessions pgqueue may hold in a worker: its pool (10 in every mode), the
        listener and the leader's lock session. The jobs' recorder sessions are not counted:
        there is one per thread that runs jobs, however many slots the worker has."""
        return 10 + 2

    # -- jobs -----------------------------------------------------------------------------

    def add(self, n: int = 1, **fields: Any) -> list[int]:
        """Enqueue ``n`` Work jobs (committed); return their ids."""
        assert self.client is not None
        kind = fields.pop("job", jobs.Work)
        options = fields.pop("options", None)
        handles = self.client.add_jobs(
            (kind(**fields) for _ in range(n)), **({"options": options} if options else {})
        )
        ids = [h.id for h in handles]
        self.committed.update(ids)
        return ids

    def add_rolled_back(self, n: int = 3) -> None:
        """Enqueue jobs in a transaction that rolls back: they must never run."""
        assert self.client is not None
        with psycopg.connect(self.base_url) as conn:
            for _ in range(n):
                self.client.add_job_with_tx(conn, jobs.Work(tag="rolled-back"))
            conn.rollback()

    def statuses(self, ids: Iterable[int]) -> dict[int, str]:
        rows = self.observer.rows(
            f"SELECT id, status FROM {self.jobs_table} WHERE id = ANY($1)", (list(ids),)
        )
        return dict(rows)  # type: ignore[arg-type]

    def wait_final(self, ids: Iterable[int], timeout: float, what: str = "jobs finished") -> float:
        """Wait until every job in ``ids`` is finished; return the seconds it took."""
        wanted = list(ids)
        start = time.monotonic()
        for _ in deadline_loop(timeout, f"{what} ({len(wanted)} jobs)", 0.05):
            if self.observer.value(
                f"SELECT count(*) FROM {self.jobs_table} "
                "WHERE id = ANY($1) AND status IN ('completed', 'failed', 'cancelled')",
                (wanted,),
            ) == len(wanted):
                return time.monotonic() - start
        raise AssertionError("unreachable")  # pragma: no cover

    def runs(self, job_id: int) -> list[tuple[Any, ...]]:
        return self.observer.rows(
            f"SELECT attempt, pid, started_at, returned_at FROM {self.runs_table} "
            "WHERE job_id = $1 ORDER BY run_id",
            (job_id,),
        )

    # -- invariants -----------------------------------------------------------------------

    def check_invariants(self, expect: dict[int, str] | None = None) -> None:
        """Check what must hold after any fault, once the workers have stopped.

        ``expect`` maps job ids to their expected final status (default: every committed job
        ``completed``).
        """
        expected = {job_id: "completed" for job_id in self.committed}
        expected.update(expect or {})
        t = self.jobs_table
        # nothing committed is lost, and every job reached its expected end
        found = self.statuses(expected)
        missing = set(expected) - set(found)
        assert not missing, f"committed jobs lost: {sorted(missing)[:20]}"
        wrong = {i: (s, expected[i]) for i, s in found.items() if s != expected[i]}
        assert not wrong, (
            f"jobs in the wrong state (is, expected): {dict(list(wrong.items())[:20])}"
        )
        # no job is left processing
        stuck = self.observer.rows(f"SELECT id FROM {t} WHERE status = 'processing'")
        assert not stuck, f"jobs left processing: {stuck[:20]}"
        # nothing rolled back ever exists or runs
        assert not self.observer.rows(
            f"SELECT id FROM {t} WHERE payload->>'tag' = 'rolled-back'"
        ), "a rolled-back job is in the table"
        assert not self.observer.rows(
            f"SELECT job_id FROM {self.runs_table} WHERE tag = 'rolled-back'"
        ), "a rolled-back job ran"
        # no finished job ever went back to pending (or anywhere else), but by an operator's retry
        violations = self.observer.rows(f'SELECT * FROM "{self.schema}".fault_violations')
        allowed = dict(self.operator_retries)
        unexpected = []
        for row in violations:
            job_id, _old, new = row[:3]
            if new == "pending" and allowed.get(job_id, 0) > 0:
                allowed[job_id] -= 1
            else:
                unexpected.append(row)
        assert not unexpected, f"finished jobs changed state: {unexpected[:20]}"
        # each completed job's code ran to its end at least once
        unfinished = self.observer.rows(
            f"SELECT j.id FROM {t} j WHERE j.status = 'completed' AND j.kind <> 'fault.needs' "
            f"AND NOT EXISTS (SELECT 1 FROM {self.runs_table} r "
            "WHERE r.job_id = j.id AND r.returned_at IS NOT NULL)"
        )
        assert not unfinished, f"completed without a finished run: {unfinished[:20]}"
        self.check_duplicates()

    def check_duplicates(self) -> None:
        """A job may run again only if a fault struck while an earlier run was in progress
        (see :meth:`Fault.struck`), or an operator retried it (:attr:`operator_retries`)."""
        rows = self.observer.rows(
            f"SELECT job_id, pid, started_at, returned_at FROM {self.runs_table} "
            f"WHERE job_id IN (SELECT job_id FROM {self.runs_table} "
            "GROUP BY job_id HAVING count(*) > 1) ORDER BY job_id, run_id"
        )
        allowed = dict(self.operator_retries)
        bad = []
        for run in unexcused_reruns((Run(*row) for row in rows), self.faults):
            if allowed.get(run.job_id, 0) > 0:
                allowed[run.job_id] -= 1  # the operator asked for another run
            else:
                bad.append(run)
        assert not bad, (
            f"jobs ran again with no fault during the earlier run: {bad[:10]}; "
            f"faults: {self.faults}"
        )

    def check_no_leaks(self) -> None:
        """Once every worker has exited: no advisory lock held, no connection left open."""
        assert not any(w.alive() for w in self.workers)
        state: list[Any] = []

        def clean() -> bool:
            mine = [self.observer.value("SELECT pg_backend_pid()")]
            locks = self.observer.rows(
                "SELECT pid, objid FROM pg_locks WHERE locktype = 'advisory' "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
            others = self.observer.rows(
                "SELECT pid, state, query FROM pg_stat_activity "
                "WHERE datname = current_database() AND backend_type = 'client backend' "
                "AND NOT pid = ANY($1)",
                (mine,),
            )
            state[:] = [locks, others]
            return not locks and not others

        try:
            wait_for(clean, 10, "no advisory locks or connections left by the workers")
        except AssertionError:
            raise AssertionError(f"left behind (advisory locks, sessions): {state}") from None

    def check_logs(self) -> None:
        """No worker logged a traceback of its own: an error that pgqueue did not handle.

        Driver libraries log their own handled retries with tracebacks (asyncpg's pool, when it
        cannot refill while the server restarts), and pgqueue logs a failed job's attempt with
        the job's own exception; those records are allowed. Any other traceback from a pgqueue
        logger, from asyncio ("Task exception was never retrieved") or outside any record (a
        thread or the process dying) is not.
        """
        for worker in self.workers:
            for record in _LOG_RECORD.split(worker.log()):
                if "Traceback" not in record or _JOB_FAILED.match(record):
                    continue
                header = _LOG_HEADER.match(record)
                if header is None or header.group(1).startswith(("pgqueue", "asyncio", "root")):
                    raise AssertionError(f"worker {worker.pid} logged a traceback:\n{record}")


# One record of the worker's log ("2026-11-30 01:12:35,858 WARNING asyncpg.pool [...] ...").
_LOG_RECORD = re.compile(r"(?m)^(?=\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} )")
_LOG_HEADER = re.compile(r"\d{4}-\d\d-\d\d \S+ [A-Z]+ (\S+) ")
# pgqueue's record of a job's failed attempt ("... WARNING pgqueue [thread] job 7 (kind)
# attempt 1/3 failed in 0.012s: ..."), which carries the traceback of the job's exception.
_JOB_FAILED = re.compile(
    r"\d{4}-\d\d-\d\d \S+ WARNING pgqueue \[[^\]]*\] job \d+ \(.*?\) attempt \d+/\d+ failed"
)


class ModeClient:
    """The mode's own client in the test process, called synchronously.

    Asyncio modes run their ``AsyncClient`` on a private event loop, so a test reads the same
    whatever the mode: ``client.add_job(job)``.
    """

    def __init__(self, fleet: Fleet) -> None:
        import asyncio

        _, self.driver, self.is_async = MODES[fleet.mode]
        self.url = fleet.mode_url()
        self.runner = asyncio.Runner() if self.is_async else None
        self.closed = False
        if self.runner is not None:
            self.client: Any = self.runner.run(
                pgqueue.AsyncClient.connect(self.url, driver=self.driver, settings=fleet.settings)
            )
        else:
            self.client = pgqueue.Client.connect(
                self.url, driver=self.driver, settings=fleet.settings
            )

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.client, name)
        if self.runner is None:
            return method  # type: ignore[no-any-return]
        runner = self.runner
        return lambda *args, **kwargs: runner.run(method(*args, **kwargs))

    def close(self) -> None:
        """Close the client and its loop; a second call does nothing."""
        if self.closed:
            return
        self.closed = True
        if self.runner is not None:
            self.runner.run(self.client.close())
            self.runner.close()
        else:
            self.client.close()
