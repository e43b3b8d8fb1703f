"""The job executor: runs claimed jobs in the pool and hands their outcomes to the writer.

It owns the job pool and what a run's start and end mean: the run is counted in the
:class:`~pgqueue.runtime_state.RunTable` from launch to outcome, a job's ``process`` is called
through ``call_process`` (timeouts, cancellation, stuck runs), the outcome is decided by
``pgqueue.execution``, and ``JobStarted``, a ``JobFinished`` subclass per outcome and
``JobRetried`` are emitted. A job raising ``KeyboardInterrupt``/``SystemExit`` stops the
worker (``on_fatal``).

Running one claimed job (:func:`job_run`) and the events of its start and end
(:func:`job_emit_started`, :func:`job_emit_finished`) are module functions: ``pgqueue.testing``
runs jobs through them too, so a job under test takes the path a worker's job takes.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from ...events import EventHub, JobRetried, JobStarted
from ...execution import (
    ClaimedJob,
    Outcome,
    Running,
    StuckRuns,
    is_coroutine_function,
    outcome_for_bad_payload,
    outcome_for_error,
    outcome_unrunnable,
    signal_stop,
)
from ...jobs import WorkerRegistry
from ...runtime_config import RuntimeConfig
from ...runtime_state import (
    RunTable,
    finished_class,
    job_finished,
    job_retried,
    job_started,
    queue_wait,
)
from ...tracing import JobTracer
from ..compat import Event, JobPool, call_process, wait_all
from .writer import AsyncOutcomeWriter

__all__ = ["AsyncJobExecutor", "job_emit_finished", "job_emit_started", "job_run"]

logger = logging.getLogger("pgqueue")

# After stop's timeout, how long cut-off jobs get to hand their job back.
_STOP_GRACE = 2.0
_IMMEDIATE_GRACE = 0.2


class AsyncJobExecutor:
    """Runs each launched job once and reports how it ended."""

    def __init__(
        self,
        *,
        registry: WorkerRegistry,
        config: RuntimeConfig,
        runs: RunTable,
        writer: AsyncOutcomeWriter,
        wake: Mapping[str, Event],
        events: EventHub,
        instance_id: uuid.UUID,
        size: int,
        on_fatal: Callable[[], None],
    ) -> None:
        self._registry = registry
        self._config = config
        self._runs = runs
        self._writer = writer
        self._wake = wake
        self._events = events
        self._instance_id = instance_id
        self._size = size
        self._on_fatal = on_fatal
        self._pool: JobPool | None = None
        self.stuck = StuckRuns()
        self.fatal: BaseException | None = None

    def open(self) -> None:
        """Create the pool the jobs run in."""
        self._pool = JobPool(self._size)

    def close(self) -> None:
        """Let the pool's threads end once idle (a thread still in a job finishes it first)."""
        if self._pool is not None:
            self._pool.shutdown()

    def launch(self, job: ClaimedJob) -> None:
        """Start running a job just claimed (its slot is taken until its outcome is handed on)."""
        assert self._pool is not None
        running = self._runs.add(job)
        running.handle = self._pool.submit(self._execute, running)

    async def drain(self, timeout: float, immediate: Callable[[], bool]) -> None:
        """Let running jobs finish for ``timeout`` seconds, then cut them off and hand them back.

        Cut-off jobs go back to pending without losing an attempt. ``immediate()`` turning
        true (a second signal) cuts the wait short.
        """
        # in short steps so a second signal can cut the wait short
        remaining = timeout
        while self._runs and remaining > 0 and not immediate():
            step = min(remaining, 0.1)
            await wait_all([r.handle for r in self._runs.runs()], step)
            remaining -= step
        cut_off = self._runs.runs()
        for running in cut_off:
            signal_stop(running, "shutdown")
        if cut_off:
            logger.warning("stop: cutting off %d running job(s)", len(cut_off))
            grace = _IMMEDIATE_GRACE if immediate() else _STOP_GRACE
            await wait_all([r.handle for r in cut_off], grace)
        # Jobs whose code does not return (a blocked thread) are handed back all the same;
        # taking them out of the run table means that, if they ever return, nothing more is
        # written.
        for abandoned in self._runs.remove_all():
            self._finish(abandoned, Outcome("release"))

    async def _execute(self, running: Running) -> None:
        job = running.job
        job_emit_started(self._events, running, self._instance_id)
        # if this task itself dies, hand the job back; None: leave it to a rescue
        outcome: Outcome | None = Outcome("release")
        try:
            assert self._pool is not None
            outcome = await job_run(
                running, self._registry, self._config, self._pool, self.stuck, self._events.tracer
            )
        except (KeyboardInterrupt, SystemExit) as exc:
            # process() asked for the whole worker to end. As after a crash, its job gets no
            # outcome (a rescue returns it, the attempt counted) and the worker stops at once;
            # run() and `pgqueue worker` raise the exception again once it has stopped.
            outcome = None
            if self.fatal is None:
                self.fatal = exc
            logger.error(
                "job %s (%s) raised %s: stopping this worker now; the job is left for a rescue",
                job.id,
                job.kind,
                type(exc).__name__,
            )
            self._on_fatal()
        finally:
            # Only while the job is still in the run table: a shutdown that gave up on it has
            # already handed it back, and a late outcome must not follow.
            if self._runs.remove(job) is not None:
                if outcome is not None:
                    self._finish(running, outcome)
                self._wake[job.queue].set()

    def _finish(self, running: Running, outcome: Outcome) -> None:
        """Report how a run ended, then hand its outcome to the writer (never blocks)."""
        job_emit_finished(self._events, running, outcome, self._instance_id)
        self._writer.put(running.job, outcome)


def job_emit_started(events: EventHub, running: Running, instance_id: uuid.UUID) -> None:
    """Emit ``JobStarted`` for a run that starts now, if anyone listens."""
    if events.wants(JobStarted):
        running.queue_wait = queue_wait(running.job)
        events.emit(job_started(running, instance_id))


def job_emit_finished(
    events: EventHub, running: Running, outcome: Outcome, instance_id: uuid.UUID
) -> None:
    """Emit the ``JobFinished`` subclass of ``outcome`` (and ``JobRetried``), if anyone listens."""
    if events.wants(finished_class(outcome)):
        events.emit(job_finished(running, outcome, instance_id))
    if outcome.action == "retry" and events.wants(JobRetried):
        events.emit(job_retried(running.job, outcome))


async def job_run(
    running: Running,
    registry: WorkerRegistry,
    config: RuntimeConfig,
    pool: JobPool,
    stuck: StuckRuns,
    tracer: JobTracer | None = None,
) -> Outcome:
    """Run one claimed job's ``process`` and return how it ended.

    Builds the job from its stored arguments with ``registry``, wraps ``process`` with
    ``tracer`` (the attempt's span), calls it through ``call_process`` in ``pool`` (timeout,
    cancellation, stuck runs counted in ``stuck``) and decides the outcome with
    ``pgqueue.execution`` (retry backoff from ``config``). Raises no ``Exception``: a job that
    cannot be built or run fails with an outcome; ``KeyboardInterrupt`` and ``SystemExit``
    pass through.
    """
    job = running.job
    try:
        refused = outcome_unrunnable(job)
        if refused is not None:
            return refused
        try:
            worker = registry.build(job.kind, json.loads(job.payload_text))
        except Exception as exc:
            return outcome_for_bad_payload(job, exc)
        ctx = job.context(running.cancel)
        process: Callable[[Any], Any] = worker.process
        if tracer is not None:  # the attempt's span, current where process() runs
            process = tracer.wrap_process(job, process)
        running.is_coroutine = is_coroutine_function(process)
        started = time.monotonic()
        try:
            await call_process(pool, running, process, ctx, stuck)
        except Exception as exc:
            job.duration = time.monotonic() - started
            return outcome_for_error(job, exc, config)
        job.duration = time.monotonic() - started
        return Outcome("complete")
    except Exception as exc:  # describing the job's error failed, say: still charged
        return outcome_for_error(job, exc, config)
