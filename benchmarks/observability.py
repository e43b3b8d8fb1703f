"""What observability costs a draining worker: ``make bench-observability`` (``--help``).

One process, one database of its own. Each drain empties the jobs table, pre-inserts N trivial
jobs (``add_jobs``: COPY; not timed), runs ``VACUUM ANALYZE`` and a ``CHECKPOINT``, starts a
worker at concurrency 100 (``run.py``'s for pgqueue) and times it from the first job's start
until the jobs table says none is left (outcomes written); every job must have run exactly
once. The worker's client is set up in one of these variants:

- ``bare``: no event subscriber at all (the log subscriber unsubscribed), no tracer: the floor;
- ``default``: as shipped: only the log subscriber, with the ``pgqueue`` logger at INFO (it
  declines completed jobs, so their events are not even built);
- ``prometheus``: ``pgqueue.prometheus.collector(client, registry=CollectorRegistry())``,
  scraped after the drain, which must have counted every job;
- ``otel``: ``pgqueue.otel.instrument()`` with the SDK's ``TracerProvider`` (no span processor)
  and ``MeterProvider`` (no reader);
- ``otel+export``: the same SDK with a ``SimpleSpanProcessor`` on an in-memory exporter and an
  in-memory metric reader, which must hold a span and a count for every job.

In the OTel variants the same (instrumented) client enqueues, so every job carries the trace
context of its enqueue and every attempt's span links to it, as when both sides are traced.
Rounds interleave the variants, forwards then backwards (A B C D, D C B A, ...), so drift in
the machine's state hits all of them alike; the sync runtime (``Client``, psycopg) and the
asyncio one (``AsyncClient``, asyncpg, under uvloop) take turns inside each round. A cost is
``1 - variant / reference`` in jobs/s, worked out within each round (median over the rounds,
with their range). SPEC's targets: ``default`` within 3 % of ``bare``, ``prometheus`` within
15 % of ``default``. The drains vary by ±10-20 % on a 2-core VM, so the run also times, alone,
the calls the worker makes into the events seam and the tracer per job (``seam_costs``): the
CPU each variant adds, without the noise. Results go to
``benchmarks/results/<UTC time>-observability.json`` and the section between the
``observability`` markers of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import itertools
import json
import logging
import os
import pstats
import shutil
import threading
import time
import timeit
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import psycopg
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import CollectorRegistry

import pgqueue
import pgqueue.otel
import pgqueue.prometheus
from pgqueue.events import EventHub, JobCompleted, JobFailed, JobStarted
from pgqueue.execution import ClaimedJob, Outcome, Running
from pgqueue.runtime_state import finished_class, job_finished, job_started, queue_wait

from .admin_queries import machine
from .harness import Harness, _cpu_since, _postgres_cpu, _summary
from .observability_report import costs, write_report
from .subjects import pgqueue_subject
from .subjects.pgqueue_subject import ASYNC_REGISTRY, SYNC_REGISTRY, NoopAsync, NoopSync
from .sweep import PGQUEUE_BEST

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

VARIANTS = ("bare", "default", "prometheus", "otel", "otel+export")
# runtime -> the benchmark subject's mode (driver and URL scheme): pgqueue_subject.MODES
RUNTIMES = {"sync": "psycopg-sync", "async": "asyncpg"}
REMAINING_SQL = pgqueue_subject.PgQueueSubject.remaining_sql
FINISHED = "pgqueue_jobs_finished_total"
LABELS = {"queue": "default", "kind": "bench.noop"}


# -- the variants -----------------------------------------------------------------------------


class Setup:
    """What a variant attached to one client; ``verify`` checks it saw the drain's jobs."""

    def __init__(self, variant: str, client: Any) -> None:
        self.variant = variant
        self.client = client
        self.registry: CollectorRegistry | None = None
        self.providers: tuple[TracerProvider, MeterProvider] | None = None
        self.exporter: InMemorySpanExporter | None = None
        self.reader: InMemoryMetricReader | None = None
        if variant == "bare":
            client.log_subscription()
        elif variant == "prometheus":
            self.registry = CollectorRegistry()
            pgqueue.prometheus.collector(client, registry=self.registry)
        elif variant.startswith("otel"):
            tracer_provider, readers = TracerProvider(), []
            if variant == "otel+export":
                self.exporter, self.reader = InMemorySpanExporter(), InMemoryMetricReader()
                tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
                readers.append(self.reader)
            self.providers = tracer_provider, MeterProvider(metric_readers=readers)
            pgqueue.otel.instrument(
                client, tracer_provider=tracer_provider, meter_provider=self.providers[1]
            )
        elif variant != "default":
            raise SystemExit(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")

    def verify(self, n: int) -> dict[str, Any]:
        """Fail the run unless the variant is what it claims and counted ``n`` jobs.

        Blocking (a Prometheus scrape of an AsyncClient's collector waits for its loop): an
        asyncio caller runs it in a thread.
        """
        hub = self.client.events
        logs_failures, logs_completions = hub.wants(JobFailed), hub.wants(JobCompleted)
        proof: dict[str, Any] = {"tracer": type(hub.tracer).__name__ if hub.tracer else None}
        if self.variant == "bare":
            ok = not logs_failures and hub.tracer is None
        elif self.variant == "default":
            ok = logs_failures and not logs_completions and hub.tracer is None
        elif self.registry is not None:
            finished = self.registry.get_sample_value(FINISHED, {**LABELS, "outcome": "completed"})
            durations = self.registry.get_sample_value("pgqueue_job_duration_seconds_count", LABELS)
            enqueued = self.registry.get_sample_value("pgqueue_jobs_enqueued_total", LABELS)
            proof.update(finished=finished, durations=durations, enqueued=enqueued)
            ok = finished == durations == enqueued == n
        else:
            ok = hub.tracer is not None
            if self.exporter is not None and self.reader is not None:
                spans = self.exporter.get_finished_spans()
                proof["process_spans"] = sum(s.name == "process default" for s in spans)
                proof["linked"] = sum(bool(s.links) for s in spans)
                proof["consumed"] = _otel_sum(self.reader, "messaging.client.consumed.messages")
                ok = ok and proof["process_spans"] == proof["linked"] == proof["consumed"] == n
        if not ok:
            raise RuntimeError(f"variant {self.variant} did not see the {n:,} jobs: {proof}")
        return proof

    def close(self) -> None:
        """Shut the OTel providers down and drop what the exporter kept."""
        if self.providers is not None:
            for provider in self.providers:
                provider.shutdown()
        if self.exporter is not None:
            self.exporter.clear()


def _otel_sum(reader: InMemoryMetricReader, name: str) -> float:
    data = reader.get_metrics_data()
    return sum(
        point.value
        for resource in (data.resource_metrics if data else ())
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    )


# -- one drain --------------------------------------------------------------------------------


class Tally:
    """The jobs' handler: counts each job (exactly once, checked) and notes the first start."""

    def __init__(self, n: int, done: Callable[[], None]) -> None:
        self.n = n
        self.counts = bytearray(n)
        self.first: float | None = None
        self._seq = itertools.count(1)  # next() on it is atomic under the GIL: job threads
        self._done = done

    def record(self, i: int) -> None:
        """Count job ``i`` (pgqueue_subject's Noop jobs call this)."""
        if self.first is None:
            self.first = time.perf_counter()
        self.counts[i] += 1
        if next(self._seq) == self.n:
            self._done()

    def check(self) -> None:
        """Fail the run unless every job ran exactly once."""
        if self.counts != b"\x01" * self.n:
            missing, repeated = self.counts.count(0), sum(c > 1 for c in self.counts)
            raise RuntimeError(f"exactly-once violated: {missing} missing, {repeated} repeated")


def _measures(
    tally: Tally, end: float, cpu: tuple[float, float], pg: tuple[Any, Any]
) -> dict[str, float]:
    assert tally.first is not None
    n = tally.n
    return {
        "jobs_per_s": n / (end - tally.first),
        "seconds": end - tally.first,
        "worker_cpu_us_per_job": (cpu[1] - cpu[0]) / n * 1e6,
        "postgres_cpu_us_per_job": _cpu_since(*pg) / n * 1e6,
    }


def drain_sync(url: str, variant: str, n: int, concurrency: int) -> dict[str, Any]:
    """Drain ``n`` jobs with a sync ``Client`` (psycopg) set up as ``variant``."""
    client = pgqueue.Client.connect(url, driver="psycopg", registry=SYNC_REGISTRY)
    setup: Setup | None = None
    try:
        setup = Setup(variant, client)
        client.driver.exec("TRUNCATE pgqueue_jobs CASCADE", ())
        client.add_jobs([NoopSync(i=i) for i in range(n)])
        client.driver.exec("VACUUM ANALYZE pgqueue_jobs", ())
        client.driver.exec("CHECKPOINT", ())  # every drain starts with no dirty pages
        done = threading.Event()
        tally = Tally(n, done.set)
        pgqueue_subject._record = tally.record
        gc.collect()
        with psycopg.connect(url, autocommit=True) as poll:
            cpu0, pg0 = time.process_time(), _postgres_cpu()
            client.start({"default": concurrency})
            if not done.wait(max(120.0, n / 50)):
                raise RuntimeError(f"{variant}: the drain did not finish")
            while poll.execute(REMAINING_SQL).fetchone() != (0,):
                time.sleep(0.001)
            end = time.perf_counter()
            cpu1, pg1 = time.process_time(), _postgres_cpu()
        client.stop()
        tally.check()
        return {**_measures(tally, end, (cpu0, cpu1), (pg0, pg1)), "proof": setup.verify(n)}
    finally:
        if setup is not None:
            setup.close()
        client.close()


async def drain_async(url: str, variant: str, n: int, concurrency: int) -> dict[str, Any]:
    """Drain ``n`` jobs with an ``AsyncClient`` (asyncpg) set up as ``variant``."""
    client = await pgqueue.AsyncClient.connect(url, driver="asyncpg", registry=ASYNC_REGISTRY)
    setup: Setup | None = None
    try:
        setup = Setup(variant, client)  # on the loop: an AsyncClient's collector must be
        await client.driver.exec("TRUNCATE pgqueue_jobs CASCADE", ())
        await client.add_jobs([NoopAsync(i=i) for i in range(n)])
        await client.driver.exec("VACUUM ANALYZE pgqueue_jobs", ())
        await client.driver.exec("CHECKPOINT", ())
        done = asyncio.Event()  # set by a job: async jobs run on this loop
        tally = Tally(n, done.set)
        pgqueue_subject._record = tally.record
        gc.collect()
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as poll:
            cpu0, pg0 = time.process_time(), _postgres_cpu()
            await client.start({"default": concurrency})
            await asyncio.wait_for(done.wait(), max(120.0, n / 50))
            while await (await poll.execute(REMAINING_SQL)).fetchone() != (0,):
                await asyncio.sleep(0.001)
            end = time.perf_counter()
            cpu1, pg1 = time.process_time(), _postgres_cpu()
        await client.stop()
        tally.check()
        proof = await asyncio.to_thread(setup.verify, n)  # a scrape, as a /metrics thread would
        return {**_measures(tally, end, (cpu0, cpu1), (pg0, pg1)), "proof": proof}
    finally:
        if setup is not None:
            setup.close()
        await client.close()


def drain(runtime: str, url: str, variant: str, n: int, concurrency: int) -> dict[str, Any]:
    """One timed drain of ``n`` jobs on ``runtime`` (``sync`` or ``async``)."""
    if runtime == "sync":
        return drain_sync(url, variant, n, concurrency)
    return pgqueue_subject._run_async(drain_async(url, variant, n, concurrency))  # type: ignore[no-any-return]


def profile(runtime: str, url: str, variant: str, n: int, concurrency: int, top: int) -> None:
    """Drain once under cProfile (every thread of the process) and print where time went."""
    profilers: list[cProfile.Profile] = []

    def per_thread(*_: Any) -> None:  # the first call in a new thread starts its profiler
        p = cProfile.Profile()
        profilers.append(p)
        p.enable()

    main = cProfile.Profile()
    threading.setprofile(per_thread)
    main.enable()
    try:
        result = drain(runtime, url, variant, n, concurrency)
    finally:
        main.disable()
        threading.setprofile(None)  # type: ignore[arg-type]
    for p in profilers:
        with contextlib.suppress(Exception):
            p.disable()
    stats = pstats.Stats(main)
    for p in profilers:
        with contextlib.suppress(TypeError):  # a thread that never ran profiled code
            stats.add(p)
    print(f"{runtime} {variant}: {result['jobs_per_s']:,.0f} jobs/s under the profiler")
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(r"pgqueue/(events|prometheus|otel|tracing)", top)


# -- the seam alone ---------------------------------------------------------------------------


def seam_costs(url: str, variants: list[str], calls: int, reps: int = 5) -> dict[str, float]:
    """Per completed job, µs: what the executor's calls into the events seam and the tracer cost.

    Measured alone, in one thread: the executor's sequence for a job that completes
    (``pgqueue/_sync/runtime/executor.py``): ask for ``JobStarted``, run ``process`` (a no-op)
    through the tracer if one is installed, ask for ``JobCompleted`` and build and emit it if
    wanted. ``calls`` calls per variant, the variants in turn, ``reps`` times; the fastest
    repetition counts. Without the database, the driver or the event loop in the way, this is
    the worker CPU each variant adds, which the drains see through their noise.
    """
    calls_of: dict[str, Callable[[], None]] = {}
    with contextlib.ExitStack() as stack:
        for variant in variants:
            client = pgqueue.Client.connect(url, driver="psycopg", registry=SYNC_REGISTRY)
            stack.callback(client.close)
            setup = Setup(variant, client)
            stack.callback(setup.close)
            carrier: dict[str, str] | None = None
            if setup.providers is not None:  # the drains' jobs carry their enqueue's context
                carrier = {}
                sent = setup.providers[0].get_tracer("bench").start_span("send default")
                TraceContextTextMapPropagator().inject(carrier, trace.set_span_in_context(sent))
            job = ClaimedJob(
                id=1, kind="bench.noop", queue="default", payload_text='{"i": 0}', attempt=1,
                max_attempts=25, scheduled_for=datetime.now(UTC), priority=0, lease=None,
                trace=carrier,
            )  # fmt: skip
            calls_of[variant] = _one_job(client.events, job)
        best = dict.fromkeys(variants, float("inf"))
        for _ in range(reps):
            for variant, one in calls_of.items():
                best[variant] = min(best[variant], timeit.timeit(one, number=calls))
    return {variant: seconds / calls * 1e6 for variant, seconds in best.items()}


def _one_job(hub: EventHub, job: ClaimedJob) -> Callable[[], None]:
    instance = uuid.uuid4()
    complete = Outcome("complete")

    def one() -> None:  # pgqueue/_sync/runtime/executor.py, for a job that completes
        running = Running(job)
        if hub.wants(JobStarted):
            running.queue_wait = queue_wait(job)
            hub.emit(job_started(running, instance))
        process: Callable[[Any], Any] = _noop
        if hub.tracer is not None:
            process = hub.tracer.wrap_process(job, process)
        process(None)
        if hub.wants(finished_class(complete)):
            hub.emit(job_finished(running, complete, instance))

    return one


def _noop(ctx: Any) -> None:
    return None


# -- the run -----------------------------------------------------------------------------------


def _versions() -> dict[str, str]:
    out = {}
    dists = ("pgqueue", "prometheus-client", "opentelemetry-sdk", "psycopg", "asyncpg", "uvloop")
    for dist in dists:
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--dsn",
        default=os.environ.get(
            "PGQUEUE_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
        help="an admin connection: the run creates its own database and drops it at the end",
    )
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per drain")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=PGQUEUE_BEST)
    parser.add_argument("--runtimes", default=",".join(RUNTIMES), help="sync, async or both")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument(
        "--quick", action="store_true", help="2,000 jobs, 2 rounds: a smoke test (no docs)"
    )
    parser.add_argument("--no-report", action="store_true", help="leave docs/benchmarks.md")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--report", type=Path, help="only rewrite the docs from this results file")
    parser.add_argument(
        "--profile",
        metavar="VARIANT",
        help="instead: one drain of VARIANT under cProfile (on the first of --runtimes)",
    )
    args = parser.parse_args()
    if args.report:
        write_report(json.loads(args.report.read_text()), args.report.resolve())
        return
    if args.quick:
        args.jobs, args.rounds = 2_000, 2
    runtimes = [r for r in args.runtimes.split(",") if r]
    variants = [v for v in args.variants.split(",") if v]
    for name in runtimes:
        if name not in RUNTIMES:
            raise SystemExit(f"unknown runtime {name!r}: sync or async")
    # as `pgqueue worker` runs: the pgqueue logger at INFO (shown from WARNING on, here)
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)
    logging.getLogger().addHandler(handler)
    logging.getLogger("pgqueue").setLevel(logging.INFO)

    harness = Harness(args.dsn, verbose=False)
    started, load_before = time.monotonic(), os.getloadavg()
    db, dsn = harness.fresh_db()
    runs: list[dict[str, Any]] = []
    try:
        subject = pgqueue_subject.PgQueueSubject(dsn, RUNTIMES[runtimes[0]])
        subject.install()
        urls = {r: pgqueue_subject.PgQueueSubject(dsn, RUNTIMES[r]).url for r in runtimes}
        if args.profile:
            runtime = runtimes[0]
            profile(runtime, urls[runtime], args.profile, args.jobs, args.concurrency, 40)
            return
        for runtime in runtimes:  # warm-up: imports, pools, prepared statements, the page cache
            drain(runtime, urls[runtime], "default", min(args.jobs, 5_000), args.concurrency)
        for rnd in range(args.rounds):
            order = variants if rnd % 2 == 0 else variants[::-1]
            for runtime in runtimes:
                for variant in order:
                    result = drain(runtime, urls[runtime], variant, args.jobs, args.concurrency)
                    runs.append({"runtime": runtime, "variant": variant, "round": rnd, **result})
                    print(
                        f"[{time.monotonic() - started:6.1f}s] round {rnd} {runtime:5} "
                        f"{variant:12} {result['jobs_per_s']:9,.0f} jobs/s, worker "
                        f"{result['worker_cpu_us_per_job']:5.0f} µs/job, PostgreSQL "
                        f"{result['postgres_cpu_us_per_job']:5.0f} µs/job",
                        flush=True,
                    )
        seam = seam_costs(urls[runtimes[0]], variants, 1_000 if args.quick else 10_000)
    finally:
        harness.drop_db(db)
        shutil.rmtree(harness.tmp, ignore_errors=True)

    keys = ("jobs_per_s", "worker_cpu_us_per_job", "postgres_cpu_us_per_job")
    summary = {
        rt: {
            v: {k: _summary([r[k] for r in runs if (r["runtime"], r["variant"]) == (rt, v)])
                for k in keys}
            for v in variants
        }
        for rt in runtimes
    }  # fmt: skip
    doc = {
        "meta": {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": machine(args.dsn),
            "load_average": {"before": load_before[0], "after": os.getloadavg()[0]},
            "versions": _versions(),
            "jobs": args.jobs,
            "rounds": args.rounds,
            "concurrency": args.concurrency,
            "runtimes": {r: f"{'Client' if r == 'sync' else 'AsyncClient'}, {RUNTIMES[r]}"
                         for r in runtimes},
            "variants": variants,
            "wall_seconds": round(time.monotonic() - started, 1),
        },
        "summary": summary,
        "seam_us_per_job": seam,
        "costs": costs(runs, runtimes, seam),
        "runs": runs,
    }  # fmt: skip
    for c in doc["costs"]:
        print(
            f"{c['runtime']:5} {c['variant']:12} vs {c['reference']:8}: "
            f"{c['cost_pct']['median']:+5.1f} % ({c['cost_pct']['min']:+.1f} .. "
            f"{c['cost_pct']['max']:+.1f}), worker "
            f"{c['worker_cpu_us_per_job_added']['median']:+.1f} µs/job, seam alone "
            f"{c['seam_us_added'] or 0:+.2f} µs/job"
            + ("" if c["met"] is None else f"  target ≤ {c['target_pct']:g} %: {c['met']}")
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or RESULTS / f"{stamp}-observability{'-quick' if args.quick else ''}.json"
    out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(f"results: {out.relative_to(ROOT) if out.resolve().is_relative_to(ROOT) else out}")
    if not (args.quick or args.no_report):
        write_report(doc, out.resolve())


if __name__ == "__main__":
    main()
