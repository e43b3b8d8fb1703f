"""Primitives that differ between the asyncio side and its generated sync twin.

Generated modules import these names from ``.compat``; the sync side's ``compat.py`` binds the
same names to their threading equivalents, with the same call shapes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterable
from concurrent.futures import Future
from typing import Any

from .._sync.compat import JobPool as _ThreadPool
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

Event = asyncio.Event
Lock = asyncio.Lock
Task = asyncio.Task
sleep = asyncio.sleep
gather = asyncio.gather


def spawn(
    fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any, name: str | None = None
) -> Task[Any]:
    """Start ``fn(*args)`` concurrently (a task here, a daemon thread on the sync side)."""
    return asyncio.create_task(fn(*args), name=name)


async def join(task: Task[Any], timeout: float | None = None) -> bool:
    """Wait up to ``timeout`` seconds for ``task`` to finish; return True if it did."""
    done, _ = await asyncio.wait({task}, timeout=timeout)
    return task in done


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait up to ``timeout`` seconds for ``event``; return whether it is set."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        pass
    return event.is_set()


async def wait_all(handles: Iterable[Any], timeout: float | None) -> None:
    """Wait up to ``timeout`` seconds for every job handle from :meth:`JobPool.submit`."""
    pending = set(handles)
    if pending:
        await asyncio.wait(pending, timeout=timeout)


class JobPool:
    """Where jobs run: tasks on the event loop; sync ``process`` calls in daemon threads.

    Daemon threads, so that a sync job stuck past ``stop()`` never holds up interpreter exit.
    """

    def __init__(self, size: int, name: str = "pgqueue-job") -> None:
        self._threads = _ThreadPool(size, name)

    def submit(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> Task[Any]:
        """Start running ``fn(*args)``; return a handle for :func:`wait_all`."""
        return asyncio.create_task(fn(*args))

    async def run_sync(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run blocking ``fn(*args)`` in the pool's threads."""
        return await asyncio.wrap_future(self._threads.submit(fn, *args))

    def shutdown(self) -> None:
        """Stop the threads once idle; a thread still in a job finishes it first."""
        self._threads.shutdown()


def _in_own_thread(fn: Callable[..., Any], arg: Any) -> Future[Any]:
    future: Future[Any] = Future()

    def target() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn(arg))
        except BaseException as exc:  # handed to the awaiting side
            future.set_exception(exc)

    threading.Thread(target=target, name="pgqueue-timed-job", daemon=True).start()
    return future


def _consume(future: asyncio.Future[Any] | Future[Any]) -> None:
    # Read a finished run's exception, which nobody awaits, so asyncio does not log it as
    # "never retrieved".
    if not future.cancelled():
        future.exception()


def _report_stuck(future: asyncio.Future[Any] | Future[Any], end: Callable[[], None]) -> None:
    """Call ``end`` once the stuck run behind ``future`` finishes (from its thread, maybe)."""

    def done(finished: Any) -> None:
        _consume(finished)
        end()

    future.add_done_callback(done)


async def call_process(
    pool: JobPool,
    running: Running,
    fn: Callable[..., Any],
    arg: Any,
    stuck: StuckRuns,
) -> None:
    """Run a job's ``process`` (``fn(arg)``): a coroutine on this task, a sync one in a thread.

    While it runs, ``running.inner`` is what to cancel to cut it off. Raises
    :class:`ProcessStopped` when cut off, :class:`ProcessTimeout` once the job's timeout has
    passed (whatever ``process`` does after that), or whatever ``process`` raised.
    """
    timeout = running.job.timeout
    if timeout is None:
        # The coroutine runs on the calling task rather than a task of its own: one task and
        # one wait fewer per job, which is most of the runtime's own cost for a short job.
        task = asyncio.current_task()
        work = fn(arg) if is_coroutine_function(fn) else pool.run_sync(fn, arg)
        running.inner = task
        try:
            await work
        except asyncio.CancelledError:
            # Cut off by the runtime (or the job cancelled itself): the task carries on to
            # record the outcome, so the cancellation request is withdrawn.
            if task is not None and task.cancelling():
                task.uncancel()
            raise ProcessStopped from None
        finally:
            running.inner = None
        return
    # With a timeout the work runs apart from this task (a task, or a thread of its own), so
    # that an overrun frees the job's slot even when its code ignores the cancellation.
    thread: Future[Any] | None = None
    if is_coroutine_function(fn):
        inner: asyncio.Future[Any] = asyncio.ensure_future(fn(arg))
    else:
        thread = _in_own_thread(fn, arg)
        inner = asyncio.wrap_future(thread)
    running.inner = inner
    try:
        await asyncio.wait({inner}, timeout=timeout)
        if not inner.done():
            signal_stop(running, "timeout")
            if thread is None:
                # a coroutine gets a moment to unwind from its CancelledError
                await asyncio.wait({inner}, timeout=OVERRUN_GRACE)
            if thread is not None and not thread.done():
                _report_stuck(thread, stuck.add(running.job))
            elif thread is None and not inner.done():
                _report_stuck(inner, stuck.add(running.job))
            if inner.done():
                _consume(inner)
            raise ProcessTimeout
    except asyncio.CancelledError:
        # this task itself was cancelled (not the runtime's way): take the job's run with it
        inner.cancel()
        raise
    finally:
        running.inner = None
    if inner.cancelled():
        raise ProcessStopped
    inner.result()  # raises what process() raised
