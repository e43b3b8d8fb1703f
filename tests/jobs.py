"""Job classes used by the runtime tests, in-process and in worker subprocesses.

Not generated: the sync and asyncio suites both run these, so each runtime is tested with sync
and async ``process`` functions alike. ``RUNS[token]`` records (job id, attempt) per run.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pgqueue

RUNS: defaultdict[str, list[tuple[int, int]]] = defaultdict(list)
STARTED: defaultdict[str, threading.Event] = defaultdict(threading.Event)


def record(token: str, ctx: pgqueue.JobContext) -> None:
    RUNS[token].append((ctx.id, ctx.attempt))
    STARTED[token].set()


@dataclass
class Record(pgqueue.Worker):
    token: str
    n: int = 0

    def process(self, ctx: pgqueue.JobContext) -> None:
        record(self.token, ctx)


@dataclass
class ARecord(pgqueue.Worker):
    token: str
    n: int = 0

    async def process(self, ctx: pgqueue.JobContext) -> None:
        await asyncio.sleep(0)
        record(self.token, ctx)


@dataclass
class Fail(pgqueue.Worker):
    token: str
    message: str = "boom"

    def process(self, ctx: pgqueue.JobContext) -> None:
        record(self.token, ctx)
        raise ValueError(self.message)


@dataclass
class AFlaky(pgqueue.Worker):
    token: str
    failures: int = 1

    async def process(self, ctx: pgqueue.JobContext) -> None:
        record(self.token, ctx)
        if ctx.attempt <= self.failures:
            raise RuntimeError(f"flaky attempt {ctx.attempt}")


@dataclass
class Steer(pgqueue.Worker):
    """Ends with the outcome named by ``what`` (the first time, for "retry")."""

    token: str
    what: str = "retry"

    def process(self, ctx: pgqueue.JobContext) -> None:
        record(self.token, ctx)
        if self.what == "retry" and len(RUNS[self.token]) == 1:
            raise pgqueue.Retry(in_=timedelta(milliseconds=200))
        if self.what == "cancel":
            raise pgqueue.Cancel("not needed any more")
        if self.what == "discard":
            raise pgqueue.Discard("bad input")


@dataclass
class Block(pgqueue.Worker):
    """A sync job that runs until ``seconds`` pass or its context is signalled."""

    token: str
    seconds: float = 60.0

    def process(self, ctx: pgqueue.JobContext) -> None:
        record(self.token, ctx)
        deadline = time.monotonic() + self.seconds
        while time.monotonic() < deadline:
            if ctx.cancelled.is_set():
                raise RuntimeError("stopped on request")
            time.sleep(0.01)


@dataclass
class CancelOnStop(pgqueue.Worker):
    """Waits for its context to be signalled, then raises ``Cancel``."""

    token: str

    def process(self, ctx: pgqueue.JobContext) -> None:
        record(self.token, ctx)
        while not ctx.cancelled.wait(0.01):
            pass
        raise pgqueue.Cancel("saw the signal")


@dataclass
class Sleeper(pgqueue.Worker):
    """A sync job that ignores its context: a plain sleep."""

    token: str
    seconds: float = 60.0

    def process(self, ctx: pgqueue.JobContext) -> None:
        record(self.token, ctx)
        time.sleep(self.seconds)


@dataclass
class ABlock(pgqueue.Worker):
    """An async job that sleeps ``seconds`` (cancellation interrupts the sleep)."""

    token: str
    seconds: float = 60.0

    async def process(self, ctx: pgqueue.JobContext) -> None:
        record(self.token, ctx)
        await asyncio.sleep(self.seconds)


@dataclass
class Needs(pgqueue.Worker):
    x: int

    def process(self, ctx: pgqueue.JobContext) -> None:
        raise AssertionError("never built: the tests store payloads that do not fit")


@dataclass
class DbRecord(pgqueue.Worker):
    """Records each run in a table, from whichever process runs it (for the multi-process tests).

    Sleeps ``first_sleep`` seconds on the first attempt only (for kill-mid-job tests).
    """

    table: str
    first_sleep: float = 0.0

    def process(self, ctx: pgqueue.JobContext) -> None:
        if ctx.attempt == 1 and self.first_sleep:
            time.sleep(self.first_sleep)
        with _pool().connection() as conn:
            conn.execute(
                f"INSERT INTO {self.table} (job_id, attempt, pid) VALUES (%s, %s, %s)",
                (ctx.id, ctx.attempt, os.getpid()),
            )


@dataclass
class ReturnOnCancel(pgqueue.Worker):
    """A sync job that returns normally (does not raise) once its context is signalled."""

    token: str

    def process(self, ctx: pgqueue.JobContext) -> None:
        record(self.token, ctx)
        ctx.cancelled.wait(60)


# Concurrency seen by the Overlap jobs of each token: how many run now, and the most at once.
ACTIVE: defaultdict[str, int] = defaultdict(int)
PEAK: defaultdict[str, int] = defaultdict(int)
_ACTIVE_LOCK = threading.Lock()


def _enter(token: str) -> None:
    with _ACTIVE_LOCK:
        ACTIVE[token] += 1
        PEAK[token] = max(PEAK[token], ACTIVE[token])


def _leave(token: str) -> None:
    with _ACTIVE_LOCK:
        ACTIVE[token] -= 1


@dataclass
class Overlap(pgqueue.Worker):
    """A sync job that holds its slot for ``seconds``, counting how many run at once."""

    token: str
    seconds: float = 0.1

    def process(self, ctx: pgqueue.JobContext) -> None:
        _enter(self.token)
        try:
            time.sleep(self.seconds)
        finally:
            _leave(self.token)
        record(self.token, ctx)


@dataclass
class AOverlap(pgqueue.Worker):
    """The async twin of :class:`Overlap`."""

    token: str
    seconds: float = 0.1

    async def process(self, ctx: pgqueue.JobContext) -> None:
        _enter(self.token)
        try:
            await asyncio.sleep(self.seconds)
        finally:
            _leave(self.token)
        record(self.token, ctx)


@dataclass
class Interrupt(pgqueue.Worker):
    """Raises a ``BaseException`` on its first attempt (``SystemExit(code)`` or
    ``KeyboardInterrupt``); later attempts succeed. For the worker-process tests."""

    what: str = "exit"
    code: int = 3

    def process(self, ctx: pgqueue.JobContext) -> None:
        if ctx.attempt == 1:
            if self.what == "exit":
                raise SystemExit(self.code)
            raise KeyboardInterrupt


@dataclass
class AInterrupt(pgqueue.Worker):
    """The async twin of :class:`Interrupt`."""

    what: str = "exit"
    code: int = 3

    async def process(self, ctx: pgqueue.JobContext) -> None:
        await asyncio.sleep(0)
        if ctx.attempt == 1:
            if self.what == "exit":
                raise SystemExit(self.code)
            raise KeyboardInterrupt


_POOL: Any = None
_POOL_LOCK = threading.Lock()


def _pool() -> Any:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            from psycopg_pool import ConnectionPool

            _POOL = ConnectionPool(os.environ["PGQUEUE_DSN"], min_size=1, max_size=10)
        return _POOL


registry = pgqueue.WorkerRegistry(
    Record, ARecord, Fail, AFlaky, Steer, Block, CancelOnStop, Sleeper, ABlock, Needs, DbRecord
)
registry.register(ReturnOnCancel)
registry.register(Overlap)
registry.register(AOverlap)
registry.register(Interrupt)
registry.register(AInterrupt)
