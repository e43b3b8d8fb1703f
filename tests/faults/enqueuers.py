"""An enqueuing process for the fault suite: N concurrent ``add_job`` callers in one driver mode.

``python -m tests.faults.enqueuers MODE N OUT``: threads (sync modes) or tasks (asyncio
modes) all released at once; writes the ids of the jobs whose ``add_job`` returned to ``OUT``
as JSON, and exits 1 if any call failed.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from typing import Any

import pgqueue
from tests.faults.harness import MODES
from tests.faults.jobs import Work


def _url(mode: str) -> str:
    base = os.environ["FAULT_DSN"]
    return MODES[mode][0] + base[base.index("://") :]


def run_sync(mode: str, n: int, settings: pgqueue.Settings) -> list[int]:
    ids: list[int] = []
    errors: list[BaseException] = []
    gate = threading.Barrier(n)
    with pgqueue.Client.connect(_url(mode), driver=MODES[mode][1], settings=settings) as client:

        def one(i: int) -> None:
            gate.wait()
            try:
                ids.append(client.add_job(Work(tag=f"enqueuer {os.getpid()}/{i}")).id)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    return ids


async def run_async(mode: str, n: int, settings: pgqueue.Settings) -> list[int]:
    gate = asyncio.Event()
    client = await pgqueue.AsyncClient.connect(_url(mode), driver=MODES[mode][1], settings=settings)
    async with client:

        async def one(i: int) -> int:
            await gate.wait()
            handle: Any = await client.add_job(Work(tag=f"enqueuer {os.getpid()}/{i}"))
            return int(handle.id)

        tasks = [asyncio.create_task(one(i)) for i in range(n)]
        await asyncio.sleep(0)
        gate.set()
        return list(await asyncio.gather(*tasks))


def main() -> int:
    mode, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    settings = pgqueue.Settings(schema=os.environ["PGQUEUE_SCHEMA"])
    if MODES[mode][2]:
        ids = asyncio.run(run_async(mode, n, settings))
    else:
        ids = run_sync(mode, n, settings)
    with open(out, "w") as f:
        json.dump(ids, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
