"""Waiting on conditions with deadlines (never bare sleeps), and reading the jobs table."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pgqueue._async.compat import sleep


async def wait_until(
    predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.01, what: str = ""
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what or predicate}")
        await sleep(interval)


async def wait_for_state(check: Callable[[], Any], timeout: float = 15.0, what: str = "") -> Any:
    """Like :func:`wait_until`, for a check that asks the client (a coroutine here)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what or check}")
        await sleep(0.05)


def statuses(db: Any, table: str) -> dict[str, int]:
    """How many jobs of ``table`` are in each status."""
    return dict(db.rows(f"SELECT status, count(*) FROM {table} GROUP BY status"))
