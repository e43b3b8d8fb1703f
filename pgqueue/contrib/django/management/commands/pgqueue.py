"""``manage.py pgqueue``: pgqueue's command line, on the database and settings of the project.

Everything after ``pgqueue`` goes to the ``pgqueue`` command (``pgqueue.cli.main``) as it is:
``manage.py pgqueue worker``, ``migrate``, ``jobs list --status failed``, ``queues``,
``workers``, ``stats``, ``cron list``, ``--help``... with the database URL, schema, prefix and
(for ``worker``) queues filled in from ``PGQUEUE`` and ``DATABASES`` (through the environment
variables the command reads, so its own options still win), and for ``worker`` the registry
built from the settings (``pgqueue.contrib.django.registry:registry``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from django.core.management.base import (  # type: ignore[import-untyped]
    BaseCommand,
    CommandError,
)
from django.db import connections  # type: ignore[import-untyped]

from ...conf import database_url, get_config

__all__ = ["REGISTRY_PATH", "Command", "pgqueue_environment"]

REGISTRY_PATH = "pgqueue.contrib.django.registry:registry"
"""The registry ``manage.py pgqueue worker`` runs."""

# Options of manage.py itself, already applied before the command runs.
_DJANGO_OPTIONS = ("--settings", "--pythonpath")


def pgqueue_environment() -> dict[str, str]:
    """Return the variables that point ``pgqueue``'s commands at the project's queue.

    ``PGQUEUE_DSN`` (``PGQUEUE["DSN"]``, else the URL of ``DATABASES[PGQUEUE["DATABASE"]]``),
    ``PGQUEUE_SCHEMA``, ``PGQUEUE_PREFIX`` and ``PGQUEUE_QUEUES``.
    """
    config = get_config()
    return {
        "PGQUEUE_DSN": config.dsn or database_url(config.database),
        "PGQUEUE_SCHEMA": config.settings.schema,
        "PGQUEUE_PREFIX": config.settings.prefix,
        "PGQUEUE_QUEUES": config.queues_text,
    }


class Command(BaseCommand):  # type: ignore[misc]
    """Run a ``pgqueue`` command on the project's database: ``manage.py pgqueue --help``."""

    help = (
        "Run pgqueue's command line on this project's database: worker, migrate, jobs, "
        "queues, workers, stats, cron ('manage.py pgqueue --help' lists them)."
    )

    def add_arguments(self, parser: Any) -> None:
        """Take every argument as it is: they are pgqueue's."""
        parser.add_argument("args", nargs="...", help="a pgqueue command and its options")

    def run_from_argv(self, argv: list[str]) -> None:
        """Forward ``argv[2:]`` to pgqueue (its ``--help`` too) and exit with its status."""
        args: list[str] = []
        skip = False
        for arg in argv[2:]:
            if skip:
                skip = False
            elif arg in _DJANGO_OPTIONS:
                skip = True
            elif not arg.startswith(tuple(f"{o}=" for o in _DJANGO_OPTIONS)):
                args.append(arg)
        try:
            code = self.forward(args)
        finally:
            connections.close_all()
        if code:
            sys.exit(code)

    def handle(self, *args: str, **options: Any) -> None:
        """``call_command("pgqueue", "jobs", "list")``: a non-zero status is a CommandError."""
        code = self.forward(list(args))
        if code:
            raise CommandError(
                f"pgqueue {' '.join(args)} exited with status {code}", returncode=code
            )

    def forward(self, args: list[str]) -> int:
        """Run ``pgqueue <args>`` in this process; return its exit status."""
        from pgqueue.cli import main

        os.environ.update(pgqueue_environment())
        if args[:1] == ["worker"]:
            args = ["worker", REGISTRY_PATH, *args[1:]]
        return main(args)
