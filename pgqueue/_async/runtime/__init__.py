"""The worker runtime: claim, run, retry, heartbeat, lead, shut down.

Written once, for asyncio, in pgqueue/_async/runtime/; the runtime on threads in
pgqueue/_sync/runtime/ is generated from it. One runtime per client, started by
``client.start()``, made of parts that each own one concern:

- ``lifecycle``: ``AsyncRuntime`` builds the parts, starts them and stops them in order;
- ``fetcher``: one per queue, claiming up to the queue's free slots in one statement (and
  handing back what a claim whose reply was lost took, before the next claim);
- ``executor``: runs each claimed job in the job pool and decides how it ended;
- ``writer``: records how jobs ended in batches: a job's slot is free for the next claim as
  soon as its ``process`` returns, and one statement records many outcomes;
- ``listener``: a dedicated LISTEN session that wakes the fetchers and relays cancel
  requests, reconnecting with backoff (and re-checking the queues) when its session dies;
- ``heartbeat``: keeps this instance's row fresh, picks up missed cancel requests and warns
  about due jobs whose kind no live worker runs;
- ``leader``: whoever holds the leader advisory lock rescues the jobs of dead instances,
  removes finished jobs past retention and expires unique locks;
- ``until_empty``: in until-empty mode only, tells from what the claims found and the outcomes
  written when no job of the queues is due and none runs here, and requests the stop.

Their bookkeeping (runs in progress, the outbox, notifications, the events of a run) lives
once, for both sides, in ``pgqueue.runtime_state``; their retry delays in ``pgqueue.backoff``.
"""

from __future__ import annotations

from .lifecycle import AsyncRuntime

__all__ = ["AsyncRuntime"]
