"""``pgqueue sql`` and ``pgqueue migrate``: pgqueue's tables, as a script or applied."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from .. import AsyncClient, Client, Settings, migrations_script
from ._common import (
    DEFAULT_SETTINGS,
    DriverOption,
    DsnOption,
    PrefixOption,
    SchemaOption,
    Target,
)

__all__ = ["migrate", "sql"]


def sql(
    schema: SchemaOption = DEFAULT_SETTINGS.schema,
    prefix: PrefixOption = DEFAULT_SETTINGS.prefix,
    from_version: Annotated[
        int,
        typer.Option(
            "--from-version", metavar="N", help="only the migrations after version N (0: all)"
        ),
    ] = 0,
    no_transaction: Annotated[
        bool,
        typer.Option(
            "--no-transaction",
            help="leave out BEGIN/COMMIT (for tools that wrap migrations in a transaction)",
        ),
    ] = False,
) -> None:
    """Print the migrations as one SQL script (for Alembic, Flyway or psql), without connecting."""
    settings = Settings(schema=schema, prefix=prefix)
    script = migrations_script(settings, from_version=from_version, transaction=not no_transaction)
    sys.stdout.write(script)


def migrate(
    dsn: DsnOption = None,
    driver: DriverOption = None,
    schema: SchemaOption = DEFAULT_SETTINGS.schema,
    prefix: PrefixOption = DEFAULT_SETTINGS.prefix,
) -> None:
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
