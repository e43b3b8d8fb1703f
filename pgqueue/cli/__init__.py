"""The ``pgqueue`` command line: ``sql``, ``migrate``, ``worker`` and ``demo``.

Built on typer: each command is a function whose parameters are its options, each option names
its environment variable (``PGQUEUE_DSN`` or ``DATABASE_URL``, ``PGQUEUE_SCHEMA``,
``PGQUEUE_QUEUES``, ``PGQUEUE_POLL_INTERVAL``, ...), and typer gives ``--help`` (coloured when
rich can), ``--version`` and shell completion. One module per command group (``schema``:
``sql`` and ``migrate``; ``worker``; ``demo``); ``_common`` is the one place that resolves the
database URL, the driver and the schema, and connects the right client. This package uses only
pgqueue's public names, and the adapter registry to ask which drivers exist and which of them
run only under asyncio.
"""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Sequence
from typing import Annotated

import typer

from .. import PgQueueError, __version__
from . import demo, schema, worker
from ._common import PassThrough

__all__ = ["app", "main"]

app = typer.Typer(
    name="pgqueue",
    context_settings={"help_option_names": ["-h", "--help"]},
    # A crash keeps Python's own traceback: worker logs are files, not terminals.
    pretty_exceptions_enable=False,
)
"""The ``pgqueue`` typer application; :func:`main` runs it."""

app.command("sql", short_help="print the SQL that creates pgqueue's schema, without connecting")(
    schema.sql
)
app.command("migrate", short_help="create or upgrade pgqueue's tables")(schema.migrate)
app.command("worker", short_help="run jobs until SIGTERM/SIGINT")(worker.worker)
app.command("demo", short_help="run a live demo: real jobs on a real (or throwaway) PostgreSQL")(
    demo.demo
)


def installed_version() -> str:
    """Return the installed pgqueue's version (the package's own, run from a checkout)."""
    try:
        return importlib.metadata.version("pgqueue")
    except importlib.metadata.PackageNotFoundError:
        return __version__


def _print_version(value: bool) -> None:
    if value:
        print(f"pgqueue {installed_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="print pgqueue's version and exit",
        ),
    ] = False,
) -> None:
    """PostgreSQL-backed background jobs for Python.

    Every option can also be set in the environment: each command's --help names the variable.
    """


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    0: done; 1: a pgqueue error, printed as ``pgqueue: error: <message>``; 2: a usage error,
    printed with the usage; 130: interrupted. ``demo`` returns its own status. A job's
    ``SystemExit`` or ``KeyboardInterrupt`` in ``worker`` is raised again, uncaught.
    """
    try:
        # Standalone mode: typer prints usage errors and help itself, and always ends in
        # SystemExit, whose code is the status.
        app(args=None if argv is None else list(argv), prog_name="pgqueue")
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
