"""The outcome writer: records how jobs ended, in batches, retrying while the database fails.

A job's slot is free for the next claim as soon as its ``process`` returns: its outcome goes to
the :class:`~pgqueue.runtime_state.Outbox`, and this writer records many outcomes in one
statement. It owns no other state and never decides an outcome, except the plain failure that
replaces one the database refuses. It counts the runs whose outcome it recorded (what
``client.run()`` returns) and, in until-empty mode, tells the
:class:`~.until_empty.EmptyWatch` which outcomes it is done with.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ...backoff import Backoff
from ...execution import ClaimedJob, Outcome, is_data_refusal, outcome_unrecordable
from ...runtime_config import RuntimeConfig
from ...runtime_state import Outbox
from ..compat import Event, wait_event
from ..store import AsyncStore
from .until_empty import EmptyWatch

__all__ = ["AsyncOutcomeWriter"]

logger = logging.getLogger("pgqueue")

# Most outcomes one job_finish_many statement records.
FLUSH_MAX = 1000
# First pause before retrying a failed write (doubling up to outcome_retry_max).
_RETRY_FIRST = 0.1

_Batch = list[tuple[ClaimedJob, Outcome]]


class AsyncOutcomeWriter:
    """Writes the outcomes put in its outbox until :meth:`close`, then once more."""

    def __init__(
        self, store: AsyncStore, config: RuntimeConfig, watch: EmptyWatch | None = None
    ) -> None:
        self._store = store
        self._watch = watch  # until-empty mode only
        self.outbox = Outbox()
        self.recorded = 0
        """How many runs' outcomes it recorded, hand-backs (``release``) left out."""
        self._wake = Event()
        self._final = Event()
        self._backoff = Backoff(_RETRY_FIRST, config.outcome_retry_max, jitter=0.2)

    def put(self, job: ClaimedJob, outcome: Outcome) -> None:
        """Queue ``job``'s outcome (never blocks: called as a job ends, from its thread)."""
        self.outbox.add(job, outcome)
        self._wake.set()

    def close(self) -> None:
        """Ask :meth:`run` to write what is queued (one try if the database fails) and return."""
        self._final.set()
        self._wake.set()

    @property
    def unrecorded(self) -> int:
        """How many outcomes wait to be written (after :meth:`run` returned: were never)."""
        return len(self.outbox)

    async def run(self) -> None:
        """Write outcomes as they come, until closed."""
        # Outcomes are written as soon as the writer is free: while one statement is in
        # flight, the outcomes of jobs that end meanwhile gather for the next. A failed write
        # is retried with backoff; the jobs stay ours meanwhile (the heartbeat goes on).
        while True:
            self._wake.clear()
            if self.outbox:
                if await self._write_batch():
                    self._backoff.reset()
                    continue
                if self._final.is_set():
                    return
                await wait_event(self._final, self._backoff.next())
                continue
            if self._final.is_set():
                return
            await wait_event(self._wake, None)

    async def _write_batch(self) -> bool:
        """Write up to FLUSH_MAX outcomes in one statement; False (and kept) if it failed.

        When the database refuses the batch for what one outcome carries, the outcomes are
        written one by one, and one that is refused on its own is replaced by a plain failure:
        one job's bad outcome never holds back the others'.
        """
        batch = self.outbox.take(FLUSH_MAX)
        try:
            written = await self._store.job_finish_many(batch)
        except Exception as exc:
            if is_data_refusal(exc):
                if len(batch) > 1:
                    logger.warning(
                        "the database refused a batch of %d job outcomes (%s); writing them "
                        "one by one",
                        len(batch),
                        exc,
                    )
                return await self._write_singly(batch)
            logger.warning("could not record how %d job(s) ended (%s); will retry", len(batch), exc)
            self.outbox.put_back(batch)
            return False
        self._done(batch, written)
        return True

    async def _write_singly(self, batch: _Batch) -> bool:
        """Write outcomes one statement each; False (the rest kept) on a passing failure."""
        for i, (job, outcome) in enumerate(batch):
            item = [(job, outcome)]
            try:
                written = await self._store.job_finish_many(item)
            except Exception as exc:
                if not is_data_refusal(exc):
                    logger.warning(
                        "could not record how %d job(s) ended (%s); will retry",
                        len(batch) - i,
                        exc,
                    )
                    self.outbox.put_back(batch[i:])
                    return False
                logger.error(
                    "job %s (%s): the database refused its outcome (%s): %s; recording it as "
                    "failed instead",
                    job.id,
                    job.kind,
                    outcome.action,
                    exc,
                )
                item = [(job, outcome_unrecordable(job, exc))]
                try:
                    written = await self._store.job_finish_many(item)
                except Exception as again:
                    if not is_data_refusal(again):
                        self.outbox.put_back([item[0], *batch[i + 1 :]])
                        return False
                    logger.error(
                        "job %s: not even its failure could be recorded (%s); it stays "
                        "'processing' until this process stops and its jobs are rescued",
                        job.id,
                        again,
                    )
                    if self._watch is not None:  # given up on: done with all the same
                        self._watch.outcomes_written(1)
                    continue
            self._done(item, written)
        return True

    def _done(self, batch: Sequence[tuple[ClaimedJob, Outcome]], written: set[int]) -> None:
        """Count what a write of ``batch`` recorded (the ids ``written``) and log the rest."""
        recorded = len(written)
        if recorded < len(batch):
            for job, outcome in batch:
                if job.id not in written:
                    logger.info(
                        "job %s: no longer ours (rescued, cancelled or handed back meanwhile); "
                        "its %s was not recorded",
                        job.id,
                        outcome.action,
                    )
        for job, outcome in batch:
            if outcome.action == "release" and job.id in written:
                recorded -= 1
        self.recorded += recorded
        if self._watch is not None:
            self._watch.outcomes_written(len(batch))
