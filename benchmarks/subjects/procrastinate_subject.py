"""procrastinate 3.10 behind the benchmark interface, on its psycopg 3 connector.

Settings, and where they come from:

- ``PsycopgConnector`` (procrastinate's async connector; psycopg 3 with a ``psycopg_pool`` pool),
  sized as ``docs/discussions.md`` ("Mind the size of your PostgreSQL pool") says for short jobs:
  as many connections as the concurrency, plus one, up to ``POOL_MAX``. The LISTEN connection is
  separate. The worker fetches one job per query, one query at a time, so beyond ~20 connections
  a bigger pool measured no faster, and two workers at concurrency 50 with uncapped pools would
  need more than a default server's 100 connections.
- The worker runs with ``listen_notify=True`` (the default) and a short fetch poll, so a new job
  is picked up on its NOTIFY and a missed one within ``FETCH_POLL`` seconds; the job is an
  ``async def`` task, which is what ``concurrency`` needs (``docs/howto/concurrency``).
- Concurrent producers (``enqueue_concurrent``) are asyncio tasks calling ``defer_async`` on
  one app whose pool has a connection per producer; batches go through ``batch_defer_async``.
- ``delete_jobs`` stays at its default, ``never``: finished jobs stay in ``procrastinate_jobs``
  as ``succeeded``, which is what ``fill_finished`` reproduces.
- ``install_signal_handlers=False`` and stopping by cancelling the ``run_worker_async`` task are
  what ``docs/howto/basics/worker.md`` prescribes for a worker inside a bigger program: the
  cancel requests a graceful stop that waits for running jobs and writes their status.
- The ``procrastinate`` logger is kept at WARNING: the worker logs two INFO lines per job.
- The event loop is uvloop's, as for PGQueuer and pgqueue. procrastinate's docs neither ask for
  it nor warn against it; its worker is bound by its own CPU per job (a fetch query per job, each
  through psycopg's async waits), and uvloop measured ~20-30% more jobs/s with ~25% less worker
  CPU per job. ``asyncio.run`` in ``_run`` is the way back to the stdlib loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import procrastinate
import psycopg
import uvloop

from .base import Subject, split_producers

TASK_NAME = "bench"
QUEUE = "default"

#: Jobs per ``batch_defer_async`` call in ``enqueue_bulk`` (one INSERT through
#: ``procrastinate_defer_jobs_v1`` each).
BULK_CHUNK = 10_000

#: Most connections in a worker's pool (see the module docstring).
POOL_MAX = 40

#: Seconds between fallback polls for new jobs; LISTEN/NOTIFY does the prompt wake-ups.
FETCH_POLL = 0.1

STOP_POLL = 0.05


def _quiet() -> None:
    logging.getLogger("procrastinate").setLevel(logging.WARNING)


def _run(coro: Any) -> Any:
    return uvloop.run(coro)


class ProcrastinateSubject(Subject):
    name = "procrastinate"
    remaining_sql = "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        _quiet()

    def _app(
        self,
        record: Callable[[int], None] | None = None,
        pool_size: int = 1,
    ) -> tuple[procrastinate.App, Any]:
        app = procrastinate.App(
            connector=procrastinate.PsycopgConnector(
                conninfo=self.dsn, min_size=pool_size, max_size=pool_size
            )
        )

        @app.task(name=TASK_NAME, queue=QUEUE)
        async def bench(i: int) -> None:
            if record is not None:
                record(i)

        return app, bench

    # -- schema -------------------------------------------------------------------------------

    def install(self) -> None:
        async def go() -> None:
            app, _ = self._app()
            async with app.open_async():
                await app.schema_manager.apply_schema_async()

        _run(go())

    # -- enqueue ------------------------------------------------------------------------------

    def enqueue_single(self, start: int, n: int) -> float:
        async def go() -> float:
            app, task = self._app()
            async with app.open_async():
                # The first call opens the pooled connection's session state; like the pgqueue
                # subject, it is not timed and the rest is scaled to n calls.
                await task.defer_async(i=start)
                t0 = time.perf_counter()
                for i in range(start + 1, start + n):
                    await task.defer_async(i=i)
                return (time.perf_counter() - t0) * n / max(n - 1, 1)

        return _run(go())

    def enqueue_bulk(self, start: int, n: int) -> float:
        return self.enqueue_batches(start, n, BULK_CHUNK)

    def enqueue_batches(self, start: int, n: int, batch: int) -> float:
        async def go() -> float:
            app, task = self._app()
            async with app.open_async():
                t0 = time.perf_counter()
                for lo in range(start, start + n, batch):
                    hi = min(lo + batch, start + n)
                    await task.batch_defer_async(*({"i": i} for i in range(lo, hi)))
                return time.perf_counter() - t0

        return _run(go())

    def enqueue_concurrent(self, start: int, n: int, producers: int) -> float:
        """asyncio tasks deferring on one app, whose pool has a connection per producer."""

        async def go() -> float:
            app, task = self._app(pool_size=producers)

            async def produce(ids: range) -> None:
                for i in ids:
                    await task.defer_async(i=i)

            async with app.open_async():
                warm, lanes = split_producers(start, n, producers)
                await asyncio.gather(*(task.defer_async(i=i) for i in warm))
                t0 = time.perf_counter()
                await asyncio.gather(*(produce(lane) for lane in lanes))
                return (time.perf_counter() - t0) * n / max(n - len(warm), 1)

        return _run(go())

    def enqueue_spaced(self, start: int, n: int, spacing: float) -> list[float]:
        async def go() -> list[float]:
            app, task = self._app()
            commits: list[float] = []
            async with app.open_async():
                for i in range(start, start + n):
                    await asyncio.sleep(spacing)
                    await task.defer_async(i=i)
                    commits.append(time.time())
            return commits

        return _run(go())

    # -- inspection ---------------------------------------------------------------------------

    def remaining(self) -> int:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute(self.remaining_sql).fetchone()
        assert row is not None
        return int(row[0])

    def fill_finished(self, n: int) -> None:
        """Leave ``n`` succeeded jobs, as a worker with the default ``delete_jobs=never`` does.

        Each is a ``procrastinate_jobs`` row in ``succeeded`` (one attempt, its worker gone) plus
        the three ``procrastinate_events`` rows the status triggers write on the way there
        (``deferred``, ``started``, ``succeeded``). Inserting straight into ``succeeded`` fires
        none of those triggers, so the events are written by the same statement. The history
        ends an hour ago, a thousand jobs a second.
        """
        fill = """
            WITH jobs AS (
                INSERT INTO procrastinate_jobs
                    (queue_name, task_name, priority, args, status, attempts)
                SELECT %(queue)s, %(task)s, 0, jsonb_build_object('i', -g),
                       'succeeded'::procrastinate_job_status, 1
                FROM generate_series(1, %(n)s::bigint) AS g
                RETURNING id, -(args->>'i')::bigint AS g
            )
            INSERT INTO procrastinate_events (job_id, type, at)
            SELECT jobs.id, step.type::procrastinate_job_event_type,
                   now() - interval '1 hour' - ((%(n)s::bigint - jobs.g) * interval '1 millisecond')
                       - step.back
            FROM jobs
            CROSS JOIN (VALUES ('deferred', interval '2 milliseconds'),
                               ('started', interval '1 millisecond'),
                               ('succeeded', interval '0')) AS step(type, back)
        """
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(fill, {"n": n, "queue": QUEUE, "task": TASK_NAME})
            conn.execute("VACUUM ANALYZE procrastinate_jobs")
            conn.execute("VACUUM ANALYZE procrastinate_events")

    # -- worker -------------------------------------------------------------------------------

    def run_worker(
        self,
        concurrency: int,
        record: Callable[[int], None],
        stop: threading.Event,
        emptied: Callable[[], None] | None = None,
    ) -> None:
        async def go() -> None:
            app, _ = self._app(record=record, pool_size=min(concurrency + 1, POOL_MAX))
            async with app.open_async():
                worker = asyncio.create_task(
                    app.run_worker_async(
                        concurrency=concurrency,
                        wait=True,
                        listen_notify=True,
                        fetch_job_polling_interval=FETCH_POLL,
                        install_signal_handlers=False,
                        shutdown_graceful_timeout=None,
                    )
                )
                while not stop.is_set() and not worker.done():
                    await asyncio.sleep(STOP_POLL)
                # Cancelling is the documented graceful stop: running jobs finish and are
                # marked, then the task ends cancelled. A worker that died on its own re-raises.
                worker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await worker

        _run(go())
