"""Prometheus metrics (issue 16): a real scrape of a worker process, and the collector's rules.

The worker process is started as a user would (``pgqueue worker --metrics-port``) and scraped
over HTTP after known jobs; the collector's own behaviour (what it reads from the database, when,
and who reads it) is checked in-process on the sync and asyncio clients.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import pgqueue
from pgqueue.prometheus import collector
from tests import jobs
from tests._sync.helpers import wait_until
from tests.test_cli_runtime import ROOT, clean_env

pytestmark = pytest.mark.timeout(120)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """The exposition's samples: (name, labels) -> value."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def start_worker(
    env: dict[str, str], log: Path, *args: str, registry: str = "tests.observability_jobs:registry"
) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "pgqueue", "worker", registry, "--log-format", "json", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=out,
        )


def served_port(log: Path, what: str) -> int:
    """The port the worker's log says it serves ``what`` on (it was started with port 0)."""

    def port() -> int | None:
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            if entry["message"].startswith(f"serving {what} on"):
                return int(entry["http_port"])
        return None

    found: int = wait_until(port, 30, what=f"the worker serves {what}")
    return found


def stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, log.read_text()


@pytest.mark.parametrize("runtime", ["sync", "asyncio"])
def test_a_worker_process_serves_the_metrics_of_known_jobs(
    database_url: str, schema: str, tmp_path: Path, db: Any, runtime: str
) -> None:
    client = pgqueue.Client.connect(database_url, settings=pgqueue.Settings(schema=schema))
    client.migrate()
    for n in range(3):
        client.add_job(jobs.Record(token="metrics", n=n))
    client.add_job(jobs.Fail(token="metrics", message="order 42 is gone"), max_attempts=1)
    client.add_job(jobs.Record(token="later"), run_in=timedelta(hours=1))
    client.add_job(jobs.Record(token="held"), queue="held")
    client.pause_queue("held")
    env = {**clean_env(), "PGQUEUE_DSN": database_url, "PGQUEUE_SCHEMA": schema}
    log = tmp_path / "worker.log"
    asyncio_flag = ["--asyncio"] if runtime == "asyncio" else []
    args = ("--queues", "default=4,ticks=1", "--metrics-port", "0", *asyncio_flag)
    proc = start_worker(env, log, *args)
    try:
        port = served_port(log, "metrics and health probes")
        table = f'"{schema}".pgqueue_jobs'
        wait_until(
            lambda: (
                db.value(
                    f"SELECT count(*) FROM {table} "
                    "WHERE queue = 'default' AND finished_at IS NOT NULL"
                )
                == 4
            ),
            60,
            what="the four due jobs ended",
        )
        wait_until(
            lambda: db.value(f"SELECT count(*) FROM {table} WHERE queue = 'ticks'"),
            30,
            what="a periodic tick",
        )
        status, text = get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        samples = parse(text)
        finished = "pgqueue_jobs_finished_total"
        assert value(samples, finished, queue="default", kind="record", outcome="completed") == 3
        assert value(samples, finished, queue="default", kind="fail", outcome="failed") == 1
        duration = "pgqueue_job_duration_seconds_count"
        assert value(samples, duration, queue="default", kind="record") == 3
        assert value(samples, duration, queue="default", kind="fail") == 1
        wait = "pgqueue_job_queue_wait_seconds_count"
        assert value(samples, wait, queue="default", kind="record") == 3
        assert value(samples, "pgqueue_leader") == 1
        assert value(samples, "pgqueue_worker_concurrency", queue="default") == 4
        # the database's gauges, read by the leader at scrape time
        jobs_gauge = "pgqueue_queue_jobs"
        assert value(samples, jobs_gauge, queue="default", status="scheduled") == 1
        assert value(samples, jobs_gauge, queue="default", status="failed") == 1
        assert value(samples, jobs_gauge, queue="default", status="available") == 0
        assert value(samples, jobs_gauge, queue="held", status="available") == 1
        assert value(samples, "pgqueue_queue_paused", queue="held") == 1
        assert value(samples, "pgqueue_queue_paused", queue="default") == 0
        held_age = value(samples, "pgqueue_queue_oldest_pending_age_seconds", queue="held")
        assert held_age
        assert held_age > 0
        tick = value(samples, "pgqueue_periodic_last_tick_timestamp_seconds", entry="every-second")
        assert tick
        assert abs(time.time() - tick) < 60
        # labels are bounded: never a job id, its arguments or an error's text
        names = {
            label
            for (name, labels) in samples
            if name.startswith("pgqueue_")
            for label, _ in labels
        }
        assert names <= {"queue", "kind", "outcome", "status", "entry", "le"}, names
        assert "order 42" not in text
        assert get(f"http://127.0.0.1:{port}/readyz")[0] == 200
        assert get(f"http://127.0.0.1:{port}/nothing")[0] == 404
        stop(proc, log)
    finally:
        if proc.poll() is None:
            proc.kill()
        client.close()


def test_a_port_in_use_is_a_clear_error(database_url: str, schema: str, tmp_path: Path) -> None:
    import socket

    taken = socket.create_server(("127.0.0.1", 0))
    try:
        env = {**clean_env(), "PGQUEUE_DSN": database_url, "PGQUEUE_SCHEMA": schema}
        log = tmp_path / "worker.log"
        args = ("--migrate", "--http-host", "127.0.0.1", "--health-port")
        proc = start_worker(env, log, *args, str(taken.getsockname()[1]))
        assert proc.wait(60) == 1
        assert "choose another port" in log.read_text()
    finally:
        taken.close()


def collected(built: Any) -> Samples:
    registry = CollectorRegistry()
    registry.register(built)
    return parse(generate_latest(registry).decode())


def test_the_collector_reads_the_database_at_most_once_per_cache_period(
    database_url: str, settings: pgqueue.Settings
) -> None:
    with pgqueue.Client.connect(database_url, settings=settings) as client:
        client.migrate()
        client.add_jobs([jobs.Record(token="c"), jobs.Record(token="c")])
        cached = collector(client, registry=None, cache_seconds=3600)
        fresh = collector(client, registry=None, cache_seconds=0)
        never = collector(client, registry=None, database="never")
        gauge = "pgqueue_queue_jobs"
        assert value(collected(cached), gauge, queue="default", status="available") == 2
        client.add_job(jobs.Record(token="c"))
        assert value(collected(cached), gauge, queue="default", status="available") == 2
        assert value(collected(fresh), gauge, queue="default", status="available") == 3
        # what this process enqueued, by queue and kind
        assert (
            value(collected(fresh), "pgqueue_jobs_enqueued_total", queue="default", kind="record")
            == 1
        )
        assert not any(name == gauge for name, _ in collected(never))
        # a client without a worker: no runtime gauges
        assert value(collected(fresh), "pgqueue_leader") is None
        for built in (cached, fresh, never):
            built.close()


def test_in_a_worker_only_the_leader_reads_the_database(
    database_url: str, settings: pgqueue.Settings
) -> None:
    first = pgqueue.Client.connect(database_url, settings=settings, registry=jobs.registry)
    second = pgqueue.Client.connect(database_url, settings=settings, registry=jobs.registry)
    try:
        first.migrate()
        metrics = [collector(c, registry=None, cache_seconds=0) for c in (first, second)]
        first.start({"default": 2})
        wait_until(lambda: first.runtime and first.runtime.is_leader, 30, what="a leader")
        second.start({"default": 2})
        token = "leader-only"
        handles = [first.add_job(jobs.Record(token=token, n=n)) for n in range(4)]
        wait_until(lambda: len(jobs.RUNS[token]) == 4, 30, what="the jobs ran")
        wait_until(
            lambda: all(first.get_job(h.id).status == "completed" for h in handles),  # type: ignore[union-attr]
            30,
            what="their outcomes recorded",
        )
        leader, follower = (collected(m) for m in metrics)
        assert value(leader, "pgqueue_leader") == 1
        assert value(follower, "pgqueue_leader") == 0
        assert value(leader, "pgqueue_queue_jobs", queue="default", status="processing") == 0
        assert not any(name == "pgqueue_queue_jobs" for name, _ in follower)
        ran = sum(
            value(
                s,
                "pgqueue_jobs_finished_total",
                queue="default",
                kind="record",
                outcome="completed",
            )
            or 0
            for s in (leader, follower)
        )
        assert ran == 4  # each process counts the jobs it ran
    finally:
        for c in (second, first):
            c.stop()
            c.close()


def test_bad_arguments_are_refused(database_url: str, settings: pgqueue.Settings) -> None:
    with pytest.raises(TypeError, match="Client or AsyncClient"):
        collector(object(), registry=None)  # type: ignore[arg-type]
    with (
        pgqueue.Client.connect(database_url, settings=settings) as client,
        pytest.raises(pgqueue.ConfigurationError, match="'auto', 'always' or 'never'"),
    ):
        collector(client, registry=None, database="leader")  # type: ignore[arg-type]


def test_an_async_client_is_read_on_its_own_loop(
    database_url: str, settings: pgqueue.Settings
) -> None:
    async def main() -> None:
        client = await pgqueue.AsyncClient.connect(database_url, settings=settings)
        async with client:
            await client.migrate()
            await client.add_job(jobs.Record(token="a"))
            built = collector(client, registry=None, cache_seconds=0)
            gauge = (
                "pgqueue_queue_jobs",
                frozenset({("queue", "default"), ("status", "available")}),
            )
            # scraped from another thread (a metrics server's): the query runs on the loop
            from_thread = await asyncio.to_thread(collected, built)
            assert from_thread[gauge] == 1
            # scraped on the loop itself: never blocks it; the read is done in the background
            built_on_loop = collector(client, registry=None, cache_seconds=3600)
            assert gauge not in collected(built_on_loop)
            deadline = time.monotonic() + 10
            while gauge not in collected(built_on_loop):
                assert time.monotonic() < deadline, "the background read never landed"
                await asyncio.sleep(0.01)
            built.close()
            built_on_loop.close()

    asyncio.run(main())
    loop = asyncio.new_event_loop()
    try:
        client = loop.run_until_complete(
            pgqueue.AsyncClient.connect(database_url, settings=settings)
        )
        with pytest.raises(pgqueue.ConfigurationError, match="on its event loop"):
            collector(client, registry=None)
        loop.run_until_complete(client.close())
    finally:
        loop.close()


def test_a_scrape_answers_while_the_database_read_hangs(
    database_url: str, settings: pgqueue.Settings, db: Any
) -> None:
    with pgqueue.Client.connect(database_url, settings=settings) as client:
        client.migrate()
        client.add_job(jobs.Record(token="hang"))
        built = collector(client, registry=None, cache_seconds=0)
        table = f'"{settings.schema}".pgqueue_jobs'
        locked = threading.Event()
        release = threading.Event()

        def hold_lock() -> None:
            # an ACCESS EXCLUSIVE lock makes queue_stats wait, as a stuck database would
            import psycopg

            with psycopg.connect(database_url) as conn:
                conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
                locked.set()
                release.wait(30)

        holder = threading.Thread(target=hold_lock)
        holder.start()
        try:
            assert locked.wait(10)
            started = time.monotonic()
            samples = collected(built)
            assert time.monotonic() - started < 8  # the scrape gave up on the read
            assert not any(name == "pgqueue_queue_jobs" for name, _ in samples)
            assert value(samples, "pgqueue_metrics_database_errors_total") == 1
        finally:
            release.set()
            holder.join()
        wait_until(
            lambda: (
                value(collected(built), "pgqueue_queue_jobs", queue="default", status="available")
                is not None
            ),
            10,
            what="the gauges back",
        )
        built.close()


def test_the_docs_list_every_metric(database_url: str, settings: pgqueue.Settings) -> None:
    from tests.test_docs import table_names

    with pgqueue.Client.connect(database_url, settings=settings, registry=jobs.registry) as c:
        c.migrate()
        built = collector(c, registry=None, database="always")
        c.start({"default": 1})
        try:
            families = {family.name for family in built.collect()}
        finally:
            c.stop()
            built.close()
    # prometheus_client names a counter's family without its _total suffix
    documented = {
        name.removesuffix("_total") for name in table_names("observability.md", "### The metrics")
    }
    assert documented == families
