"""Primitives that differ between the asyncio side and its generated sync twin (sync side).

The names and call shapes match ``pgqueue/_async/compat.py`` one for one.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import wait as _wait_futures
from typing import Any

from ..execution import (
    OVERRUN_GRACE,
    ProcessStopped,
    ProcessTimeout,
    Running,
    StuckRuns,
    is_coroutine_function,
    signal_stop,
)

__all__ = [
    "Event",
    "JobPool",
    "Lock",
    "Task",
    "call_process",
    "gather",
    "join",
    "sleep",
    "spawn",
    "wait_all",
    "wait_event",
]

Event = threading.Event
Lock = threading.Lock
Task = threading.Thread
sleep = time.sleep


def gather(*results: Any) -> list[Any]:
    """Return the already computed results (the sync twin of ``asyncio.gather``)."""
    return list(results)


def spawn(fn: Callable[..., Any], *args: Any, name: str | None = None) -> Task:
    """Start ``fn(*args)`` in a daemon thread and return the thread."""
    thread = threading.Thread(target=fn, args=args, name=name, daemon=True)
    thread.start()
    return thread


def join(task: Task, timeout: float | None = None) -> bool:
    """Wait up to ``timeout`` seconds for ``task`` to finish; return True if it did."""
    task.join(timeout)
    return not task.is_alive()


def wait_event(event: threading.Event, timeout: float | None) -> bool:
    """Wait up to ``timeout`` seconds for ``event``; return whether it is set."""
    return event.wait(timeout)


def wait_all(handles: Iterable[Any], timeout: float | None) -> None:
    """Wait up to ``timeout`` seconds for every job handle from :meth:`JobPool.submit`."""
    pending = list(handles)
    if pending:
        _wait_futures(pending, timeout)


class JobPool:
    """Where jobs run: a fixed set of daemon threads.

    Daemon threads (unlike ``ThreadPoolExecutor``'s) never hold up interpreter exit, so a job
    stuck past ``stop()`` cannot keep the process alive.
    """

    def __init__(self, size: int, name: str = "pgqueue-job") -> None:
        self._queue: queue.SimpleQueue[
            tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None
        ]
        self._queue = queue.SimpleQueue()
        self._threads = [spawn(self._work, name=f"{name}-{i}") for i in range(size)]

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args)
            except BaseException as exc:  # handed to whoever waits on the future
                future.set_exception(exc)
            else:
                future.set_result(result)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Queue ``fn(*args)`` for a pool thread; return a handle for :func:`wait_all`."""
        future: Future[Any] = Future()
        self._queue.put((future, fn, args))
        return future

    def run_sync(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` here: sync code already runs on a pool thread."""
        return fn(*args)

    def shutdown(self) -> None:
        """Stop the threads once they are idle; a thread still in a job finishes it first."""
        for _ in self._threads:
            self._queue.put(None)


async def _run_cancellable(fn: Callable[..., Any], ctx: Any) -> None:
    # A coroutine job in a thread of its own loop: cancel it when its context is signalled,
    # as the asyncio runtime would.
    task = asyncio.ensure_future(fn(ctx))
    while not task.done():
        await asyncio.wait({task}, timeout=0.05)
        if not task.done() and ctx.cancelled.is_set():
            task.cancel()
            await asyncio.wait({task})
    if task.cancelled():
        raise ProcessStopped
    task.result()


def call_process(
    pool: JobPool,
    running: Running,
    fn: Callable[..., Any],
    arg: Any,
    stuck: StuckRuns,
) -> None:
    """Run a job's ``process`` (``fn(arg)``) on this thread; a coroutine gets its own loop.

    With a timeout, the call runs in a helper thread that is abandoned (its job's context
    signalled; a coroutine first gets ``OVERRUN_GRACE`` to unwind) when it overruns:
    :class:`ProcessTimeout` is raised, whatever ``process`` does after that.
    """
    timeout = running.job.timeout
    coroutine = is_coroutine_function(fn)

    def target() -> None:
        if coroutine:
            asyncio.run(_run_cancellable(fn, arg))
        else:
            fn(arg)

    if timeout is None:
        target()
        return
    failure: list[BaseException] = []
    lock = threading.Lock()
    ended = False
    on_end: Callable[[], None] | None = None

    def guarded() -> None:
        nonlocal ended
        try:
            target()
        except BaseException as exc:
            failure.append(exc)
        finally:
            with lock:
                ended = True
                end = on_end
            if end is not None:
                end()

    helper = spawn(guarded, name=f"{threading.current_thread().name}-timed")
    helper.join(timeout)
    if helper.is_alive():
        signal_stop(running, "timeout")
        if coroutine:
            helper.join(OVERRUN_GRACE)
        with lock:
            if not ended:
                on_end = stuck.add(running.job)
        raise ProcessTimeout
    if failure:
        raise failure[0]
