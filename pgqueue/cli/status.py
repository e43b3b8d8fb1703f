"""``pgqueue workers`` and ``pgqueue stats``: who is running, and how far behind each queue is.

Written once on a :class:`~pgqueue.cli._common.Session`, on the admin API's ``list_workers``
and ``queue_stats``. ``stats --watch`` reads again every few seconds on the same connection:
redrawn in place on a terminal (rich's Live), one snapshot after another elsewhere. Ctrl-C
(SIGINT) is how a watch ends, so it ends it with status 0.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from types import FrameType
from typing import Any

import rich_click as click
from rich.console import Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .. import QueueStats, StatusCounts, WorkerInfo
from ._common import AdminCommand, Session, help_panels, target_options
from ._output import (
    age,
    duration_text,
    format_option,
    local_time,
    new_table,
    out_console,
    print_json,
    print_jsonl,
    resolve_format,
    text,
)

__all__ = ["stats", "workers"]


@click.command(
    "workers", cls=AdminCommand, short_help="list the live worker processes and what they run"
)
@help_panels()
@format_option
@target_options
def workers(
    output: str | None, dsn: str | None, driver: str | None, schema: str, prefix: str
) -> None:
    """List the registered worker processes: host, pid, queues, leader, heartbeat, jobs running."""
    fmt = resolve_format(output)
    with Session.from_options(dsn, driver, schema, prefix) as session:
        found: list[WorkerInfo] = session.run(lambda c: c.list_workers())
    if fmt == "json":
        print_json(found)
    elif fmt == "jsonl":
        print_jsonl(found)
    else:
        out_console().print(_workers_table(found))


def _workers_table(found: list[WorkerInfo]) -> Table | Text:
    if not found:
        return Text("no worker processes are registered", style="dim")
    now = datetime.now(UTC)
    table = new_table()
    for name in ("INSTANCE", "HOST", "PID", "QUEUES", "LEADER", "HEARTBEAT", "STARTED"):
        table.add_column(name, justify="right" if name == "PID" else "left")
    table.add_column("RUNNING")
    for w in found:
        running = ", ".join(f"{job.id} ({job.kind})" for job in w.running[:5])
        if len(w.running) > 5:
            running += f", ... {len(w.running)} in all"
        table.add_row(
            text(str(w.instance_id)[:8]),
            text(w.hostname),
            text(w.pid),
            text(",".join(f"{q}={n}" for q, n in w.queues.items())),
            text("yes", "bold green") if w.is_leader else text(""),
            text(f"{duration_text(round(w.heartbeat_age))} ago"),
            text(f"{local_time(w.started_at)} ({age(w.started_at, now)})"),
            text(running or "idle", "" if running else "dim"),
        )
    return table


@click.command(
    "stats", cls=AdminCommand, short_help="jobs per queue and kind, backlog age, paused, workers"
)
@help_panels()
@click.option(
    "--queue",
    multiple=True,
    metavar="QUEUE",
    help="only this queue (repeat for several)",
)
@click.option(
    "--completed",
    is_flag=True,
    help="count completed jobs too (reads every retained completed job: slower)",
)
@click.option(
    "--watch",
    metavar="SECONDS",
    type=click.FloatRange(0.1, 86_400),
    help="read again every SECONDS until Ctrl-C: redrawn on a terminal, else one snapshot "
    "after another (one JSON line each with json or jsonl)",
)
@click.option(
    "--count",
    type=click.IntRange(1),
    hidden=True,
    help="with --watch: stop after this many snapshots (for tests and scripts)",
)
@format_option
@target_options
def stats(
    queue: tuple[str, ...],
    completed: bool,
    watch: float | None,
    count: int | None,
    output: str | None,
    dsn: str | None,
    driver: str | None,
    schema: str,
    prefix: str,
) -> None:
    """Show each queue's jobs by status and kind, how far behind it is, and its workers.

    BEHIND is how long the longest-waiting due job has waited. A kind marked "(no worker)"
    has jobs waiting that no live worker of the queue runs.
    """
    fmt = resolve_format(output)
    queues = list(queue) or None
    with Session.from_options(dsn, driver, schema, prefix) as session:

        def fetch() -> list[QueueStats]:
            found: list[QueueStats] = session.run(
                lambda c: c.queue_stats(queues, completed=completed)
            )
            return found

        if watch is None:
            found = fetch()
            if fmt == "json":
                print_json(found)
            elif fmt == "jsonl":
                print_jsonl(found)
            else:
                out_console().print(_stats_view(found, completed))
            return
        _watch(fetch, fmt, watch, count, completed)


def _watch(
    fetch: Callable[[], list[QueueStats]],
    fmt: str,
    interval: float,
    count: int | None,
    completed: bool,
) -> None:
    # Ctrl-C (SIGINT) is how a watch ends, with status 0. The first one is caught by a handler
    # and ends the watch between two readings: a KeyboardInterrupt raised in the middle of a
    # query could leave the connection pool unable to close. A second one interrupts as usual.
    stop = threading.Event()

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        stop.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, on_sigint) if in_main else None
    try:
        _watch_loop(fetch, fmt, interval, count, completed, stop)
    except KeyboardInterrupt:
        return
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _watch_loop(
    fetch: Callable[[], list[QueueStats]],
    fmt: str,
    interval: float,
    count: int | None,
    completed: bool,
    stop: threading.Event,
) -> None:
    shown = 0
    if fmt == "table" and sys.stdout.isatty():
        console = out_console()
        with Live(
            _stats_view(fetch(), completed, live=True),
            console=console,
            auto_refresh=False,
        ) as live:
            shown = 1
            while (count is None or shown < count) and not stop.wait(interval):
                live.update(_stats_view(fetch(), completed, live=True), refresh=True)
                shown += 1
        return
    while not stop.is_set():
        found = fetch()
        at = datetime.now(UTC)
        if fmt == "table":
            console = out_console()
            console.print(Text(f"-- {local_time(at)}", style="dim"))
            console.print(_stats_view(found, completed))
            sys.stdout.flush()
        else:
            print_jsonl([{"at": at, "queues": found}])
        shown += 1
        if count is not None and shown >= count:
            return
        stop.wait(interval)


_COUNTS = ("available", "scheduled", "processing", "failed", "cancelled")


def _stats_view(found: list[QueueStats], completed: bool, live: bool = False) -> RenderableType:
    parts: list[Any] = []
    if live:
        parts.append(Text(f"{local_time(datetime.now(UTC))}  (Ctrl-C to stop)", style="dim"))
    if not found:
        parts.append(Text("no queues yet", style="dim"))
        return Group(*parts)
    table = new_table()
    table.add_column("QUEUE / KIND", overflow="fold")
    for count in _COUNTS:
        header = "RUNNING" if count == "processing" else count.upper()
        table.add_column(header, justify="right", no_wrap=True)
    if completed:
        table.add_column("COMPLETED", justify="right", no_wrap=True)
    table.add_column("BEHIND", justify="right", no_wrap=True)
    table.add_column("WORKERS", justify="right", no_wrap=True)
    now = datetime.now(UTC)
    for q in found:
        name = Text(q.queue, style="bold")
        if q.paused:
            name.append(f" paused {age(q.paused_at, now)}", style="bold yellow")
        table.add_row(
            name,
            *_count_cells(q.counts, completed),
            text(duration_text(q.oldest_available_age) if q.oldest_available_age else ""),
            text(f"{q.workers} ({q.concurrency} slots)" if q.workers else "none"),
            end_section=not q.kinds,
        )
        kinds = sorted(q.kinds.items())
        for n, (kind, counts) in enumerate(kinds):
            behind = (
                duration_text((now - counts.oldest_available_at).total_seconds())
                if counts.oldest_available_at
                else ""
            )
            label = Text(f"  {kind}")
            if kind in q.unknown_kinds:
                label.append(" (no worker)", style="bold red")
            table.add_row(
                label,
                *_count_cells(counts, completed),
                text(behind),
                text(""),
                end_section=n == len(kinds) - 1,
            )
    parts.append(table)
    return Group(*parts)


def _count_cells(counts: StatusCounts, completed: bool) -> list[Text]:
    cells = [
        text(getattr(counts, name), "red" if name == "failed" and counts.failed else "")
        for name in _COUNTS
    ]
    if completed:
        cells.append(text("" if counts.completed is None else counts.completed))
    return cells
