"""Primitives that differ between the asyncio side and its generated sync twin (sync side).

The names match ``pgqueue/_async/compat.py`` one for one.
"""

from __future__ import annotations

import threading
import time
from typing import Any

__all__ = ["Event", "Lock", "gather", "sleep"]

Event = threading.Event
Lock = threading.Lock
sleep = time.sleep


def gather(*results: Any) -> list[Any]:
    """Return the already computed results (the sync twin of ``asyncio.gather``)."""
    return list(results)
