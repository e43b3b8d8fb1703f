"""The ``pgqueue`` command line: setup, ``worker``, the operator's commands, ``demo``.

The commands: ``sql``, ``migrate``, ``worker``, the operator's ``jobs``, ``queues``, ``workers``,
``stats`` and ``cron``, ``demo`` and ``completion``.

Built on click, with help drawn by rich-click: each option declares its environment variable
(``PGQUEUE_DSN`` or ``DATABASE_URL``, ``PGQUEUE_SCHEMA``, ``PGQUEUE_QUEUES``,
``PGQUEUE_POLL_INTERVAL``, ``PGQUEUE_FORMAT``, ``PGQUEUE_YES``, ...) where its default and help
are, and click gives ``--version`` and shell completion, rich-click the coloured ``--help``. One
module per command group (``schema``: ``sql`` and ``migrate``; ``worker``; ``jobs``; ``queues``;
``status``: ``workers`` and ``stats``; ``cron``: the periodic entries; ``demo``;
``completion``); ``_common`` is the one place that resolves the database URL, the driver and
the schema, and connects the right client (its ``Session`` runs each admin command once for
both clients); ``_output`` owns the output formats and the reading and writing of times,
``_filters`` the options that choose jobs, ``_actions`` the confirmation, progress and report of
the bulk actions. This package uses only pgqueue's public names (and the admin API's limits:
``job_filter``'s, and ``cron history``'s in ``periodic_admin``), and the adapter registry to ask
which drivers exist and which of them run only under asyncio.
"""

from __future__ import annotations

import importlib.metadata
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

import rich_click as click

from .. import PgQueueError, __version__
from . import completion, cron, dashboard, demo, jobs, queues, schema, status, worker
from ._common import PassThrough

__all__ = ["app", "installed_version", "main"]

# Status of a command ended by Ctrl-C (128 + SIGINT), as a shell reports it.
INTERRUPTED = 130

# The exit statuses, in the epilog of `pgqueue --help` (the operator docs list them too).
EXIT_STATUSES = (
    "Exit status: 0 done (an empty list too); 1 error (database, pgqueue); 2 bad input "
    "(usage error, bad name, filter or cursor; nothing changed); 3 nothing matched (no such "
    "job or periodic entry, no job to act on, no queue to pause, no queue or entry to "
    "resume); 4 refused (an action left some jobs alone: running, already finished, unique "
    "lock held); 130 interrupted (Ctrl-C; stats --watch ends with 0)."
)


def installed_version() -> str:
    """Return the installed pgqueue's version (the package's own, run from a checkout)."""
    try:
        return importlib.metadata.version("pgqueue")
    except importlib.metadata.PackageNotFoundError:
        return __version__


class _Root(click.RichGroup):
    """The ``pgqueue`` group: a command interrupted by Ctrl-C exits with status 130.

    click would print "Aborted!" and exit with 1, which a script cannot tell from a failure.
    A job's ``KeyboardInterrupt`` in ``worker`` is not one of these: it comes wrapped in
    :class:`PassThrough` and ends the process.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        # In the order they are added (the order of a first read), not click's alphabetical one.
        return list(self.commands)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            ctx.exit(INTERRUPTED)


@click.group(
    "pgqueue",
    cls=_Root,
    # No command is a usage error (status 2), as it was with argparse; click would show the
    # help instead (and exit 0 before click 8.2).
    no_args_is_help=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=EXIT_STATUSES,
)
@click.version_option(
    installed_version(),
    "--version",
    prog_name="pgqueue",
    message="%(prog)s %(version)s",
    help="print pgqueue's version and exit",
)
def app() -> None:
    """PostgreSQL-backed background jobs for Python.

    Every option can also be set in the environment: each command's --help names the variable.
    """


app.add_command(schema.sql)
app.add_command(schema.migrate)
app.add_command(worker.worker)
app.add_command(jobs.jobs)
app.add_command(queues.queues)
app.add_command(status.workers)
app.add_command(status.stats)
app.add_command(cron.cron)
app.add_command(dashboard.dashboard)
app.add_command(demo.demo)
app.add_command(completion.completion)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    0: done; 1: a pgqueue error, printed as ``pgqueue: error: <message>``; 2: a usage error,
    printed with the usage, or bad input the admin API refused (one line); 3: nothing matched
    and 4: refused (the admin commands); 130: interrupted. ``demo`` returns its own status. A job's
    ``SystemExit`` or ``KeyboardInterrupt`` in ``worker`` is raised again, uncaught.
    """
    if threading.current_thread() is threading.main_thread():
        # A parent may hand SIGINT and SIGTERM down blocked (a supervisor's or a test runner's
        # thread mask is inherited): the commands stop on them, so they must arrive.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        # Standalone mode: click prints usage errors and help itself (rich-click draws them),
        # answers shell completion requests ($_PGQUEUE_COMPLETE), and always ends in
        # SystemExit, whose code is the status.
        app.main(args=None if argv is None else list(argv), prog_name="pgqueue")
    except PgQueueError as exc:
        print(f"pgqueue: error: {exc}", file=sys.stderr)
        return 1
    except PassThrough as carried:
        raise carried.error from None
    except SystemExit as exc:
        return _exit_status(exc.code)
    return 0


def _exit_status(code: object) -> int:
    # What the interpreter does with an uncaught SystemExit.
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1
