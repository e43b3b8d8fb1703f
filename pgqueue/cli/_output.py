"""How the admin commands read times and write results: formats, JSON, ages, colours.

The one place that decides the output format (``--format``, ``$PGQUEUE_FORMAT``, else a table
on a terminal and JSON when piped), turns pgqueue's records into JSON (datetimes as ISO 8601,
UUIDs as strings), draws ages ("3m 12s ago") and local timestamps, and reads the time values
the commands take: durations (``30s``, ``1h30m``, ``7d``) and ISO 8601 datetimes. It never
connects to the database.

Whatever a job holds (arguments, errors, names) reaches a table as :class:`rich.text.Text`,
never as console markup, so a payload that contains ``[red]`` prints as it is.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime, timedelta
from typing import Any, TypeVar

import rich_click as click
from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = [
    "FORMATS",
    "When",
    "age",
    "duration_text",
    "err_console",
    "format_option",
    "jsonable",
    "local_time",
    "new_table",
    "out_console",
    "parse_duration",
    "print_json",
    "print_jsonl",
    "read_duration",
    "read_when",
    "resolve_format",
    "status_text",
    "text",
]

F = TypeVar("F", bound=Callable[..., Any])

FORMATS = ("table", "json", "jsonl")
"""The values of ``--format``."""

# A duration is one or more of these, largest first or not: 1h30m, 2d, 45s, 1w2d.
_UNITS = {"w": 604_800, "d": 86_400, "h": 3_600, "m": 60, "s": 1}
_PART = re.compile(r"(\d+(?:\.\d+)?)([wdhms])")
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?[wdhms])+")
# "That long ago" must stay a date PostgreSQL and Python both hold; a century is plenty.
MAX_DURATION = timedelta(days=36_500)
"""The longest duration a time option takes."""
DURATION_HELP = "a duration such as 30s, 15m, 2h, 7d, 1w or 1h30m"
"""How the error messages name what a duration may be."""

# The colour of each job status in a table.
STATUS_STYLES = {
    "pending": "cyan",
    "processing": "bold blue",
    "completed": "green",
    "failed": "bold red",
    "cancelled": "magenta",
}

# When stdout is no terminal and $COLUMNS says nothing, a table asked for with --format table
# gets this width instead of rich's 80 columns, so that its rows are not cut.
PIPED_WIDTH = 200


def format_option(command: F) -> F:
    """Add ``--format table|json|jsonl`` (``$PGQUEUE_FORMAT``) to a command.

    The command takes it as ``output``: ``None`` when unset, which :func:`resolve_format`
    reads as a table on a terminal, else JSON.
    """
    return click.option(
        "--format",
        "output",
        type=click.Choice(FORMATS, case_sensitive=False),
        envvar="PGQUEUE_FORMAT",
        show_envvar=True,
        help="output format (default: table on a terminal, else json)",
    )(command)


def resolve_format(output: str | None) -> str:
    """Return the format asked for, or the default: ``table`` on a terminal, else ``json``."""
    if output:
        return output.lower()
    return "table" if sys.stdout.isatty() else "json"


def out_console() -> Console:
    """Return a console on stdout for tables (colour only on a terminal, as rich decides)."""
    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(highlight=False, width=PIPED_WIDTH)
    return console


def err_console() -> Console:
    """Return a console on stderr, for progress bars and live displays."""
    return Console(stderr=True, highlight=False)


# -- JSON -----------------------------------------------------------------------------------


def jsonable(value: Any) -> Any:
    """Return ``value`` (records, dicts, lists...) as plain JSON values.

    A dataclass becomes an object of its fields; a datetime an ISO 8601 string; a UUID a
    string; a dict's keys strings (a bulk result's ``refused`` is keyed by job id).
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


def print_json(value: Any) -> None:
    """Print ``value`` as one JSON document on stdout."""
    sys.stdout.write(json.dumps(jsonable(value), indent=2, ensure_ascii=False) + "\n")


def print_jsonl(values: Iterable[Any]) -> None:
    """Print each of ``values`` as one line of JSON on stdout."""
    for value in values:
        sys.stdout.write(json.dumps(jsonable(value), ensure_ascii=False) + "\n")
    sys.stdout.flush()


# -- reading times ---------------------------------------------------------------------------


def parse_duration(value: str) -> timedelta:
    """Read ``30s``, ``15m``, ``2h``, ``7d``, ``1w`` or a combination (``1h30m``).

    Raises ``ValueError`` with a message that says what is accepted.
    """
    text_value = value.strip().lower()
    if not _DURATION.fullmatch(text_value):
        hint = " (add a unit: 30s, 15m, 2h, 7d)" if re.fullmatch(r"\d+(\.\d+)?", text_value) else ""
        raise ValueError(f"{value!r} is not {DURATION_HELP}{hint}")
    parts = _PART.findall(text_value)
    units = [unit for _, unit in parts]
    if len(set(units)) != len(units):
        raise ValueError(f"{value!r} names a unit twice: write it once, e.g. 1h30m")
    seconds = sum(float(number) * _UNITS[unit] for number, unit in parts)
    if seconds > MAX_DURATION.total_seconds():
        raise ValueError(f"{value!r} is longer than 100 years (36500d)")
    return timedelta(seconds=seconds)


@dataclasses.dataclass(frozen=True)
class When:
    """A time value as typed (``text``, shown back in prompts) and as the API takes it.

    ``value``: a timedelta ("that long ago") or an aware datetime.
    """

    text: str
    value: timedelta | datetime


def read_when(ctx: click.Context, param: click.Parameter, value: str | None) -> When | None:
    """Read an option's text as a :class:`When` (a click callback): a duration or a datetime."""
    if value is None:
        return None
    raw = value.strip()
    if raw[:1].isdigit() and _DURATION.fullmatch(raw.lower()):
        try:
            return When(raw, parse_duration(raw))
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise click.BadParameter(
            f"{raw!r} is neither {DURATION_HELP} (meaning that long ago) nor an ISO 8601 "
            "datetime such as 2026-12-01T09:30:00Z"
        ) from None
    return When(raw, moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC))


def read_duration(ctx: click.Context, param: click.Parameter, value: str | None) -> When | None:
    """Read an option's text as a duration (a click callback), e.g. ``--older-than 7d``."""
    if value is None:
        return None
    try:
        return When(value.strip(), parse_duration(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


# -- writing times ---------------------------------------------------------------------------


def duration_text(seconds: float) -> str:
    """Write a span of time for people: ``12ms``, ``2.5s``, ``45s``, ``3m 12s``, ``2h 5m``."""
    span = abs(float(seconds))
    if span < 1 and span:
        return f"{span * 1000:.0f}ms"
    if span < 10 and not span.is_integer():
        return f"{span:.1f}s"
    total = int(span)
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m {secs}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


def age(moment: datetime | None, now: datetime | None = None) -> str:
    """Write how long ago ``moment`` was ("3m 12s ago"), or how soon it is ("in 5s")."""
    if moment is None:
        return ""
    seconds = ((now or datetime.now(UTC)) - moment).total_seconds()
    if -1 < seconds < 1:
        return "just now"
    span = duration_text(float(int(seconds)))
    return f"{span} ago" if seconds > 0 else f"in {span}"


def local_time(moment: datetime | None) -> str:
    """Write ``moment`` in local time, to the second: ``2026-12-01 17:50:28``."""
    if moment is None:
        return ""
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def new_table() -> Table:
    """Return an empty table in the commands' style: no borders, bold headers.

    Two spaces between columns, one on a console narrower than 100 columns.
    """
    gap = 1 if out_console().width < 100 else 2
    return Table(box=None, header_style="bold", pad_edge=False, padding=(0, gap, 0, 0))


def text(value: object, style: str = "", *, one_line: bool = False) -> Text:
    """Return ``value`` as plain text for a table cell (never read as console markup).

    ``one_line``: cut with an ellipsis where the column is too narrow, instead of wrapping.
    """
    if one_line:
        return Text(
            "" if value is None else str(value), style=style, no_wrap=True, overflow="ellipsis"
        )
    return Text("" if value is None else str(value), style=style)


def status_text(status: str) -> Text:
    """Return a job status coloured by what it means (failed red, completed green...)."""
    return Text(status, style=STATUS_STYLES.get(status, ""))
