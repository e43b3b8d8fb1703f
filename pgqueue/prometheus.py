"""Prometheus metrics of a client and its worker: ``pip install "pgqueue[prometheus]"``.

:func:`collector` returns a ``prometheus_client`` collector, registered in the default registry
unless told otherwise; ``pgqueue worker --metrics-port`` serves that registry at ``/metrics``.
Two sources feed it:

- the client's events (:mod:`pgqueue.events`), counted in this process as they happen: jobs
  finished by queue, kind and outcome, how long they ran and waited, jobs enqueued, listener
  reconnects, rescues; plus what the worker runtime knows now (jobs running, leadership);
- the database, read at scrape time (``queue_stats`` and ``cron_list``): jobs per queue and
  status, the age of the oldest waiting job, paused queues, live workers, each periodic entry's
  last tick. Those reads are cached for ``cache_seconds`` and, in a worker, made only by the
  leader (``database="auto"``), so fifty workers scraped every 15 s cost the database one
  ``queue_stats`` per ``cache_seconds``, not fifty.

Labels are queue, kind, outcome, status and periodic entry names: never a job id, arguments or
error text, whose values have no bound. See docs/observability.md for the list and queries.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Literal, cast

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import Collector
    from prometheus_client.utils import floatToGoString
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        'pgqueue.prometheus needs prometheus_client: pip install "pgqueue[prometheus]"'
    ) from exc

from ._async.client import AsyncClient
from ._sync.client import Client
from .errors import ConfigurationError
from .events import (
    JobFinished,
    JobsEnqueued,
    JobsRescued,
    ListenerReconnected,
)
from .records import PeriodicInfo, QueueStats

__all__ = ["DURATION_BUCKETS", "PgqueueCollector", "collector"]

logger = logging.getLogger("pgqueue")

DURATION_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    600.0, 1800.0, 3600.0, float("inf"),
)  # fmt: skip
"""Histogram buckets of job duration and queue wait, in seconds (5 ms to an hour)."""

DatabaseMode = Literal["auto", "always", "never"]
_STATUSES = ("available", "scheduled", "processing", "failed", "cancelled")
# how long a scrape waits for the database before it reports without the database's gauges
_QUERY_TIMEOUT = 5.0

Snapshot = tuple[list[QueueStats], list[PeriodicInfo]]
# a bucket's "le" label as prometheus_client writes it ("0.005", "1.0", "+Inf"); it is untyped
_le = cast(Callable[[float], str], floatToGoString)


class _Count:
    """A counter's value for one label set, and when it was first counted."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()


class _Histogram:
    """A histogram's bucket counts (not cumulative) and sum for one label set."""

    __slots__ = ("counts", "created", "sum")

    def __init__(self, size: int) -> None:
        self.counts = [0] * size
        self.sum = 0.0
        self.created = time.time()


class PgqueueCollector(Collector):
    """The metrics of one client (and of the worker it runs); see :func:`collector`."""

    def __init__(
        self,
        client: Client | AsyncClient,
        *,
        database: DatabaseMode = "auto",
        cache_seconds: float = 10.0,
        buckets: Sequence[float] = DURATION_BUCKETS,
        namespace: str = "pgqueue",
    ) -> None:
        if database not in ("auto", "always", "never"):
            raise ConfigurationError(
                f"database must be 'auto', 'always' or 'never', got {database!r}"
            )
        if not isinstance(client, Client | AsyncClient):
            raise TypeError(f"collector() takes a pgqueue Client or AsyncClient, got {client!r}")
        self._client = client
        self._database = database
        self._cache_seconds = float(cache_seconds)
        self._ns = namespace
        self._loop: asyncio.AbstractEventLoop | None = None
        if isinstance(client, AsyncClient):
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                raise ConfigurationError(
                    "collector() of an AsyncClient must be created on its event loop (in a "
                    "coroutine): the scrape runs the client's queries there"
                ) from None
        n = namespace
        self._bounds = _bucket_bounds(buckets)
        self._bound_names = [_le(b) for b in self._bounds]
        # An attempt's end is counted in plain numbers under one lock and made into metrics at
        # scrape time: through prometheus_client's Counter and Histograms (a lock per value,
        # five per event) it cost a worker four times as much (benchmarks/observability.py).
        self._counting = threading.Lock()
        self._finished: dict[tuple[str, str, str], _Count] = {}
        self._timings: dict[tuple[str, str], tuple[_Histogram, _Histogram]] = {}
        # (queue, kind, outcome) -> what an event of theirs updates
        self._cells: dict[tuple[str, str, str], tuple[_Count, _Histogram, _Histogram]] = {}
        # unregistered: collect() yields them, so one registry holds one collector
        self._enqueued = Counter(
            f"{n}_jobs_enqueued", "Jobs this process enqueued (inserted; duplicates refused are "
            "not counted).", ["queue", "kind"], registry=None,
        )  # fmt: skip
        self._reconnects = Counter(
            f"{n}_listener_reconnects", "Times the worker's LISTEN session came back after "
            "being lost.", registry=None,
        )  # fmt: skip
        self._rescued = Counter(
            f"{n}_jobs_rescued", "Jobs this process, as leader, took back from dead workers.",
            registry=None,
        )  # fmt: skip
        self._db_errors = Counter(
            f"{n}_metrics_database_errors", "Scrapes whose database reads failed (their gauges "
            "were left out).", registry=None,
        )  # fmt: skip
        self._lock = threading.Lock()  # one database refresh at a time
        self._snapshot: Snapshot | None = None
        self._snapshot_at = 0.0
        self._refreshing: asyncio.Task[None] | None = None
        self._pending: Future[Snapshot] | None = None
        self._reader: ThreadPoolExecutor | None = None
        self._failing = False
        hub = client.events
        self._unsubscribe = [
            hub.subscribe(self._on_finished, JobFinished),
            hub.subscribe(self._on_enqueued, JobsEnqueued),
            hub.subscribe(lambda e: self._reconnects.inc(), ListenerReconnected),
            hub.subscribe(lambda e: self._rescued.inc(len(e.jobs)), JobsRescued),
        ]

    # -- events (the worker's threads and tasks call these: keep them short) ----------------

    def _on_finished(self, event: JobFinished) -> None:
        key = (event.queue, event.kind, event.outcome)
        cells = self._cells.get(key) or self._add_cells(key)
        count, duration, wait = cells
        took, waited = event.duration, event.queue_wait
        bounds = self._bounds
        with self._counting:
            count.value += 1
            if took is not None:
                duration.counts[bisect_left(bounds, took)] += 1  # the first bucket >= it
                duration.sum += took
            if waited is not None and event.outcome != "released":
                waited = waited if waited > 0.0 else 0.0
                wait.counts[bisect_left(bounds, waited)] += 1
                wait.sum += waited

    def _add_cells(self, key: tuple[str, str, str]) -> tuple[_Count, _Histogram, _Histogram]:
        with self._counting:
            count = self._finished.setdefault(key, _Count())
            size = len(self._bounds)
            timing = self._timings.setdefault(key[:2], (_Histogram(size), _Histogram(size)))
            cells = self._cells[key] = (count, *timing)
        return cells

    def _on_enqueued(self, event: JobsEnqueued) -> None:
        # a batch is counted per queue and kind, not per job: .labels() locks on every call
        counts: dict[tuple[str, str], int] = {}
        for handle in event.jobs:
            key = (handle.queue, handle.kind)
            counts[key] = counts.get(key, 0) + 1
        for key, count in counts.items():
            self._enqueued.labels(*key).inc(count)

    def close(self) -> None:
        """Stop counting the client's events (unregister the collector yourself if needed)."""
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe = []
        if self._reader is not None:
            self._reader.shutdown(wait=False)

    # -- scrape -----------------------------------------------------------------------------

    def describe(self) -> Iterable[Metric]:
        """Describe nothing up front: the database gauges are only known at scrape time."""
        return ()

    def collect(self) -> Iterable[Metric]:
        """Yield the event counters, the runtime's gauges and (cached) the database's."""
        reconnects = self._reconnects.collect()
        # the created series as prometheus_client gives its own (disable_created_metrics())
        created = any(s.name.endswith("_created") for m in reconnects for s in m.samples)
        yield from self._event_metrics(created)
        yield from self._enqueued.collect()
        yield from reconnects
        yield from self._rescued.collect()
        yield from self._runtime_metrics()
        if self._reads_database():
            snapshot = self._fresh_snapshot()
            if snapshot is not None:
                yield from self._database_metrics(*snapshot)
        yield from self._db_errors.collect()

    def _event_metrics(self, created: bool) -> Iterable[Metric]:
        n = self._ns
        finished = CounterMetricFamily(
            f"{n}_jobs_finished", "Attempts that ended, by outcome: completed, retry, failed, "
            "cancelled, snoozed, released.", labels=["queue", "kind", "outcome"],
        )  # fmt: skip
        duration = HistogramMetricFamily(
            f"{n}_job_duration_seconds", "Seconds an attempt's process() ran.",
            labels=["queue", "kind"],
        )  # fmt: skip
        wait = HistogramMetricFamily(
            f"{n}_job_queue_wait_seconds", "Seconds from a job's due time (enqueue, or the end "
            "of its delay or backoff) to the start of the attempt.", labels=["queue", "kind"],
        )  # fmt: skip
        with self._counting:  # a consistent copy; the metrics are built outside the lock
            counts = [(key, c.value, c.created) for key, c in self._finished.items()]
            timings = [
                (key, family, list(h.counts), h.sum, h.created)
                for key, pair in self._timings.items()
                for family, h in zip((duration, wait), pair, strict=True)
            ]
        for key, value, since in counts:
            finished.add_metric(key, value, created=since if created else None)
        for (queue, kind), family, counts_of, total, since in timings:
            cumulative = [float(c) for c in itertools.accumulate(counts_of)]
            family.add_metric(
                [queue, kind], list(zip(self._bound_names, cumulative, strict=True)), total
            )
            if created:
                family.add_sample(f"{family.name}_created", {"queue": queue, "kind": kind}, since)
        return (finished, duration, wait)

    def _runtime_metrics(self) -> Iterable[Metric]:
        runtime = self._client.runtime
        if runtime is None:
            return
        n = self._ns
        leader = GaugeMetricFamily(f"{n}_leader", "1 while this worker process is the leader.")
        leader.add_metric([], 1.0 if runtime.is_leader else 0.0)
        yield leader
        running = GaugeMetricFamily(
            f"{n}_worker_jobs_running", "Jobs this worker process runs now.", labels=["queue"]
        )
        concurrency = GaugeMetricFamily(
            f"{n}_worker_concurrency", "Jobs this worker process may run at once.", labels=["queue"]
        )
        for queue, busy in runtime.running_by_queue().items():
            running.add_metric([queue], float(busy))
            concurrency.add_metric([queue], float(runtime.queues[queue]))
        yield running
        yield concurrency

    def _reads_database(self) -> bool:
        if self._database == "never":
            return False
        if self._database == "always":
            return True
        runtime = self._client.runtime
        return runtime is None or runtime.is_leader

    def _fresh_snapshot(self) -> Snapshot | None:
        if (
            self._snapshot is not None
            and time.monotonic() - self._snapshot_at < self._cache_seconds
        ):
            return self._snapshot
        loop = self._loop
        if loop is not None and _on_loop(loop):
            # a scrape on the client's own loop (an async /metrics endpoint) must not block it:
            # it gets the last snapshot, and the next one is read in the background
            if self._refreshing is None or self._refreshing.done():
                self._refreshing = loop.create_task(self._refresh_async())
            return self._snapshot
        with self._lock:  # concurrent scrapes: one reads, the others get its result
            if self._cached():
                return self._snapshot
            # A read outlives a scrape that gave up on it (a database that does not answer):
            # the next scrape waits for that one rather than piling up another.
            pending = self._pending
            if pending is None or pending.done():
                pending = self._pending = self._start_read()
            try:
                self._store(pending.result(_QUERY_TIMEOUT))
            except Exception as exc:  # a scrape must answer, with what it has
                self._failed(exc)
        return self._snapshot

    def _start_read(self) -> Future[Snapshot]:
        if self._loop is not None:
            return asyncio.run_coroutine_threadsafe(self._read_async(), self._loop)
        client = self._client
        assert isinstance(client, Client)
        if self._reader is None:
            self._reader = ThreadPoolExecutor(1, thread_name_prefix="pgqueue-metrics")
        return self._reader.submit(lambda: (client.queue_stats(), client.cron_list()))

    def _cached(self) -> bool:
        age = time.monotonic() - self._snapshot_at
        return self._snapshot is not None and age < self._cache_seconds

    async def _read_async(self) -> Snapshot:
        assert isinstance(self._client, AsyncClient)
        return await self._client.queue_stats(), await self._client.cron_list()

    async def _refresh_async(self) -> None:
        try:
            self._store(await asyncio.wait_for(self._read_async(), _QUERY_TIMEOUT))
        except Exception as exc:  # a scrape must answer, with what it has
            self._failed(exc)

    def _store(self, snapshot: Snapshot) -> None:
        self._snapshot, self._snapshot_at = snapshot, time.monotonic()
        self._failing = False

    def _failed(self, exc: BaseException) -> None:
        # stale numbers would say the backlog is fine: leave the gauges out instead
        self._snapshot = None
        self._db_errors.inc()
        if not self._failing:
            why = str(exc) or f"{type(exc).__name__}, after {_QUERY_TIMEOUT:.0f}s"
            logger.warning("metrics: reading the queues' state failed (%s); gauges left out", why)
        self._failing = True

    def _database_metrics(
        self, queues: list[QueueStats], entries: list[PeriodicInfo]
    ) -> Iterable[Metric]:
        n = self._ns
        jobs = GaugeMetricFamily(
            f"{n}_queue_jobs", "Jobs per queue and status (available: due and waiting; "
            "scheduled: due later); completed jobs are not counted.", labels=["queue", "status"],
        )  # fmt: skip
        oldest = GaugeMetricFamily(
            f"{n}_queue_oldest_pending_age_seconds", "Seconds since the longest-waiting "
            "available job fell due (0 when none waits): how far behind the workers are.",
            labels=["queue"],
        )  # fmt: skip
        paused = GaugeMetricFamily(
            f"{n}_queue_paused", "1 while an operator has paused the queue.", labels=["queue"]
        )
        workers = GaugeMetricFamily(
            f"{n}_queue_workers", "Live worker processes serving the queue.", labels=["queue"]
        )
        for stats in queues:
            counts = stats.counts
            for status in _STATUSES:
                jobs.add_metric([stats.queue, status], float(getattr(counts, status)))
            oldest.add_metric([stats.queue], stats.oldest_available_age or 0.0)
            paused.add_metric([stats.queue], 1.0 if stats.paused else 0.0)
            workers.add_metric([stats.queue], float(stats.workers))
        yield from (jobs, oldest, paused, workers)
        ticks = GaugeMetricFamily(
            f"{n}_periodic_last_tick_timestamp_seconds", "Unix time of the newest tick of each "
            "periodic entry that was acted on (absent before the first).", labels=["entry"],
        )  # fmt: skip
        entry_paused = GaugeMetricFamily(
            f"{n}_periodic_paused", "1 while an operator has paused the periodic entry.",
            labels=["entry"],
        )  # fmt: skip
        for entry in entries:
            if entry.last_tick is not None:
                ticks.add_metric([entry.name], entry.last_tick.timestamp())
            entry_paused.add_metric([entry.name], 1.0 if entry.paused else 0.0)
        yield from (ticks, entry_paused)


def _bucket_bounds(buckets: Sequence[float]) -> list[float]:
    """Check histogram buckets as prometheus_client does: sorted, +Inf last (added if absent)."""
    bounds = [float(b) for b in buckets]
    if bounds != sorted(bounds):
        raise ValueError("Buckets not in sorted order")
    if bounds and bounds[-1] != math.inf:
        bounds.append(math.inf)
    if len(bounds) < 2:
        raise ValueError("Must have at least two buckets")
    return bounds


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def collector(
    client: Client | AsyncClient,
    *,
    registry: CollectorRegistry | None = REGISTRY,
    database: DatabaseMode = "auto",
    cache_seconds: float = 10.0,
    buckets: Sequence[float] = DURATION_BUCKETS,
    namespace: str = "pgqueue",
) -> PgqueueCollector:
    """Return a Prometheus collector of ``client``'s metrics, registered in ``registry``.

    ``registry``: ``prometheus_client``'s default one unless given; ``None`` registers nothing
    (register it yourself). Serve the registry as you already do (``make_asgi_app``,
    ``generate_latest``...), or let ``pgqueue worker --metrics-port`` do it.

    ``database``: who reads the database's gauges at scrape time: ``"auto"`` (a client that
    runs a worker reads them only while it is the leader; one that does not, always),
    ``"always"`` or ``"never"``. Reads are cached for ``cache_seconds``. An
    :class:`AsyncClient`'s collector must be created on its event loop.
    """
    built = PgqueueCollector(
        client,
        database=database,
        cache_seconds=cache_seconds,
        buckets=buckets,
        namespace=namespace,
    )
    if registry is not None:
        registry.register(built)
    return built
