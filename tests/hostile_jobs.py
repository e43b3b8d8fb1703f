"""Job classes whose data or behaviour is hostile to the runtime (issue: a worker must never wedge).

Not generated: both suites run the sync and the ``async def`` variants. ``RUNS[token]`` counts
the runs of each job; ``ENDED[token]`` is set when a job that outlives its timeout returns;
setting ``RELEASE[token]`` lets it return before its time is up.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import defaultdict
from dataclasses import dataclass

import pgqueue

RUNS: defaultdict[str, list[tuple[int, int]]] = defaultdict(list)
ENDED: defaultdict[str, threading.Event] = defaultdict(threading.Event)
RELEASE: defaultdict[str, threading.Event] = defaultdict(threading.Event)


class UnprintableError(Exception):
    """An exception whose ``str()`` (and ``repr()``) raise."""

    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    def __repr__(self) -> str:
        raise RuntimeError("no repr either")


@dataclass
class RaiseText(pgqueue.Worker):
    """Fails with ``text`` as the message of a RuntimeError."""

    token: str
    text: str

    def process(self, ctx: pgqueue.JobContext) -> None:
        RUNS[self.token].append((ctx.id, ctx.attempt))
        raise RuntimeError(self.text.replace("<NUL>", "\x00").replace("<SURROGATE>", "\ud800"))


@dataclass
class ARaiseText(pgqueue.Worker):
    """``RaiseText`` as a coroutine."""

    token: str
    text: str

    async def process(self, ctx: pgqueue.JobContext) -> None:
        await asyncio.sleep(0)
        RUNS[self.token].append((ctx.id, ctx.attempt))
        raise RuntimeError(self.text.replace("<NUL>", "\x00").replace("<SURROGATE>", "\ud800"))


@dataclass
class RaiseUnprintable(pgqueue.Worker):
    """Fails with an exception whose ``str()`` raises."""

    token: str

    def process(self, ctx: pgqueue.JobContext) -> None:
        RUNS[self.token].append((ctx.id, ctx.attempt))
        raise UnprintableError


@dataclass
class ARaiseUnprintable(pgqueue.Worker):
    """``RaiseUnprintable`` as a coroutine."""

    token: str

    async def process(self, ctx: pgqueue.JobContext) -> None:
        await asyncio.sleep(0)
        RUNS[self.token].append((ctx.id, ctx.attempt))
        raise UnprintableError


@dataclass
class SwallowCancel(pgqueue.Worker):
    """A coroutine that ignores cancellation and returns after ``seconds`` (or once released)."""

    token: str
    seconds: float

    async def process(self, ctx: pgqueue.JobContext) -> None:
        RUNS[self.token].append((ctx.id, ctx.attempt))
        deadline = time.monotonic() + self.seconds
        released = RELEASE[self.token]
        while not released.is_set() and (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(asyncio.CancelledError):  # the hostile part
                await asyncio.sleep(min(left, 0.05))
        ENDED[self.token].set()


@dataclass
class Sleep(pgqueue.Worker):
    """Sleeps ``seconds`` (a sync job), then succeeds."""

    token: str
    seconds: float = 0.0

    def process(self, ctx: pgqueue.JobContext) -> None:
        RUNS[self.token].append((ctx.id, ctx.attempt))
        time.sleep(self.seconds)


registry = pgqueue.WorkerRegistry(
    RaiseText, ARaiseText, RaiseUnprintable, ARaiseUnprintable, SwallowCancel, Sleep
)
