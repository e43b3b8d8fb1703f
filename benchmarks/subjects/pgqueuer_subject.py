"""PGQueuer 1.6 behind the benchmark interface, on asyncpg and uvloop.

The settings follow PGQueuer's own material: ``tools/benchmark.py`` runs everything under
``uvloop.run`` on the asyncpg driver (``-d apg``, the default, which its benchmark page measures at
~1.7x psycopg), and ``docs/guides/performance-tuning.md`` says to give a ``QueueManager`` a single
direct asyncpg connection (not a pool) and to raise ``batch_size`` for short jobs. The schema is
the default ``durable`` one (all tables logged), as ``pgq install`` creates it.

A job's payload is the ASCII decimal of its ``i`` (``b"123"``), the form PGQueuer's benchmark uses.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

import asyncpg
import uvloop
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries

from .base import Subject

ENTRYPOINT = "bench"

#: Rows per ``Queries.enqueue`` call in ``enqueue_bulk``. One statement takes any length (the
#: arrays travel as bind parameters); chunks keep each transaction and its reply moderate.
BULK_CHUNK = 10_000

#: Upper bound on ``batch_size`` (jobs claimed per dequeue round trip). The default is 10; the
#: tuning guide says to raise it for short jobs. Dequeues never claim past the entrypoint's
#: ``concurrency_limit``, so the effective batch is ``min(BATCH_SIZE_MAX, concurrency)``.
BATCH_SIZE_MAX = 50

STOP_POLL = 0.05


def _quiet() -> None:
    logging.getLogger("pgqueuer").setLevel(logging.WARNING)


class PgQueuerSubject(Subject):
    name = "pgqueuer"

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        _quiet()

    def _run(self, coro):  # type: ignore[no-untyped-def]
        return uvloop.run(coro)

    async def _connect(self) -> asyncpg.Connection:
        return await asyncpg.connect(self.dsn)

    # -- schema -------------------------------------------------------------------------------

    def install(self) -> None:
        async def go() -> None:
            conn = await self._connect()
            try:
                await Queries(AsyncpgDriver(conn)).install()
            finally:
                await conn.close()

        self._run(go())

    # -- enqueue ------------------------------------------------------------------------------

    def enqueue_single(self, start: int, n: int) -> float:
        async def go() -> float:
            conn = await self._connect()
            try:
                queries = Queries(AsyncpgDriver(conn))
                t0 = time.perf_counter()
                for i in range(start, start + n):
                    await queries.enqueue(ENTRYPOINT, str(i).encode())
                return time.perf_counter() - t0
            finally:
                await conn.close()

        return self._run(go())

    def enqueue_bulk(self, start: int, n: int) -> float:
        async def go() -> float:
            conn = await self._connect()
            try:
                queries = Queries(AsyncpgDriver(conn))
                t0 = time.perf_counter()
                for lo in range(start, start + n, BULK_CHUNK):
                    hi = min(lo + BULK_CHUNK, start + n)
                    await queries.enqueue(
                        [ENTRYPOINT] * (hi - lo),
                        [str(i).encode() for i in range(lo, hi)],
                        [0] * (hi - lo),
                    )
                return time.perf_counter() - t0
            finally:
                await conn.close()

        return self._run(go())

    # -- inspection ---------------------------------------------------------------------------

    def remaining(self) -> int:
        async def go() -> int:
            conn = await self._connect()
            try:
                return int(await conn.fetchval("SELECT count(*) FROM pgqueuer"))
            finally:
                await conn.close()

        return self._run(go())

    def fill_finished(self, n: int) -> None:
        """Leave ``n`` finished jobs' history, as PGQueuer keeps it.

        A finished job's row is deleted from ``pgqueuer``; what stays is three ``pgqueuer_log``
        rows (``queued`` at enqueue, ``picked`` at dequeue, ``successful`` at completion), later
        folded by the log aggregation into per-second ``pgqueuer_statistics`` counts and marked
        ``aggregated``. Ids come from the queue's own sequence, as real jobs' would; the history
        ends an hour ago at a thousand jobs a second so it never shares a statistics bucket with
        the run that follows.
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

        async def go() -> None:
            conn = await self._connect()
            try:
                await conn.execute(sql, n, ENTRYPOINT)
                await conn.execute("VACUUM ANALYZE pgqueuer_log")
                await conn.execute("VACUUM ANALYZE pgqueuer_statistics")
                await conn.execute("VACUUM ANALYZE pgqueuer")
            finally:
                await conn.close()

        self._run(go())

    # -- worker -------------------------------------------------------------------------------

    def run_worker(
        self,
        concurrency: int,
        record: Callable[[int], None],
        stop: threading.Event,
    ) -> None:
        async def watch(qm: QueueManager) -> None:
            while not stop.is_set():
                await asyncio.sleep(STOP_POLL)
            qm.shutdown.set()

        async def go() -> None:
            conn = await self._connect()
            try:
                qm = QueueManager(Queries(AsyncpgDriver(conn)))

                @qm.entrypoint(ENTRYPOINT, concurrency_limit=concurrency)
                async def handle(job: Job) -> None:
                    record(int(job.payload))  # type: ignore[arg-type]

                watcher = asyncio.create_task(watch(qm))
                try:
                    await qm.run(batch_size=max(1, min(BATCH_SIZE_MAX, concurrency)))
                finally:
                    watcher.cancel()
            finally:
                await conn.close()

        self._run(go())
