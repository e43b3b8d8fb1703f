"""What every bulk command shares (``jobs retry|cancel|delete``, ``queues purge``).

A bulk action by filter is counted first (the API's ``dry_run``), then confirmed: on a terminal
by a question, elsewhere only by ``--yes`` (``$PGQUEUE_YES``). It runs with a progress bar on
stderr when stderr is a terminal, and reports what it did, or would do with ``--dry-run``, as a
sentence or as the :class:`~pgqueue.BulkResult` in JSON. Its exit status says whether anything
matched (3 when not) and whether any job was refused (4).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

import rich_click as click
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from .. import BulkResult
from ._common import BAD_INPUT, ERROR, NOTHING_MATCHED, REFUSED, fail
from ._output import err_console, print_json, print_jsonl

__all__ = ["confirm", "progress", "report", "yes_option"]

# The past tense of each action, for its report.
PAST = {"retry": "retried", "cancel": "cancelled", "delete": "deleted", "purge": "purged"}
# A long list of refusals or missing ids is cut in the sentence; JSON always has them all.
SHOWN = 20

yes_option = click.option(
    "--yes",
    "-y",
    is_flag=True,
    envvar="PGQUEUE_YES",
    show_envvar=True,
    help="do it without asking (needed when stdin is not a terminal)",
)
"""``--yes``: act without the confirmation question (``$PGQUEUE_YES``)."""


def _jobs(n: int) -> str:
    return f"{n:,} job" + ("" if n == 1 else "s")


def confirm(action: str, count: int, scope: str, yes: bool) -> None:
    """Ask whether to ``action`` ``count`` jobs, unless ``yes``; end the command on no.

    Without a terminal on stdin and without ``--yes`` the command ends with status 2; a "no"
    at the question ends it with status 1. Either way nothing changed.
    """
    if yes:
        return
    if not sys.stdin.isatty():
        fail(
            f"pass --yes to confirm: this would {action} {_jobs(count)} ({scope}); "
            "nothing changed (--dry-run counts without asking)",
            BAD_INPUT,
        )
    question = f"{action.capitalize()} {_jobs(count)} ({scope})?"
    if not click.confirm(question, default=False, err=True):
        fail("not confirmed: nothing changed", ERROR)


@contextlib.contextmanager
def progress(action: str, total: int) -> Iterator[Callable[[int, int], None] | None]:
    """Yield an ``on_progress`` callback drawing a bar on stderr, or ``None`` off a terminal."""
    if not sys.stderr.isatty():
        yield None
        return
    bar = Progress(
        TextColumn(f"{PAST[action]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console(),
        transient=True,
    )
    with bar:
        task = bar.add_task(action, total=total)

        def on_progress(changed: int, seen: int) -> None:
            bar.update(task, completed=min(seen, total))

        yield on_progress


def report(result: BulkResult, output: str, scope: str) -> int:
    """Print what a bulk action did (or would do); return the command's exit status.

    4 when any job was refused, else 3 when no job matched, else 0 (a dry run's status is the
    one the action itself would have).
    """
    if output == "json":
        print_json(result)
    elif output == "jsonl":
        print_jsonl([result])
    else:
        for line in _sentences(result, scope):
            print(line)
    if result.refused:
        return REFUSED
    if result.matched == 0:
        return NOTHING_MATCHED
    return 0


def _sentences(result: BulkResult, scope: str) -> list[str]:
    action, past = result.action, PAST[result.action]
    if result.matched == 0 and not result.refused:
        lines = [f"no job to {action}: nothing matched ({scope})"]
    elif result.dry_run:
        lines = [f"would {action} {_jobs(result.matched)} ({scope}); nothing changed (--dry-run)"]
    else:
        lines = [f"{past} {_jobs(result.changed)}"]
        left = result.matched - result.changed - len(result.refused)
        if left > 0:  # matched, then changed by someone else before this action reached them
            lines[0] += f" ({_jobs(left)} had changed meanwhile and were left alone)"
    if result.refused:
        lines[0] += f"; {len(result.refused):,} refused:"
        for job_id, reason in list(result.refused.items())[:SHOWN]:
            lines.append(f"  job {job_id}: {reason}")
        if len(result.refused) > SHOWN:
            lines.append(
                f"  ... and {len(result.refused) - SHOWN:,} more (--format json lists all)"
            )
    if result.missing:
        shown = ", ".join(map(str, result.missing[:SHOWN]))
        more = f" and {len(result.missing) - SHOWN:,} more" if len(result.missing) > SHOWN else ""
        lines.append(f"not found: {shown}{more}")
    return lines
