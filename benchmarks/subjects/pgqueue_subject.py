"""pgqueue in each of its driver modes, for the benchmark harness."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pgqueue

from .base import Subject, split_producers

# The running worker's record callback; module-level so that job instances, built fresh for
# every job from the payload, can reach it.
_record: Callable[[int], None] = lambda i: None  # noqa: E731


@dataclass
class NoopAsync(pgqueue.Worker):
    kind = "bench.noop"
    i: int

    async def process(self, ctx: pgqueue.JobContext) -> None:
        _record(self.i)


@dataclass
class NoopSync(pgqueue.Worker):
    kind = "bench.noop"
    i: int

    def process(self, ctx: pgqueue.JobContext) -> None:
        _record(self.i)


ASYNC_REGISTRY = pgqueue.WorkerRegistry(NoopAsync)
SYNC_REGISTRY = pgqueue.WorkerRegistry(NoopSync)

# mode -> (driver name, URL scheme, asyncio?)
MODES: dict[str, tuple[str, str, bool]] = {
    "asyncpg": ("asyncpg", "postgresql", True),
    "psycopg-async": ("psycopg", "postgresql", True),
    "psycopg-sync": ("psycopg", "postgresql", False),
    "sqlalchemy-async": ("sqlalchemy", "postgresql+asyncpg", True),
    "sqlalchemy-sync": ("sqlalchemy", "postgresql+psycopg", False),
}


#: Until-empty runs (issue 19; ``client.run(queues, until_empty=True)``, ``pgqueue worker
#: --until-empty``): the runtime requests its own stop once no job is due and none runs, every
#: outcome written. The worker tells the drain's end at that request (``start(until_empty=True)``
#: then ``runtime.wait_stopping()``, what ``run`` does), before the shutdown that ``run`` then
#: does, so that pgqueue's drains end where the peers' do: when the last outcome is written.
#: Checked rather than assumed: a ``pgqueue-base/`` tree from before it is drained by polling.
UNTIL_EMPTY = all(
    "until_empty" in inspect.signature(fn).parameters
    for fn in (pgqueue.AsyncClient.run, pgqueue.AsyncClient.start, pgqueue.Client.start)
)


def _url(dsn: str, scheme: str) -> str:
    return scheme + dsn[dsn.index("://") :]


class PgQueueSubject(Subject):
    """pgqueue through one driver mode (see MODES)."""

    remaining_sql = "SELECT count(*) FROM pgqueue_jobs WHERE status IN ('pending', 'processing')"
    ends_when_empty = UNTIL_EMPTY

    def __init__(self, dsn: str, mode: str, *, variant: str = "") -> None:
        super().__init__(dsn)
        self.mode = mode
        self.name = f"pgqueue/{mode}"
        self.driver, scheme, self.is_async = MODES[mode]
        self.url = _url(dsn, scheme)
        self.variant = variant  # "", "events" or "quiet": see registry.make_subject
        self.events_seen = 0

    def _subscribe(self, client: Any) -> Any:
        # "+events": one more subscriber, to every event: what the seam costs when in use;
        # "+quiet": none at all, not even the default log subscriber
        if self.variant == "events":

            def count(event: object) -> None:
                self.events_seen += 1

            client.events.subscribe(count)
        elif self.variant == "quiet":
            client.log_subscription()
        return client

    # -- helpers --------------------------------------------------------------------------

    async def _async_client(self) -> Any:
        client = await pgqueue.AsyncClient.connect(
            self.url, driver=self.driver, registry=ASYNC_REGISTRY
        )
        return self._subscribe(client)

    def _sync_client(self) -> pgqueue.Client:
        client = pgqueue.Client.connect(self.url, driver=self.driver, registry=SYNC_REGISTRY)
        return self._subscribe(client)  # type: ignore[no-any-return]

    def _sql(self, statement: str) -> list[Any]:
        # Setup and bookkeeping go through psycopg whatever the mode: not measured.
        with pgqueue.Client.connect(self.dsn, driver="psycopg") as client:
            return list(client.driver.query(statement, ()))

    # -- Subject ---------------------------------------------------------------------------

    def install(self) -> None:
        with pgqueue.Client.connect(self.dsn, driver="psycopg") as client:
            client.migrate()

    def enqueue_single(self, start: int, n: int) -> float:
        if not self.is_async:
            with self._sync_client() as client:
                client.add_job(NoopSync(i=start))  # warm the pool
                t0 = time.perf_counter()
                for i in range(start + 1, start + n):
                    client.add_job(NoopSync(i=i))
                return (time.perf_counter() - t0) * n / max(n - 1, 1)

        async def run() -> float:
            async with await self._async_client() as client:
                await client.add_job(NoopAsync(i=start))
                t0 = time.perf_counter()
                for i in range(start + 1, start + n):
                    await client.add_job(NoopAsync(i=i))
                return (time.perf_counter() - t0) * n / max(n - 1, 1)

        return _run_async(run())

    def enqueue_bulk(self, start: int, n: int) -> float:
        return self.enqueue_batches(start, n, n)

    def enqueue_batches(self, start: int, n: int, batch: int) -> float:
        if not self.is_async:
            with self._sync_client() as client:
                t0 = time.perf_counter()
                for lo in range(start, start + n, batch):
                    hi = min(lo + batch, start + n)
                    client.add_jobs([NoopSync(i=i) for i in range(lo, hi)])
                return time.perf_counter() - t0

        async def run() -> float:
            async with await self._async_client() as client:
                t0 = time.perf_counter()
                for lo in range(start, start + n, batch):
                    hi = min(lo + batch, start + n)
                    await client.add_jobs([NoopAsync(i=i) for i in range(lo, hi)])
                return time.perf_counter() - t0

        return _run_async(run())

    def enqueue_concurrent(self, start: int, n: int, producers: int) -> float:
        """Threads sharing one ``Client`` (sync modes) or asyncio tasks sharing one
        ``AsyncClient`` (async modes); the client's pool as it ships (up to 10 connections)."""
        warm, lanes = split_producers(start, n, producers)
        timed = max(n - len(warm), 1)
        if not self.is_async:
            with self._sync_client() as client:
                go = threading.Barrier(producers + 1)
                errors: list[BaseException] = []

                def produce(k: int) -> None:
                    try:
                        if k < len(warm):
                            client.add_job(NoopSync(i=warm[k]))
                        go.wait()
                        for i in lanes[k]:
                            client.add_job(NoopSync(i=i))
                    except BaseException as exc:
                        errors.append(exc)
                        go.abort()

                threads = [threading.Thread(target=produce, args=(k,)) for k in range(producers)]
                for t in threads:
                    t.start()
                with contextlib.suppress(threading.BrokenBarrierError):
                    go.wait()  # every producer has added its warm-up job
                t0 = time.perf_counter()
                for t in threads:
                    t.join()
                elapsed = time.perf_counter() - t0
                if errors:
                    raise errors[0]
                return elapsed * n / timed

        async def run() -> float:
            async with await self._async_client() as client:

                async def produce(lane: range) -> None:
                    for i in lane:
                        await client.add_job(NoopAsync(i=i))

                await asyncio.gather(*(client.add_job(NoopAsync(i=i)) for i in warm))
                t0 = time.perf_counter()
                await asyncio.gather(*(produce(lane) for lane in lanes))
                return (time.perf_counter() - t0) * n / timed

        return _run_async(run())

    def enqueue_spaced(self, start: int, n: int, spacing: float) -> list[float]:
        commits: list[float] = []
        if not self.is_async:
            with self._sync_client() as client:
                for i in range(start, start + n):
                    time.sleep(spacing)
                    client.add_job(NoopSync(i=i))
                    commits.append(time.time())
            return commits

        async def run() -> list[float]:
            async with await self._async_client() as client:
                for i in range(start, start + n):
                    await asyncio.sleep(spacing)
                    await client.add_job(NoopAsync(i=i))
                    commits.append(time.time())
            return commits

        return _run_async(run())

    def remaining(self) -> int:
        rows = self._sql(self.remaining_sql)
        return int(rows[0][0])

    def fill_finished(self, n: int) -> None:
        with pgqueue.Client.connect(self.dsn, driver="psycopg") as client:
            client.driver.exec(
                "INSERT INTO pgqueue_jobs (kind, queue, payload, status, attempts, locked_at, "
                "finished_at) SELECT 'bench.noop', 'default', jsonb_build_object('i', -g), "
                "'completed', 1, now(), now() FROM generate_series(1, $1) g",
                (n,),
            )
            client.driver.exec("VACUUM ANALYZE pgqueue_jobs", ())

    def run_worker(
        self,
        concurrency: int,
        record: Callable[[int], None],
        stop: threading.Event,
        emptied: Callable[[], None] | None = None,
    ) -> None:
        global _record
        _record = record
        queues = {"default": concurrency}
        if not self.is_async:
            with self._sync_client() as client:
                if emptied is not None:
                    client.start(queues, until_empty=True)
                    runtime = client.runtime
                    assert runtime is not None
                    while not runtime.wait_stopping(0.5):
                        pass
                    emptied()
                    client.stop()
                    stop.wait()
                    return
                client.start(queues)
                stop.wait()
                client.stop()
            return

        async def run() -> None:
            async with await self._async_client() as client:
                if emptied is not None:
                    await client.start(queues, until_empty=True)
                    runtime = client.runtime
                    assert runtime is not None
                    while not await runtime.wait_stopping(0.5):
                        pass
                    emptied()
                    await client.stop()
                    while not stop.is_set():
                        await asyncio.sleep(0.05)
                    return
                await client.start(queues)
                while not stop.is_set():
                    await asyncio.sleep(0.05)
                await client.stop()

        _run_async(run())


def _run_async(coro: Any) -> Any:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)
