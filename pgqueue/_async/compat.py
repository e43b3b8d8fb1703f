"""Primitives that differ between the asyncio side and its generated sync twin.

Generated modules import these names from ``.compat``; the sync side's ``compat.py`` binds the
same names to their threading equivalents, with the same call shapes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["Event", "Lock", "Task", "gather", "join", "sleep", "spawn"]

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
