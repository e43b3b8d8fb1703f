"""``pgqueue queues``: list queues, pause and resume them, purge their finished jobs.

Written once on a :class:`~pgqueue.cli._common.Session`, on the admin API's ``queue_stats``,
``pause_queue``, ``resume_queue`` and ``purge_jobs``. ``"*"`` (or ``--all``) names every
queue, as it does for the API.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import rich_click as click
from click.exceptions import Exit
from rich.table import Table
from rich.text import Text

from .. import BulkResult, QueueStats
from ..job_filter import MAX_BATCH_SIZE
from ._actions import confirm, progress, report, yes_option
from ._common import (
    BAD_INPUT,
    NOTHING_MATCHED,
    OrderedGroup,
    Session,
    fail,
    help_panels,
    target_options,
)
from ._output import (
    age,
    duration_text,
    format_option,
    jsonable,
    new_table,
    out_console,
    print_json,
    print_jsonl,
    read_duration,
    resolve_format,
    text,
)

__all__ = ["queue_row", "queues"]

ALL_QUEUES = "*"
"""The queue name that means every queue (as ``--all``)."""
FINISHED = ("completed", "failed", "cancelled")
"""The statuses ``queues purge`` deletes."""


@click.group("queues", cls=OrderedGroup, short_help="list, pause, resume or purge queues")
def queues() -> None:
    """See queues, pause and resume them, and purge their old finished jobs."""


def queue_row(stats: QueueStats) -> dict[str, Any]:
    """Return one queue as ``queues list`` prints it in JSON: its stats without the kinds."""
    row: dict[str, Any] = jsonable(stats)
    row.pop("kinds")
    return row


@queues.command("list", short_help="list queues: backlog, paused or not, workers")
@help_panels()
@format_option
@target_options
def list_queues(
    output: str | None, dsn: str | None, driver: str | None, schema: str, prefix: str
) -> None:
    """List every queue: jobs waiting, how far behind, paused or not, and its workers."""
    fmt = resolve_format(output)
    with Session.from_options(dsn, driver, schema, prefix) as session:
        found: list[QueueStats] = session.run(lambda c: c.queue_stats())
    if fmt == "json":
        print_json([queue_row(q) for q in found])
    elif fmt == "jsonl":
        print_jsonl(queue_row(q) for q in found)
    else:
        out_console().print(_queues_table(found))


def _queues_table(found: list[QueueStats]) -> Table | Text:
    if not found:
        return Text("no queues yet", style="dim")
    now = datetime.now(UTC)
    table = new_table()
    table.add_column("QUEUE")
    table.add_column("STATE", no_wrap=True)
    for name in ("AVAILABLE", "SCHEDULED", "RUNNING", "FAILED", "CANCELLED", "BEHIND"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("WORKERS", justify="right", no_wrap=True)
    for q in found:
        c = q.counts
        table.add_row(
            text(q.queue, "bold"),
            text(f"paused {age(q.paused_at, now)}", "bold yellow") if q.paused else text("active"),
            text(c.available),
            text(c.scheduled),
            text(c.processing),
            text(c.failed, "red" if c.failed else ""),
            text(c.cancelled),
            text(duration_text(q.oldest_available_age) if q.oldest_available_age else ""),
            text(
                f"{q.workers} ({q.concurrency} slots)" if q.workers else "none",
                "" if q.workers else "dim",
            ),
        )
    return table


def _one_queue(queue: str | None, every: bool, verb: str) -> str:
    if every and queue not in (None, ALL_QUEUES):
        fail(
            f"--all means every queue: leave out the queue name {queue!r}, or drop --all", BAD_INPUT
        )
    if not every and queue is None:
        fail(f"{verb} which queue? name one, or pass --all (or '*') for every queue", BAD_INPUT)
    return ALL_QUEUES if every else str(queue)


def _toggle(
    verb: str, queue: str | None, every: bool, output: str | None, session: Session
) -> None:
    name = _one_queue(queue, every, verb)
    fmt = resolve_format(output)
    with session:
        if verb == "pause":
            changed: list[str] = session.run(lambda c: c.pause_queue(name))
        else:
            changed = session.run(lambda c: c.resume_queue(name))
    past = "paused" if verb == "pause" else "resumed"
    if fmt == "json":
        print_json({past: changed})
    elif fmt == "jsonl":
        print_jsonl([{past: changed}])
    elif changed:
        note = (
            "workers finish what they run and claim nothing more from it until it is resumed"
            if verb == "pause"
            else "its workers claim again at once"
        )
        print(f"{past} {', '.join(changed)} ({note})")
    if not changed:
        if fmt == "table":
            if verb == "pause":
                print("no queue to pause: none has jobs, workers or a pause on record")
            else:
                which = "no queue is" if name == ALL_QUEUES else f"{name} is not"
                print(f"nothing to resume: {which} paused")
        raise Exit(NOTHING_MATCHED)


_QUEUE_ARGUMENT = click.argument(
    "queue",
    metavar="QUEUE",
    required=False,
    help="the queue's name; '*' for every queue",
)
_ALL_OPTION = click.option("--all", "every", is_flag=True, help="every queue (as '*')")


@queues.command("pause", short_help="stop workers claiming from a queue")
@help_panels()
@_QUEUE_ARGUMENT
@_ALL_OPTION
@format_option
@target_options
def pause(
    queue: str | None,
    every: bool,
    output: str | None,
    dsn: str | None,
    driver: str | None,
    schema: str,
    prefix: str,
) -> None:
    """Pause a queue: workers finish the jobs they run and claim no more from it.

    The pause is stored (it survives restarts) and reaches every worker within about a second.
    New jobs are still enqueued; they wait. '*' pauses every queue that exists now.
    Exit status 3 when there was no queue to pause.
    """
    _toggle("pause", queue, every, output, Session.from_options(dsn, driver, schema, prefix))


@queues.command("resume", short_help="let workers claim from a paused queue again")
@help_panels()
@_QUEUE_ARGUMENT
@_ALL_OPTION
@format_option
@target_options
def resume(
    queue: str | None,
    every: bool,
    output: str | None,
    dsn: str | None,
    driver: str | None,
    schema: str,
    prefix: str,
) -> None:
    """Resume a paused queue ('*': every paused queue); its workers claim again at once.

    Exit status 3 when the queue was not paused.
    """
    _toggle("resume", queue, every, output, Session.from_options(dsn, driver, schema, prefix))


@queues.command("purge", short_help="delete finished jobs older than an age")
@help_panels()
@_QUEUE_ARGUMENT
@_ALL_OPTION
@click.option(
    "--older-than",
    metavar="DURATION",
    required=True,
    callback=read_duration,
    help="jobs that finished longer ago than this: 30s, 15m, 2h, 7d, 1w, 1h30m",
)
@click.option(
    "--status",
    multiple=True,
    type=click.Choice(FINISHED),
    help="only jobs that ended so (repeat for several; default: all three)",
)
@click.option("--dry-run", is_flag=True, help="count what would be deleted; change nothing")
@yes_option
@click.option(
    "--batch-size",
    type=click.IntRange(1, MAX_BATCH_SIZE),
    default=1000,
    show_default=True,
    help="jobs deleted per transaction",
)
@format_option
@target_options
def purge(
    queue: str | None,
    every: bool,
    older_than: Any,
    status: tuple[str, ...],
    dry_run: bool,
    yes: bool,
    batch_size: int,
    output: str | None,
    dsn: str | None,
    driver: str | None,
    schema: str,
    prefix: str,
) -> None:
    """Delete a queue's finished jobs (completed, failed, cancelled) older than an age.

    Oldest first, in batches. The jobs are counted first, then a terminal asks to confirm;
    without a terminal pass --yes. --dry-run only counts. Exit status 3 when none matched.
    """
    name = _one_queue(queue, every, "purge")
    fmt = resolve_format(output)
    queue_arg = None if name == ALL_QUEUES else name
    statuses = list(status) if status else None
    scope = ", ".join(
        [
            "every queue" if queue_arg is None else f"queue={queue_arg}",
            f"status={','.join(status or FINISHED)}",
            f"finished over {older_than.text} ago",
        ]
    )

    def run(**kw: Any) -> BulkResult:
        result: BulkResult = session.run(
            lambda c: c.purge_jobs(
                older_than=older_than.value,
                queue=queue_arg,
                status=statuses,
                batch_size=batch_size,
                **kw,
            )
        )
        return result

    with Session.from_options(dsn, driver, schema, prefix) as session:
        counted = run(dry_run=True)
        if dry_run:
            result = counted
        elif counted.matched == 0:
            result = BulkResult("purge", 0, 0)
        else:
            confirm("purge", counted.matched, scope, yes)
            with progress("purge", counted.matched) as on_progress:
                result = run(on_progress=on_progress)
    code = report(result, fmt, scope)
    if code:
        raise Exit(code)
