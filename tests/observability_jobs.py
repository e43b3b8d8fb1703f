"""The registry of the observability tests' worker processes: tests.jobs' classes plus a
periodic entry, so that ``/metrics`` has a last tick to show.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pgqueue
from tests import jobs


@dataclass
class Tick(pgqueue.Worker):
    """The periodic entry's job: does nothing."""

    n: int = 0

    def process(self, ctx: pgqueue.JobContext) -> None:
        return None


registry = pgqueue.WorkerRegistry(jobs.Record, jobs.Fail, jobs.Sleeper)
registry.schedule(
    pgqueue.Periodic(
        "every-second",
        Tick(),
        every=timedelta(seconds=1),
        options=pgqueue.JobOptions(queue="ticks"),
    )
)
