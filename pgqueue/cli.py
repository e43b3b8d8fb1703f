"""The ``pgqueue`` command line: ``pgqueue sql`` and ``pgqueue migrate`` (more to come).

Every option can also be set from the environment: ``PGQUEUE_DSN`` (or ``DATABASE_URL``),
``PGQUEUE_DRIVER``, ``PGQUEUE_SCHEMA``, ``PGQUEUE_PREFIX``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ._sync.client import Client
from .errors import PgQueueError
from .queries import migrations_script
from .settings import Settings

__all__ = ["main"]


def _settings(args: argparse.Namespace) -> Settings:
    return Settings(schema=args.schema, prefix=args.prefix)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pgqueue", description="PostgreSQL-backed background jobs for Python."
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--schema",
        default=os.environ.get("PGQUEUE_SCHEMA", "public"),
        help="schema of pgqueue's tables [$PGQUEUE_SCHEMA, default: public]",
    )
    common.add_argument(
        "--prefix",
        default=os.environ.get("PGQUEUE_PREFIX", "pgqueue_"),
        help="prefix of pgqueue's table names [$PGQUEUE_PREFIX, default: pgqueue_]",
    )
    connect = argparse.ArgumentParser(add_help=False)
    connect.add_argument(
        "--dsn",
        default=os.environ.get("PGQUEUE_DSN") or os.environ.get("DATABASE_URL"),
        help="database URL [$PGQUEUE_DSN or $DATABASE_URL]",
    )
    connect.add_argument(
        "--driver",
        default=os.environ.get("PGQUEUE_DRIVER"),
        help="database driver [$PGQUEUE_DRIVER, default: psycopg]",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sql = sub.add_parser(
        "sql",
        parents=[common],
        help="print the SQL that creates pgqueue's schema, without connecting",
        description="Print the migrations as one SQL script (for Alembic, Flyway or psql).",
    )
    sql.add_argument(
        "--from-version",
        type=int,
        default=0,
        metavar="N",
        help="only the migrations after version N (default: all)",
    )
    sql.add_argument(
        "--no-transaction",
        action="store_true",
        help="leave out BEGIN/COMMIT (for tools that wrap migrations in a transaction)",
    )
    sub.add_parser(
        "migrate",
        parents=[common, connect],
        help="create or upgrade pgqueue's tables",
        description="Apply pending migrations; safe to run from several processes at once.",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    args = _parser().parse_args(argv)
    try:
        settings = _settings(args)
        if args.command == "sql":
            script = migrations_script(
                settings, from_version=args.from_version, transaction=not args.no_transaction
            )
            sys.stdout.write(script)
            return 0
        if args.command == "migrate":
            with Client.connect(args.dsn, driver=args.driver, settings=settings) as client:
                applied = client.migrate()
                version = client.schema_version()
            done = f"applied {', '.join(map(str, applied))}" if applied else "nothing to apply"
            print(f"pgqueue schema at version {version} ({done})")
            return 0
    except PgQueueError as exc:
        print(f"pgqueue: error: {exc}", file=sys.stderr)
        return 1
    raise AssertionError(f"unhandled command {args.command!r}")  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
