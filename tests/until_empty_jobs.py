"""Jobs of the until-empty tests (``client.run(until_empty=True)``, ``pgqueue worker
--until-empty``), in-process and in worker subprocesses.

Not generated: the sync and asyncio suites both run them. ``registry`` is what the tests and
``pgqueue worker tests.until_empty_jobs:registry`` run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pgqueue
from tests import jobs


@dataclass
class ChainStep(pgqueue.Worker):
    """Records its run, then enqueues the next step in its own queue until ``left`` is 0."""

    token: str
    url: str
    schema: str
    left: int = 0

    def process(self, ctx: pgqueue.JobContext) -> None:
        jobs.record(self.token, ctx)
        if self.left:
            settings = pgqueue.Settings(schema=self.schema)
            with pgqueue.Client.connect(self.url, settings=settings) as client:
                client.add_job(dataclasses.replace(self, left=self.left - 1), queue=ctx.queue)


registry = pgqueue.WorkerRegistry(
    jobs.Record, jobs.ARecord, jobs.AFlaky, jobs.Fail, jobs.Block, ChainStep
)
