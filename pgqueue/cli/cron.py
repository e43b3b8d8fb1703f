"""``pgqueue cron``: list the periodic entries, pause, resume or trigger one, read its ticks.

Written once on a :class:`~pgqueue.cli._common.Session`, on the admin API's ``cron_list``,
``cron_pause``, ``cron_resume``, ``cron_trigger`` and ``cron_history``. The entries are the ones
workers declared in the database (each name as its newest declaration has it), so the commands
need no registry: any machine that reaches the database sees every entry. An entry name the API
refuses is bad input (status 2); a name no worker declared is status 3.
"""

from __future__ import annotations

from datetime import UTC, datetime

import rich_click as click
from click.exceptions import Exit
from rich.table import Table
from rich.text import Text

from .. import JobNotFound, PeriodicInfo, TickInfo
from .._async.periodic_admin import MAX_HISTORY
from ._common import NOTHING_MATCHED, OrderedGroup, Session, fail, help_panels, target_options
from ._output import (
    When,
    age,
    format_option,
    local_time,
    new_table,
    out_console,
    print_json,
    print_jsonl,
    read_when,
    resolve_format,
    status_text,
    text,
)

__all__ = ["cron"]

# What to do when a name is not an entry: where the names are.
_UNKNOWN_HINT = "`pgqueue cron list` shows the entries workers have declared"


@click.group("cron", cls=OrderedGroup, short_help="list, pause, resume or trigger periodic jobs")
def cron() -> None:
    """See the periodic entries workers run, pause and resume them, run one now, read its ticks."""


_NAME_ARGUMENT = click.argument(
    "name", metavar="NAME", help="the entry's name, as registry.schedule(Periodic(name, ...))"
)


def _unknown(name: str) -> str:
    return f"no periodic entry named {name!r}: {_UNKNOWN_HINT}"


def _exists(session: Session, name: str) -> bool:
    found: list[PeriodicInfo] = session.run(lambda c: c.cron_list())
    return any(entry.name == name for entry in found)


# -- list -------------------------------------------------------------------------------------


@cron.command("list", short_help="list the periodic entries: state, last run, next tick")
@help_panels()
@format_option
@target_options
def list_entries(
    output: str | None, dsn: str | None, driver: str | None, schema: str, prefix: str
) -> None:
    """List every periodic entry workers have declared.

    Its schedule, whether it is paused or retired (no worker has run it for a while), its last
    tick and how it was acted on, how its last finished run ended, and when it falls due next.
    """
    fmt = resolve_format(output)
    with Session.from_options(dsn, driver, schema, prefix) as session:
        found: list[PeriodicInfo] = session.run(lambda c: c.cron_list())
    if fmt == "json":
        print_json(found)
    elif fmt == "jsonl":
        print_jsonl(found)
    else:
        out_console().print(_entries_table(found))


def _entries_table(found: list[PeriodicInfo]) -> Table | Text:
    if not found:
        return Text(
            "no periodic entries: a worker declares its registry's entries when it starts",
            style="dim",
        )
    now = datetime.now(UTC)
    table = new_table()
    table.add_column("NAME", no_wrap=True)
    table.add_column("SCHEDULE", no_wrap=True)
    table.add_column("STATE", no_wrap=True)
    table.add_column("LAST TICK", no_wrap=True)
    table.add_column("LAST RUN", no_wrap=True)
    table.add_column("NEXT TICK", no_wrap=True)
    # the one column that gives way on a narrow terminal
    table.add_column("QUEUE/KIND")
    for e in found:
        schedule = e.schedule if e.timezone == "UTC" else f"{e.schedule} ({e.timezone})"
        table.add_row(
            text(e.name, "bold"),
            text(schedule),
            _state(e, now),
            text(f"{age(e.last_tick, now)} ({e.last_how})")
            if e.last_tick
            else text("never", "dim"),
            _last_run(e.last_run, now),
            # a paused or retired entry enqueues nothing at its next tick
            text(age(e.next_tick, now) if e.next_tick and not (e.paused or e.retired) else "-"),
            text(f"{e.queue}/{e.kind}", one_line=True),
        )
    return table


def _state(entry: PeriodicInfo, now: datetime) -> Text:
    if entry.retired:
        return text("retired, paused" if entry.paused else "retired", "dim")
    if entry.paused:
        return text(f"paused {age(entry.paused_at, now)}", "bold yellow")
    return text("active")


def _last_run(run: TickInfo | None, now: datetime) -> Text:
    if run is None or run.status is None:
        return text("none yet", "dim")
    cell = status_text(run.status)
    if run.finished_at is not None:
        cell.append(f" {age(run.finished_at, now)}", "red" if run.status == "failed" else "")
    return cell


# -- pause, resume, trigger -------------------------------------------------------------------


@cron.command("pause", short_help="stop an entry enqueueing its ticks")
@help_panels()
@_NAME_ARGUMENT
@format_option
@target_options
def pause(
    name: str, output: str | None, dsn: str | None, driver: str | None, schema: str, prefix: str
) -> None:
    """Pause an entry: its ticks enqueue nothing until it is resumed (trigger still runs it).

    The pause is stored in the database: every worker honours it at the entry's next tick, and
    it survives restarts. Pausing a paused entry changes nothing. Exit status 3 when there is no
    such entry.
    """
    fmt = resolve_format(output)
    with Session.from_options(dsn, driver, schema, prefix) as session:
        found: bool = session.run(lambda c: c.cron_pause(name))
    if not found:
        fail(_unknown(name), NOTHING_MATCHED)
    if fmt == "json":
        print_json({"paused": [name]})
    elif fmt == "jsonl":
        print_jsonl([{"paused": [name]}])
    else:
        print(
            f"paused {name} (its ticks enqueue nothing until `pgqueue cron resume {name}`; "
            "a job already enqueued still runs)"
        )


@cron.command("resume", short_help="let a paused entry enqueue its ticks again")
@help_panels()
@_NAME_ARGUMENT
@format_option
@target_options
def resume(
    name: str, output: str | None, dsn: str | None, driver: str | None, schema: str, prefix: str
) -> None:
    """Resume a paused entry: its next tick is enqueued; those that fell while paused are not.

    Exit status 3 when there is no such entry, or it was not paused.
    """
    fmt = resolve_format(output)
    with Session.from_options(dsn, driver, schema, prefix) as session:
        resumed: bool = session.run(lambda c: c.cron_resume(name))
        if not resumed and not _exists(session, name):
            fail(_unknown(name), NOTHING_MATCHED)
    changed = [name] if resumed else []
    if fmt == "json":
        print_json({"resumed": changed})
    elif fmt == "jsonl":
        print_jsonl([{"resumed": changed}])
    elif resumed:
        print(f"resumed {name} (its next tick is enqueued; the ticks missed while paused are not)")
    else:
        print(f"nothing to resume: {name} is not paused")
    if not resumed:
        raise Exit(NOTHING_MATCHED)


@cron.command("trigger", short_help="enqueue an entry's job now")
@help_panels()
@_NAME_ARGUMENT
@format_option
@target_options
def trigger(
    name: str, output: str | None, dsn: str | None, driver: str | None, schema: str, prefix: str
) -> None:
    """Enqueue an entry's job now, paused or not, as its newest declaration has it.

    Recorded in its history as a 'manual' tick; its scheduled ticks are unchanged. Prints the
    job's id. Exit status 3 when there is no such entry.
    """
    fmt = resolve_format(output)
    with Session.from_options(dsn, driver, schema, prefix) as session:
        try:
            job_id: int = session.run(lambda c: c.cron_trigger(name))
        except JobNotFound:
            fail(_unknown(name), NOTHING_MATCHED)
    if fmt == "json":
        print_json({"job_id": job_id})
    elif fmt == "jsonl":
        print_jsonl([{"job_id": job_id}])
    else:
        print(f"triggered {name}: enqueued job {job_id} (`pgqueue jobs show {job_id}` follows it)")


# -- history ----------------------------------------------------------------------------------


@cron.command("history", short_help="list an entry's ticks, newest first, with their jobs")
@help_panels()
@_NAME_ARGUMENT
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_HISTORY),
    default=50,
    show_default=True,
    help=f"ticks to list (1 to {MAX_HISTORY})",
)
@click.option(
    "--before",
    metavar="WHEN",
    callback=read_when,
    help="only ticks before WHEN: a duration meaning that long ago (30s, 15m, 2h, 7d) or an "
    "ISO 8601 datetime (naive = UTC); the next page starts before the oldest tick shown",
)
@format_option
@target_options
def history(
    name: str,
    limit: int,
    before: When | None,
    output: str | None,
    dsn: str | None,
    driver: str | None,
    schema: str,
    prefix: str,
) -> None:
    """List an entry's ticks, newest first: how each was acted on and its job as it is now.

    A tick is 'scheduled', 'late' (a missed tick within its grace), 'backfill', 'start'
    (run_on_start), 'manual' (cron trigger) or 'skipped' (overlap='skip': no job). A job
    retention removed shows as gone. Exit status 3 when there is no such entry.
    """
    fmt = resolve_format(output)
    until = _moment(before)
    with Session.from_options(dsn, driver, schema, prefix) as session:
        ticks: list[TickInfo] = session.run(
            lambda c: c.cron_history(name, limit=limit, before=until)
        )
        if not ticks and not _exists(session, name):
            fail(_unknown(name), NOTHING_MATCHED)
    if fmt == "json":
        print_json(ticks)
    elif fmt == "jsonl":
        print_jsonl(ticks)
    else:
        out_console().print(_ticks_table(ticks, before is not None))
    if len(ticks) == limit:
        click.echo(
            f"older ticks may exist: add --before {ticks[-1].tick.isoformat()} for the next page",
            err=True,
        )


def _moment(when: When | None) -> datetime | None:
    # a duration means that long ago
    if when is None:
        return None
    return when.value if isinstance(when.value, datetime) else datetime.now(UTC) - when.value


def _ticks_table(ticks: list[TickInfo], bounded: bool) -> Table | Text:
    if not ticks:
        return Text("no ticks before that" if bounded else "no ticks yet", style="dim")
    now = datetime.now(UTC)
    table = new_table()
    table.add_column("TICK", no_wrap=True)
    table.add_column("HOW", no_wrap=True)
    table.add_column("JOB", justify="right", no_wrap=True)
    table.add_column("STATUS", no_wrap=True)
    table.add_column("FINISHED", no_wrap=True)
    table.add_column("ERROR")
    for t in ticks:
        if t.job_id is None:
            status = text("")
        elif t.status is None:
            status = text("gone", "dim")  # retention (or an operator) deleted the job
        else:
            status = status_text(t.status)
        error = t.last_error.splitlines()[0] if t.last_error else ""
        table.add_row(
            text(local_time(t.tick)),
            text(t.how, "dim" if t.how == "skipped" else ""),
            text(t.job_id),
            status,
            text(age(t.finished_at, now)),
            text(error, "red", one_line=True),
        )
    return table
