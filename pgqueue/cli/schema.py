"""``pgqueue sql`` and ``pgqueue migrate``: pgqueue's tables, as a script or applied."""

from __future__ import annotations

import sys

import rich_click as click

from .. import AsyncClient, Client, Settings, migrations_script
from ._common import Target, help_panels, prefix_option, schema_option, target_options

__all__ = ["migrate", "sql"]


@click.command("sql", short_help="print the SQL that creates pgqueue's schema, without connecting")
@help_panels()
@schema_option
@prefix_option
@click.option(
    "--from-version",
    metavar="N",
    type=int,
    default=0,
    show_default=True,
    help="only the migrations after version N (0: all)",
)
@click.option(
    "--no-transaction",
    is_flag=True,
    help="leave out BEGIN/COMMIT (for tools that wrap migrations in a transaction)",
)
def sql(schema: str, prefix: str, from_version: int, no_transaction: bool) -> None:
    """Print the migrations as one SQL script (for Alembic, Flyway or psql), without connecting."""
    settings = Settings(schema=schema, prefix=prefix)
    script = migrations_script(settings, from_version=from_version, transaction=not no_transaction)
    sys.stdout.write(script)


@click.command("migrate", short_help="create or upgrade pgqueue's tables")
@help_panels()
@target_options
def migrate(dsn: str | None, driver: str | None, schema: str, prefix: str) -> None:
    """Create or upgrade pgqueue's tables: apply the pending migrations.

    Safe to run from several processes at once.
    """
    target = Target.from_options(dsn, driver, schema, prefix)
    applied, version = target.run(_migrate, _migrate_async)
    done = f"applied {', '.join(map(str, applied))}" if applied else "nothing to apply"
    print(f"pgqueue schema at version {version} ({done})")


def _migrate(client: Client) -> tuple[list[int], int | None]:
    return client.migrate(), client.schema_version()


async def _migrate_async(client: AsyncClient) -> tuple[list[int], int | None]:
    return await client.migrate(), await client.schema_version()
