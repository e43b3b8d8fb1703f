"""Periodic entries for the fault suite's worker processes, chosen by an environment variable.

``$FAULT_PERIODIC`` holds a JSON list of entries, each an object with ``name`` and ``every``
(seconds), and optionally ``backfill`` (seconds), ``queue`` and ``label`` (an argument of the
job, so a test can tell which declaration enqueued it)::

    [{"name": "p.tick", "every": 1, "backfill": 30, "queue": "default", "label": "a"}]

Each becomes a :class:`~pgqueue.Periodic` of :class:`Tick` in :data:`registry`. One module thus
gives every process of a test the schedule that test wants, as two deploys of one application
would. Without the variable the registry schedules nothing and does not know the
``fault.periodic`` kind at all (a worker of a deploy without the entry).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import timedelta

import pgqueue
from tests.faults import jobs

ENV = "FAULT_PERIODIC"


@dataclass
class Tick(pgqueue.Worker):
    """A periodic job: records its run in ``fault_runs``, tagged ``entry|tick|label``.

    The tag comes from ``ctx.periodic`` and ``ctx.tick``, so the run log also shows that each
    job knows the tick that enqueued it.
    """

    kind = "fault.periodic"
    label: str = ""

    def process(self, ctx: pgqueue.JobContext) -> None:
        tick = ctx.tick.isoformat() if ctx.tick is not None else ""
        jobs.record_return(jobs.record_start(ctx, f"{ctx.periodic}|{tick}|{self.label}"))


def entry(spec: dict[str, object]) -> pgqueue.Periodic:
    """Build one entry from its JSON object (see the module's docstring)."""
    backfill = spec.get("backfill")
    return pgqueue.Periodic(
        name=str(spec["name"]),
        job=Tick(label=str(spec.get("label", ""))),
        every=timedelta(seconds=float(str(spec["every"]))),
        backfill=None if backfill is None else timedelta(seconds=float(str(backfill))),
        options=pgqueue.JobOptions(queue=str(spec.get("queue", "default"))),
    )


def build_registry(text: str | None) -> pgqueue.WorkerRegistry:
    """The suite's sync job kind, plus the entries ``text`` (``$FAULT_PERIODIC``) lists."""
    registry = pgqueue.WorkerRegistry(jobs.Work)
    for spec in json.loads(text or "[]"):
        registry.schedule(entry(spec))
    return registry


registry = build_registry(os.environ.get(ENV))
"""The registry ``pgqueue worker tests.faults.periodic_jobs:registry`` runs."""


def environment(*specs: dict[str, object]) -> dict[str, str]:
    """The environment that makes a worker process schedule ``specs``."""
    return {ENV: json.dumps(list(specs))}
