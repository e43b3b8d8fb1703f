"""Primitives that differ between the asyncio side and its generated sync twin (sync side).

The names and call shapes match ``pgqueue/_async/compat.py`` one for one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Event", "Lock", "Task", "gather", "join", "sleep", "spawn"]

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
