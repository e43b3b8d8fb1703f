"""Primitives that differ between the asyncio side and its generated sync twin.

Generated modules import these names from ``.compat``; the sync side's ``compat.py`` binds the
same names to their threading equivalents.
"""

from __future__ import annotations

import asyncio

__all__ = ["Event", "Lock", "gather", "sleep"]

Event = asyncio.Event
Lock = asyncio.Lock
sleep = asyncio.sleep
gather = asyncio.gather
