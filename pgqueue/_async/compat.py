"""Primitives that differ between the asyncio side and its generated sync twin.

Generated modules import these names from ``.compat``; the sync side's ``compat.py`` binds the
same names to their threading equivalents, with the same call shapes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from concurrent.futures import Future
from typing import Any

from .._sync.compat import JobPool as _ThreadPool
from ..execution import ProcessStopped, ProcessTimeout, is_coroutine_function

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


async def call_process(
    pool: JobPool,
    fn: Callable[..., Any],
    arg: Any,
    timeout: float | None,
    started: Callable[[Any], None],
) -> None:
    """Run a job's ``process`` (``fn(arg)``): a coroutine on this task, a sync one in a thread.

    ``started`` receives the task to cancel to cut the job off (and ``None`` once ``process``
    is over, so that a late cut-off cannot hit what follows). Raises :class:`ProcessTimeout`
    after ``timeout`` seconds, :class:`ProcessStopped` when cut off, or whatever ``process``
    raised.
    """
    # The coroutine runs on the calling task rather than a task of its own: one task and one
    # wait fewer per job, which is most of the runtime's own cost for a short job.
    task = asyncio.current_task()
    if is_coroutine_function(fn):
        work: Awaitable[Any] = fn(arg)
    elif timeout is None:
        work = pool.run_sync(fn, arg)
    else:
        # a thread of its own: if it overruns it is abandoned without holding a pool thread
        work = asyncio.wrap_future(_in_own_thread(fn, arg))
    started(task)
    try:
        if timeout is None:
            await work
        else:
            scope = asyncio.timeout(timeout)
            try:
                async with scope:
                    await work
            except TimeoutError:
                if scope.expired():
                    raise ProcessTimeout from None
                raise
    except asyncio.CancelledError:
        # Cut off by the runtime (or the job cancelled itself): the task carries on to record
        # the outcome, so the cancellation request is withdrawn.
        if task is not None and task.cancelling():
            task.uncancel()
        raise ProcessStopped from None
    finally:
        started(None)
