"""The paired primitives behave alike on both sides."""

from __future__ import annotations

import pytest

from pgqueue._async.compat import Event, join, sleep, spawn

pytestmark = pytest.mark.timeout(30)


async def test_spawn_runs_concurrently_and_join_waits() -> None:
    started = Event()
    release = Event()
    done: list[int] = []

    async def work(n: int) -> None:
        started.set()
        await release.wait()
        done.append(n)

    task = spawn(work, 7, name="pgqueue-test")
    await started.wait()
    assert not await join(task, timeout=0.05)  # blocked on release: join times out
    assert done == []
    release.set()
    assert await join(task, timeout=10)
    assert done == [7]


async def test_sleep_and_event_timeouts() -> None:
    event = Event()
    await sleep(0.01)
    assert not event.is_set()
    event.set()
    assert event.is_set()
