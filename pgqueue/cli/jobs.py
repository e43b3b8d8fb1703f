"""``pgqueue jobs``: list, show, retry, cancel and delete jobs, by id or by filter.

Each command is written once on a :class:`~pgqueue.cli._common.Session` (sync or asyncio client)
and calls only the admin API (``list_jobs``, ``get_job``, ``retry_jobs``, ``cancel_jobs``,
``delete_jobs``); the API checks every value before any SQL runs. The filter options come
from ``_filters``, the confirmation, progress and report of the actions from ``_actions``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import rich_click as click
from click.exceptions import Exit
from rich.console import Group
from rich.table import Table
from rich.text import Text

from .. import BulkResult, JobInfo
from ..job_filter import DEFAULT_ACTION_STATUSES, MAX_BATCH_SIZE, MAX_LIMIT, SORTS
from ._actions import confirm, progress, report, yes_option
from ._common import (
    BAD_INPUT,
    NOTHING_MATCHED,
    AnyClient,
    OrderedGroup,
    Session,
    fail,
    help_panels,
    target_options,
)
from ._filters import FILTER_PANEL, WHEN_HELP, Selection, filter_options, read_ids
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
    status_text,
    text,
)

__all__ = ["jobs"]


@click.group("jobs", cls=OrderedGroup, short_help="list, show, retry, cancel or delete jobs")
def jobs() -> None:
    """See jobs and act on them: by id, or every job that matches a filter."""


# -- list and show --------------------------------------------------------------------------


@jobs.command("list", short_help="list jobs, newest first, with filters")
@help_panels(first=(FILTER_PANEL,), panel_help={FILTER_PANEL: WHEN_HELP})
@filter_options
@click.option(
    "--sort",
    type=click.Choice(SORTS),
    default="-id",
    show_default=True,
    help="-id newest first, id oldest first, due soonest due first, -due latest due first",
)
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_LIMIT),
    default=50,
    show_default=True,
    help=f"jobs per page (1 to {MAX_LIMIT})",
)
@click.option("--cursor", metavar="CURSOR", help="the page after the one that printed it")
@format_option
@target_options
def list_jobs(
    sort: str,
    limit: int,
    cursor: str | None,
    output: str | None,
    dsn: str | None,
    driver: str | None,
    schema: str,
    prefix: str,
    **filters: Any,
) -> None:
    """List jobs, one page at a time (the next page's --cursor is printed on stderr)."""
    selection = Selection.take(filters)
    fmt = resolve_format(output)
    with Session.from_options(dsn, driver, schema, prefix) as session:
        page = session.run(
            lambda c: c.list_jobs(
                sort=sort,  # type: ignore[arg-type]
                limit=limit,
                cursor=cursor,
                **selection.kwargs,
            )
        )
    if fmt == "json":
        print_json(page.jobs)
    elif fmt == "jsonl":
        print_jsonl(page.jobs)
    else:
        out_console().print(_jobs_table(page.jobs))
    if page.next_cursor:
        click.echo(
            f"more jobs match: add --cursor {page.next_cursor} (same filters and --sort) "
            "for the next page",
            err=True,
        )


def _jobs_table(infos: list[JobInfo]) -> Table | Text:
    if not infos:
        return Text("no jobs match", style="dim")
    now = datetime.now(UTC)
    table = new_table()
    table.add_column("ID", justify="right", no_wrap=True)
    table.add_column("KIND", no_wrap=True)
    table.add_column("QUEUE", no_wrap=True)
    table.add_column("STATUS", no_wrap=True)
    table.add_column("TRIES", justify="right", no_wrap=True)
    table.add_column("CREATED", no_wrap=True)
    table.add_column("WHEN", no_wrap=True)
    # the one column that gives way on a narrow terminal (its cells stay one line)
    table.add_column("LAST ERROR")
    for job in infos:
        table.add_row(
            text(job.id),
            text(job.kind),
            text(job.queue),
            status_text(job.status),
            text(f"{job.attempts}/{job.max_attempts}"),
            text(age(job.created_at, now)),
            text(_when_column(job, now)),
            text(job.last_error.splitlines()[0] if job.last_error else "", "red", one_line=True),
        )
    return table


def _when_column(job: JobInfo, now: datetime) -> str:
    # the moment that matters for the job's status: due, started or ended
    if job.status == "pending":
        return f"due {age(job.scheduled_for, now)}"
    if job.status == "processing":
        return f"started {age(job.claimed_at, now)}" if job.claimed_at else "running"
    return f"ended {age(job.finished_at, now)}" if job.finished_at else ""


@jobs.command("show", short_help="show one job, with its attempt history")
@help_panels()
@click.argument("job_id", metavar="ID", callback=read_ids, help="the job's id")
@format_option
@target_options
def show_job(
    job_id: int,
    output: str | None,
    dsn: str | None,
    driver: str | None,
    schema: str,
    prefix: str,
) -> None:
    """Show a job: its state, arguments, errors and every attempt on record.

    Exit status 3 when there is no such job.
    """
    fmt = resolve_format(output)
    with Session.from_options(dsn, driver, schema, prefix) as session:
        info = session.run(lambda c: c.get_job(job_id))
    if info is None:
        fail(
            f"no job {job_id}: it never existed, or it was deleted (retention removes "
            "finished jobs)",
            NOTHING_MATCHED,
        )
    if fmt == "json":
        print_json(info)
    elif fmt == "jsonl":
        print_jsonl([info])
    else:
        out_console().print(_job_detail(info))


def _when(moment: datetime | None, now: datetime) -> Text:
    return text(f"{local_time(moment)} ({age(moment, now)})" if moment else "")


def _job_detail(job: JobInfo) -> Group:
    now = datetime.now(UTC)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    rows: list[tuple[str, Text | None]] = [
        ("id", text(job.id)),
        ("job id", text(job.job_id) if job.job_id else None),
        ("kind", text(job.kind)),
        ("queue", text(job.queue)),
        ("status", status_text(job.status)),
        ("priority", text(job.priority)),
        ("attempts", text(f"{job.attempts} of {job.max_attempts}")),
        ("created", _when(job.created_at, now)),
        ("due", _when(job.scheduled_for, now)),
        ("finished", _when(job.finished_at, now) if job.finished_at else None),
        ("duration", text(duration_text(job.duration)) if job.duration is not None else None),
        (
            "claimed by",
            text(
                f"{job.claimed_by} (slot {job.worker_id}) at {local_time(job.claimed_at)}"
                if job.claimed_by
                else ""
            )
            if job.claimed_by
            else None,
        ),
        ("cancel asked", _when(job.cancel_requested_at, now) if job.cancel_requested_at else None),
        ("unique key", text(job.unique_key) if job.unique_key else None),
        ("options", text(json.dumps(job.options, sort_keys=True)) if job.options else None),
        ("arguments", text(json.dumps(job.payload, indent=2, ensure_ascii=False))),
        ("last error", text(job.last_error, "red") if job.last_error else None),
    ]
    for name, value in rows:
        if value is not None:
            grid.add_row(name, value)
    parts: list[Any] = [Text(f"job {job.id}", style="bold"), grid]
    if job.attempt_history:
        attempts = Table(box=None, header_style="bold", pad_edge=False, title_justify="left")
        for column in ("#", "OUTCOME", "STARTED", "DURATION", "WORKER", "ERROR"):
            attempts.add_column(column, justify="right" if column == "#" else "left")
        for attempt in job.attempt_history:
            attempts.add_row(
                text(attempt.number),
                status_text(attempt.outcome),
                text(local_time(attempt.started_at)),
                text(duration_text(attempt.duration) if attempt.duration is not None else ""),
                text(str(attempt.instance_id)[:8] if attempt.instance_id else ""),
                text((attempt.error or "").splitlines()[0] if attempt.error else "", "red"),
            )
        parts += [Text("\nattempts", style="bold"), attempts]
        last = next((a for a in reversed(job.attempt_history) if a.traceback), None)
        if last is not None and last.traceback:
            parts += [
                Text(f"\ntraceback of attempt {last.number}", style="bold"),
                text(last.traceback.rstrip(), "dim"),
            ]
    return Group(*parts)


# -- retry, cancel, delete ------------------------------------------------------------------

_ACTION_HELP = {
    "retry": (
        "run failed or cancelled jobs again now",
        "Run jobs again now: failed, cancelled (by a filter without --status, only those), "
        "completed or scheduled ones. A job that used its last attempt gets one more. A "
        "running job is refused (exit status 4).",
    ),
    "cancel": (
        "cancel pending jobs; ask running ones to stop",
        "Cancel jobs: a pending one never runs; a running one is asked to stop and ends "
        "cancelled when its process returns. A finished job is refused (exit status 4).",
    ),
    "delete": (
        "delete jobs that are not running",
        "Delete jobs: their ids and unique locks are free again at once. A running job is "
        "refused (exit status 4): cancel it, and delete it once it has stopped.",
    ),
}

_EXPLAIN = (
    "\n\nBy ID: no question asked. By filter, or --all: the jobs are counted first, then "
    "a terminal asks to confirm; without a terminal pass --yes. --dry-run only counts. "
    "Exit status 3 when no job matched."
)


def _act(client: AnyClient, action: str, ids: list[int] | None, **kw: Any) -> Any:
    if action == "retry":
        return client.retry_jobs(ids, **kw)
    if action == "cancel":
        return client.cancel_jobs(ids, **kw)
    return client.delete_jobs(ids, **kw)


def _action_command(action: str) -> click.Command:
    short, long = _ACTION_HELP[action]

    @jobs.command(action, short_help=short, help=long + _EXPLAIN)
    @help_panels(first=(FILTER_PANEL,), panel_help={FILTER_PANEL: WHEN_HELP})
    @click.argument(
        "ids",
        nargs=-1,
        metavar="[ID]...",
        callback=read_ids,
        help="job ids (with a filter too: those of them that match it)",
    )
    @filter_options
    @click.option(
        "--all",
        "all_jobs",
        is_flag=True,
        help=f"every job the action applies to (without --status: "
        f"{', '.join(DEFAULT_ACTION_STATUSES[action])})",
        panel=FILTER_PANEL,
    )
    @click.option("--dry-run", is_flag=True, help="count what would be done; change nothing")
    @yes_option
    @click.option(
        "--batch-size",
        type=click.IntRange(1, MAX_BATCH_SIZE),
        default=1000,
        show_default=True,
        help="jobs changed per transaction",
    )
    @format_option
    @target_options
    def command(
        ids: tuple[int, ...],
        all_jobs: bool,
        dry_run: bool,
        yes: bool,
        batch_size: int,
        output: str | None,
        dsn: str | None,
        driver: str | None,
        schema: str,
        prefix: str,
        **filters: Any,
    ) -> None:
        selection = Selection.take(filters)
        session = Session.from_options(dsn, driver, schema, prefix)
        code = _run_action(
            action, list(ids), selection, all_jobs, dry_run, yes, batch_size, output, session
        )
        if code:
            raise Exit(code)

    return command


def _scope(action: str, ids: list[int], selection: Selection, all_jobs: bool) -> str:
    parts = list(selection.parts)
    if ids:
        shown = ", ".join(map(str, ids[:10])) + (", ..." if len(ids) > 10 else "")
        parts.insert(0, f"id {shown}" if len(ids) == 1 else f"ids {shown}")
    elif not selection.kwargs.get("status"):
        parts.append(f"status={','.join(DEFAULT_ACTION_STATUSES[action])}")
    if all_jobs:
        parts.insert(0, "all")
    return ", ".join(parts)


def _run_action(
    action: str,
    ids: list[int],
    selection: Selection,
    all_jobs: bool,
    dry_run: bool,
    yes: bool,
    batch_size: int,
    output: str | None,
    session: Session,
) -> int:
    if all_jobs and ids:
        fail("--all means every job: leave out the ids, or drop --all", BAD_INPUT)
    if not ids and selection.empty and not all_jobs:
        fail(
            f"{action} of which jobs? pass job ids, a filter (--status, --queue, --kind, "
            "--args, a time range) or --all",
            BAD_INPUT,
        )
    fmt = resolve_format(output)
    scope = _scope(action, ids, selection, all_jobs)
    common: dict[str, Any] = dict(selection.kwargs, all_jobs=all_jobs, batch_size=batch_size)

    def act(**kw: Any) -> BulkResult:
        result: BulkResult = session.run(lambda c: _act(c, action, ids or None, **common, **kw))
        return result

    with session:
        if ids:  # a bounded set the user named: no question
            result = act(dry_run=dry_run)
        else:
            counted = act(dry_run=True)
            if dry_run:
                result = counted
            elif counted.matched == 0:
                result = BulkResult(action, 0, 0)
            else:
                confirm(action, counted.matched, scope, yes)
                with progress(action, counted.matched) as on_progress:
                    result = act(on_progress=on_progress)
    return report(result, fmt, scope)


retry = _action_command("retry")
cancel = _action_command("cancel")
delete = _action_command("delete")
