"""Job kinds that the fault suite's worker processes run.

Every run is recorded in the test schema's ``fault_runs`` table, over a connection of its own
(not pgqueue's), when ``process`` starts and again when it returns. Those rows are the ground
truth the invariants are checked against: which job ran, how often, in which process, and
whether its code had finished when a fault struck.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import psycopg

import pgqueue

_local = threading.local()

# The recorder's sessions are the test's, not pgqueue's: the harness tells them apart by this
# name when it counts the sessions a worker holds.
RECORDER_APPLICATION_NAME = "pgqueue-fault-recorder"


def _connection() -> psycopg.Connection[Any]:
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed or conn.broken:
        conn = psycopg.connect(
            os.environ["FAULT_DSN"],
            autocommit=True,
            connect_timeout=5,
            application_name=RECORDER_APPLICATION_NAME,
        )
        _local.conn = conn
    return conn


def _record(statement: str, params: tuple[Any, ...]) -> Any:
    # The recorder must survive the faults it observes (killed backends, a restarting server):
    # it reconnects and tries again for a while, and only then fails the job.
    schema = os.environ["PGQUEUE_SCHEMA"]
    deadline = time.monotonic() + 20
    while True:
        try:
            with _connection().cursor() as cur:
                cur.execute(statement.replace("{schema}", f'"{schema}"'), params)
                return cur.fetchone()[0] if cur.description else None
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def record_start(ctx: pgqueue.JobContext, tag: str) -> int:
    """Note that this process started ``ctx``'s job; return the run's id."""
    return int(
        _record(
            "INSERT INTO {schema}.fault_runs (job_id, attempt, pid, tag) "
            "VALUES (%s, %s, %s, %s) RETURNING run_id",
            (ctx.id, ctx.attempt, os.getpid(), tag),
        )
    )


def record_return(run_id: int) -> None:
    """Note that the run's ``process`` is about to return."""
    _record(
        "UPDATE {schema}.fault_runs SET returned_at = clock_timestamp() WHERE run_id = %s",
        (run_id,),
    )


@dataclass
class Work(pgqueue.Worker):
    """A sync job: records its run, then sleeps, spins (holding the GIL) or kills its process."""

    kind = "fault.work"
    tag: str = ""
    sleep: float = 0.0
    spin: float = 0.0
    # os._exit() on attempts up to this one (the process dies mid-job, as in a segfault)
    exit_until_attempt: int = 0
    # extra sleep on the first attempt (still running when the test gets round to faulting it)
    first_sleep: float = 0.0
    blob: str = ""
    # raise (after recording that the run returned) on attempts up to this one
    fail_until_attempt: int = 0

    def process(self, ctx: pgqueue.JobContext) -> None:
        run_id = record_start(ctx, self.tag)
        if ctx.attempt <= self.exit_until_attempt:
            os._exit(7)
        if ctx.attempt <= self.fail_until_attempt:
            record_return(run_id)
            raise RuntimeError(f"fault.work fails attempt {ctx.attempt} on purpose")
        sleep = self.sleep + (self.first_sleep if ctx.attempt == 1 else 0.0)
        if sleep:
            time.sleep(sleep)
        deadline = time.monotonic() + self.spin
        while time.monotonic() < deadline:
            sum(range(1000))  # pure Python, so the GIL is held and released only by the VM
        record_return(run_id)


# Async jobs record their runs on these threads (blocking calls, kept off the event loop). One
# executor for every loop: the sync runtime runs each coroutine job on a loop of its own, and
# a loop's default executor would start new threads, with new connections, for every job.
_RECORDERS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="fault-recorder")


async def _off_loop(fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(_RECORDERS, fn, *args)


@dataclass
class AsyncWork(pgqueue.Worker):
    """An async job: records its run (off the loop) and sleeps on the event loop."""

    kind = "fault.async_work"
    tag: str = ""
    sleep: float = 0.0

    async def process(self, ctx: pgqueue.JobContext) -> None:
        run_id = await _off_loop(record_start, ctx, self.tag)
        if self.sleep:
            await asyncio.sleep(self.sleep)
        await _off_loop(record_return, run_id)


@dataclass
class AsyncStubborn(pgqueue.Worker):
    """An async job that ignores its context: it sleeps on the loop until it is cancelled."""

    kind = "fault.async_stubborn"
    seconds: float = 600.0

    async def process(self, ctx: pgqueue.JobContext) -> None:
        run_id = await _off_loop(record_start, ctx, "async stubborn")
        await asyncio.sleep(self.seconds)
        await _off_loop(record_return, run_id)


@dataclass
class Stubborn(pgqueue.Worker):
    """A sync job that ignores its context (a plain long sleep), for the shutdown cases."""

    kind = "fault.stubborn"
    seconds: float = 600.0

    def process(self, ctx: pgqueue.JobContext) -> None:
        run_id = record_start(ctx, "stubborn")
        time.sleep(self.seconds)
        record_return(run_id)


@dataclass
class Needs(pgqueue.Worker):
    """Has a required field: a stored payload without it cannot build this class."""

    kind = "fault.needs"
    x: int

    def process(self, ctx: pgqueue.JobContext) -> None:
        record_return(record_start(ctx, "needs"))


registry = pgqueue.WorkerRegistry(Work, AsyncWork, Stubborn, AsyncStubborn, Needs)
