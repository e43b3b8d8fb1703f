"""PGQueuer 1.6 behind the benchmark interface, on asyncpg and uvloop, in two driver setups.

``pgqueuer`` runs on one direct connection (``AsyncpgDriver``), ``pgqueuer-pool`` on an asyncpg
pool (``AsyncpgPoolDriver``); the report compares pgqueue with the better of the two in each
measurement and names it. Settings, and where they come from:

- ``uvloop.run`` and asyncpg: what PGQueuer's own ``tools/benchmark.py`` runs (``-d apg`` is its
  default; its benchmark page puts asyncpg at ~1.7x psycopg).
- One direct connection (``pgqueuer``): ``docs/guides/performance-tuning.md`` says to give a
  ``QueueManager`` a single direct asyncpg connection ("Always use a direct asyncpg connection
  (not a pool) for the QueueManager. Reserve the pool for producers."). On it, every query
  takes the driver's lock, so concurrent producers take turns.
- A pool (``pgqueuer-pool``): the same guide's "Connection pooling" section recommends
  ``AsyncpgPoolDriver`` "for high-throughput deployments" and for producers, and its
  ``tools/benchmark.py`` offers it (``-d apgpool``, ``asyncpg.create_pool(dsn)``: asyncpg's
  default pool of 10 connections). Both producers and the worker use the pool here; the
  pool is ``asyncpg.create_pool``'s default size (10), or the number of producers.
- Concurrency is ``QueueManager.run(max_concurrent_tasks=concurrency)``, the guide's
  "per-process ceiling", enforced in the dequeue query for this worker alone. An entrypoint's
  ``concurrency_limit`` is the other knob, but it is a limit for the whole fleet ("at most 4 such
  jobs run across your entire fleet"), so two worker processes would share one limit, and its
  slot bookkeeping makes every dequeue heavier (measured: 13-27% slower at 50-200). The run
  requires ``max_concurrent_tasks >= 2 * batch_size``, so concurrency 1 cannot be said that way;
  there, and only there, the entrypoint gets ``concurrency_limit=1`` (one process: the same).
- ``batch_size`` raised from its default 10, as the guide says for short jobs, to the largest
  the run accepts, ``concurrency // 2`` (capped at ``BATCH_SIZE_MAX``). It is also the size at
  which completions are flushed. (With ``concurrency_limit``, a batch as big as the limit
  measured fastest up to a few hundred; bigger stopped helping.)
- ``pgq autovac`` applied after ``install`` (``Queries.optimize_autovacuum()``, the SQL the
  command runs), as the guide's checklist says ("Run ``pgq autovac`` after installation"):
  ``fillfactor = 70`` and aggressive per-table autovacuum on ``pgqueuer`` and
  ``pgqueuer_schedules``, conservative on the log and statistics tables. On this machine
  autovacuum is off server-wide (the harness runs ``VACUUM ANALYZE`` itself), so of these
  settings only the fillfactor acts.
- Durability as ``pgq install`` ships it (``durable``: every table logged). The guide's
  ``balanced``/``volatile`` modes trade crash safety for speed (lost jobs or statistics on a
  crash); pgqueue's enqueues and outcomes are durable, so neither is used.
- A job's payload is the ASCII decimal of its ``i`` (``b"123"``, a ``bytea`` column), as
  PGQueuer's benchmark does; pgqueue and procrastinate store ``{"i": 123}`` as ``jsonb``.
- Batch enqueue is ``Queries.enqueue`` with lists (one ``INSERT ... SELECT unnest(...)``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import asyncpg
import uvloop
from pgqueuer.db import AsyncpgDriver, AsyncpgPoolDriver
from pgqueuer.models import Job
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries

from .base import Subject, split_producers

ENTRYPOINT = "bench"

#: Rows per ``Queries.enqueue`` call in ``enqueue_bulk``. One call takes any length (the arrays
#: are bind parameters); chunks keep each transaction and its reply moderate.
BULK_CHUNK = 10_000

#: Largest ``batch_size``: beyond a few hundred, bigger batches stopped helping.
BATCH_SIZE_MAX = 250

STOP_POLL = 0.05

#: Connections in ``pgqueuer-pool``'s pool: ``asyncpg.create_pool``'s default, as PGQueuer's
#: ``tools/benchmark.py -d apgpool`` uses it.
POOL_SIZE = 10


def _payload(i: int) -> bytes:
    return str(i).encode()


class PgQueuerSubject(Subject):
    name = "pgqueuer"
    remaining_sql = "SELECT count(*) FROM pgqueuer"

    def __init__(self, dsn: str, *, pool: bool = False) -> None:
        super().__init__(dsn)
        self.pool = pool
        if pool:
            self.name = "pgqueuer-pool"
        logging.getLogger("pgqueuer").setLevel(logging.WARNING)

    def _run(self, coro: Any) -> Any:
        return uvloop.run(coro)

    async def _with_queries(
        self, fn: Callable[[Any, Queries], Any], pool_size: int = POOL_SIZE
    ) -> Any:
        """Run ``fn(db, queries)`` on a direct connection, or on a pool for ``pgqueuer-pool``;
        ``db`` is the connection or the pool (both have ``execute`` and ``fetchval``)."""
        if self.pool:
            pool = await asyncpg.create_pool(self.dsn, min_size=pool_size, max_size=pool_size)
            try:
                return await fn(pool, Queries(AsyncpgPoolDriver(pool)))
            finally:
                await pool.close()
        conn = await asyncpg.connect(self.dsn)
        try:
            return await fn(conn, Queries(AsyncpgDriver(conn)))
        finally:
            await conn.close()

    # -- schema -------------------------------------------------------------------------------

    def install(self) -> None:
        async def go(conn: Any, queries: Queries) -> None:
            await queries.install()
            await queries.optimize_autovacuum()  # `pgq autovac`

        self._run(self._with_queries(go))

    # -- enqueue ------------------------------------------------------------------------------

    def enqueue_single(self, start: int, n: int) -> float:
        async def go(conn: Any, queries: Queries) -> float:
            # The first call prepares the statement; like the pgqueue subject, it is not timed
            # and the rest is scaled to n calls.
            await queries.enqueue(ENTRYPOINT, _payload(start))
            t0 = time.perf_counter()
            for i in range(start + 1, start + n):
                await queries.enqueue(ENTRYPOINT, _payload(i))
            return (time.perf_counter() - t0) * n / max(n - 1, 1)

        return self._run(self._with_queries(go))

    def enqueue_bulk(self, start: int, n: int) -> float:
        return self.enqueue_batches(start, n, BULK_CHUNK)

    def enqueue_batches(self, start: int, n: int, batch: int) -> float:
        async def go(conn: Any, queries: Queries) -> float:
            t0 = time.perf_counter()
            for lo in range(start, start + n, batch):
                hi = min(lo + batch, start + n)
                await queries.enqueue(
                    [ENTRYPOINT] * (hi - lo),
                    [_payload(i) for i in range(lo, hi)],
                    [0] * (hi - lo),
                )
            return time.perf_counter() - t0

        return self._run(self._with_queries(go))

    def enqueue_concurrent(self, start: int, n: int, producers: int) -> float:
        """asyncio tasks sharing one ``Queries``: on the direct connection they take turns (the
        driver's lock), on the pool each call borrows a connection (pool size = producers)."""

        async def go(conn: Any, queries: Queries) -> float:
            async def produce(ids: range) -> None:
                for i in ids:
                    await queries.enqueue(ENTRYPOINT, _payload(i))

            warm, lanes = split_producers(start, n, producers)
            await asyncio.gather(*(queries.enqueue(ENTRYPOINT, _payload(i)) for i in warm))
            t0 = time.perf_counter()
            await asyncio.gather(*(produce(lane) for lane in lanes))
            return (time.perf_counter() - t0) * n / max(n - len(warm), 1)

        return self._run(self._with_queries(go, pool_size=producers))

    def enqueue_spaced(self, start: int, n: int, spacing: float) -> list[float]:
        async def go(conn: Any, queries: Queries) -> list[float]:
            commits: list[float] = []
            for i in range(start, start + n):
                await asyncio.sleep(spacing)
                await queries.enqueue(ENTRYPOINT, _payload(i))
                commits.append(time.time())
            return commits

        return self._run(self._with_queries(go))

    # -- inspection ---------------------------------------------------------------------------

    def remaining(self) -> int:
        async def go(conn: Any, queries: Queries) -> int:
            return int(await conn.fetchval(self.remaining_sql))

        return self._run(self._with_queries(go))

    def fill_finished(self, n: int) -> None:
        """Leave ``n`` finished jobs' history, as PGQueuer keeps it.

        A finished job's row is deleted from ``pgqueuer``; what stays is three ``pgqueuer_log``
        rows (``queued`` at enqueue, ``picked`` at dequeue, ``successful`` at completion), which
        the log aggregation later folds into per-second ``pgqueuer_statistics`` counts and marks
        ``aggregated``. Ids come from the queue's own sequence, as real jobs' would. The history
        ends an hour ago at a thousand jobs a second, so it shares no statistics bucket with the
        run that follows.
        """
        sql = """
            WITH jobs AS MATERIALIZED (
                SELECT nextval(pg_get_serial_sequence('pgqueuer', 'id')) AS job_id,
                       now() - interval '1 hour' - (($1::bigint - g) * interval '1 millisecond')
                           AS done
                FROM generate_series(1, $1::bigint) AS g
            ),
            logged AS (
                INSERT INTO pgqueuer_log
                    (created, job_id, status, priority, entrypoint, traceback, aggregated)
                SELECT jobs.done - step.back, jobs.job_id, step.status::pgqueuer_status, 0,
                       $2::text, NULL, TRUE
                FROM jobs
                CROSS JOIN (VALUES ('queued', interval '2 milliseconds'),
                                   ('picked', interval '1 millisecond'),
                                   ('successful', interval '0')) AS step(status, back)
                RETURNING created, status, priority, entrypoint
            )
            INSERT INTO pgqueuer_statistics (created, count, priority, status, entrypoint)
            SELECT date_trunc('sec', created), count(*), priority, status, entrypoint
            FROM logged
            GROUP BY date_trunc('sec', created), priority, status, entrypoint
            ON CONFLICT (priority, date_trunc('sec'::text, timezone('UTC'::text, created)),
                         status, entrypoint)
            DO UPDATE SET count = pgqueuer_statistics.count + EXCLUDED.count
        """

        async def go(conn: Any, queries: Queries) -> None:
            await conn.execute(sql, n, ENTRYPOINT)
            for table in ("pgqueuer_log", "pgqueuer_statistics", "pgqueuer"):
                await conn.execute(f"VACUUM ANALYZE {table}")

        self._run(self._with_queries(go))

    # -- worker -------------------------------------------------------------------------------

    def run_worker(
        self,
        concurrency: int,
        record: Callable[[int], None],
        stop: threading.Event,
        emptied: Callable[[], None] | None = None,
    ) -> None:
        if concurrency >= 2:
            limit, batch_size = 0, min(concurrency // 2, BATCH_SIZE_MAX)
            max_tasks: int | None = concurrency
        else:
            limit, batch_size, max_tasks = 1, 1, None

        async def go(conn: Any, queries: Queries) -> None:
            qm = QueueManager(queries)

            @qm.entrypoint(ENTRYPOINT, concurrency_limit=limit)
            async def handle(job: Job) -> None:
                record(int(job.payload))  # type: ignore[arg-type]

            async def watch() -> None:
                while not stop.is_set():
                    await asyncio.sleep(STOP_POLL)
                # Graceful: the run loop ends, in-flight jobs finish, their log rows are flushed.
                qm.shutdown.set()

            watcher = asyncio.create_task(watch())
            try:
                await qm.run(batch_size=batch_size, max_concurrent_tasks=max_tasks)
            finally:
                watcher.cancel()

        self._run(self._with_queries(go))
