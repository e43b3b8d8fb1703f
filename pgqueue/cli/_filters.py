"""The options that choose jobs, shared by ``jobs list`` and the bulk actions.

Declared once here: ``--status``, ``--queue``, ``--kind``, ``--args`` and the time ranges
(``--created-after`` ... ``--finished-before``), and the job-id arguments. They are read into a
:class:`Selection`: the keywords of the admin API's filter, and the words that describe it in a
question or a report. Queue and kind names are left for the API to check.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import rich_click as click

from ..job_filter import STATUSES, JobFilterKwargs
from ._output import read_when

__all__ = ["FILTER_PANEL", "MAX_ID", "WHEN_HELP", "Selection", "filter_options", "read_ids"]

FILTER_PANEL = "Filter"
"""The ``--help`` panel of the filter options."""
TIME_FILTERS = {
    "created_after": "created at or after WHEN",
    "created_before": "created before WHEN",
    "scheduled_after": "due at or after WHEN",
    "scheduled_before": "due before WHEN",
    "finished_after": "finished at or after WHEN",
    "finished_before": "finished before WHEN",
}
"""The time-range options: the API's keyword, and its help."""
WHEN_HELP = (
    "WHEN: a duration meaning that long ago (30s, 15m, 2h, 7d, 1w, 1h30m) or an ISO 8601 "
    "datetime (naive = UTC)"
)
"""What a ``WHEN`` value may be: the help of the filter panel."""
MAX_ID = 2**63 - 1
"""The largest job id (PostgreSQL's bigint)."""


def read_ids(ctx: click.Context, param: click.Parameter, values: Any) -> Any:
    """Read job ids (a click callback): whole numbers from 1.

    click.IntRange would call ``abc`` "not a valid integer range".
    """
    single = isinstance(values, str)
    out = []
    for value in [values] if single else values:
        try:
            job_id = int(value)
        except ValueError:
            job_id = 0
        if not 0 < job_id <= MAX_ID:
            raise click.BadParameter(f"{value!r} is not a job id: job ids are whole numbers from 1")
        out.append(job_id)
    return out[0] if single else tuple(out)


def _read_args(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    try:
        loaded = json.loads(value)
    except ValueError as exc:
        raise click.BadParameter(
            f"not valid JSON ({exc}): pass a JSON object such as '{{\"user_id\": 42}}'"
        ) from None
    if not isinstance(loaded, dict):
        raise click.BadParameter(
            f"a JSON object is needed, such as '{{\"user_id\": 42}}', not {type(loaded).__name__}"
        )
    return loaded


def filter_options(command: Any) -> Any:
    """Add the filter options of ``list_jobs`` (``--status``, ``--queue``, ... ``--args``)."""
    options = [
        click.option(
            "--status",
            multiple=True,
            type=click.Choice(STATUSES),
            help="jobs in this status (repeat for several)",
            panel=FILTER_PANEL,
        ),
        click.option(
            "--queue",
            multiple=True,
            metavar="QUEUE",
            help="jobs of this queue (repeat for several)",
            panel=FILTER_PANEL,
        ),
        click.option(
            "--kind",
            multiple=True,
            metavar="KIND",
            help="jobs of this kind (repeat for several)",
            panel=FILTER_PANEL,
        ),
        click.option(
            "--args",
            "args",
            metavar="JSON",
            callback=_read_args,
            help="jobs whose arguments contain this JSON object, e.g. '{\"user_id\": 42}'",
            panel=FILTER_PANEL,
        ),
    ]
    options += [
        click.option(
            "--" + name.replace("_", "-"),
            name,
            metavar="WHEN",
            callback=read_when,
            help=what,
            panel=FILTER_PANEL,
        )
        for name, what in TIME_FILTERS.items()
    ]
    for option in reversed(options):
        command = option(command)
    return command


@dataclass(frozen=True)
class Selection:
    """The filter options as given: ``kwargs`` for the API, ``parts`` to describe them."""

    kwargs: JobFilterKwargs
    parts: tuple[str, ...]

    @classmethod
    def take(cls, options: dict[str, Any]) -> Selection:
        """Build it from the command's keyword arguments (the filter options)."""
        kwargs: dict[str, Any] = {}
        parts: list[str] = []
        for name in ("status", "queue", "kind"):
            if options.get(name):
                kwargs[name] = list(options[name])
                parts.append(f"{name}={','.join(options[name])}")
        if options.get("args") is not None:
            kwargs["args"] = options["args"]
            parts.append(f"args={json.dumps(options['args'], ensure_ascii=False)}")
        for name in TIME_FILTERS:
            when = options.get(name)
            if when is not None:
                kwargs[name] = when.value
                parts.append(f"{name.replace('_', '-')}={when.text}")
        return cls(JobFilterKwargs(**kwargs), tuple(parts))  # type: ignore[typeddict-item]

    @property
    def empty(self) -> bool:
        """Whether no filter option was given."""
        return not self.parts
