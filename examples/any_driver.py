"""Scenario 3: one program, unchanged, on every driver: pick it with ``$PGQUEUE_DRIVER``.

It enqueues 20 jobs, runs them with an in-process worker and prints what happened::

    PGQUEUE_DSN=postgresql://localhost/app PGQUEUE_DRIVER=asyncpg python -m examples.any_driver
    PGQUEUE_DRIVER=sqlalchemy python -m examples.any_driver --sync

The asyncio client runs on psycopg, asyncpg and SQLAlchemy; the sync one (``--sync``) on
psycopg and SQLAlchemy (asyncpg has no sync API, and says so).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import dataclass

import pgqueue

N = 20
settings = pgqueue.Settings(schema=os.environ.get("PGQUEUE_SCHEMA", "public"))


@dataclass
class Square(pgqueue.Worker):
    """A trivial job."""

    kind = "example.square"
    n: int

    def process(self, ctx: pgqueue.JobContext) -> None:
        ctx.logger.debug("%d squared is %d", self.n, self.n * self.n)


registry = pgqueue.WorkerRegistry(Square)
FAST = pgqueue.RuntimeConfig(poll_interval=0.2)


def run_sync() -> str:
    """Enqueue and run the jobs with the sync client."""
    with pgqueue.Client.connect(registry=registry, settings=settings) as client:
        client.migrate()
        ids = [h.id for h in client.add_jobs([Square(n=i) for i in range(N)])]

        def completed() -> int:  # of this run's jobs only
            return sum(1 for i in ids if (job := client.get_job(i)) and job.status == "completed")

        client.start({"default": 4}, config=FAST)
        deadline = time.monotonic() + 30
        while completed() < N and time.monotonic() < deadline:
            time.sleep(0.05)
        return f"{type(client.driver).__name__} completed={completed()}"


async def run_async() -> str:
    """Enqueue and run the jobs with the asyncio client."""
    async with await pgqueue.AsyncClient.connect(registry=registry, settings=settings) as client:
        await client.migrate()
        ids = [h.id for h in await client.add_jobs([Square(n=i) for i in range(N)])]

        async def completed() -> int:  # of this run's jobs only
            jobs = [await client.get_job(i) for i in ids]
            return sum(1 for job in jobs if job and job.status == "completed")

        await client.start({"default": 4}, config=FAST)
        deadline = time.monotonic() + 30
        while await completed() < N and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        return f"{type(client.driver).__name__} completed={await completed()}"


def main() -> int:
    """Run the example; print the driver class and how many jobs completed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sync", action="store_true", help="use the sync client")
    args = parser.parse_args()
    try:
        print(run_sync() if args.sync else asyncio.run(run_async()))
    except pgqueue.PgQueueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
