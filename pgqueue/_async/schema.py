"""Applying and inspecting pgqueue's versioned migrations (generated into ``_sync``)."""

from __future__ import annotations

from ..errors import DatabaseError, MigrationError
from ..queries import migrations_for, queries_for
from ..settings import Settings
from .driver import AsyncDriver

__all__ = ["schema_migrate", "schema_version"]


async def schema_migrate(driver: AsyncDriver, settings: Settings) -> list[int]:
    """Apply the migrations the database lacks; return the versions applied (often none).

    Runs in one transaction behind a transaction-level advisory lock, so several processes may
    call it at once: the first applies, the others wait and then find nothing to do.
    """
    try:
        return await _migrate(driver, settings)
    except MigrationError:
        raise
    except DatabaseError as exc:
        raise MigrationError(
            f"could not migrate pgqueue's schema {settings.schema!r}: {exc}. Check that the role "
            "may create schemas and tables there",
            exc.sqlstate,
        ) from exc


async def _migrate(driver: AsyncDriver, settings: Settings) -> list[int]:
    q = queries_for(settings)
    applied_now: list[int] = []
    async with driver.with_tx() as tx:
        await tx.query(q.migration_lock, (settings.advisory_key("migrate"),))
        await tx.exec(q.schema_create)
        await tx.exec(q.migration_table_create)
        done = {row[0] for row in await tx.query(q.migration_applied_list)}
        for migration in migrations_for(settings):
            if migration.version in done:
                continue
            try:
                await tx.exec(migration.sql)
            except DatabaseError as exc:
                raise MigrationError(
                    f"migration {migration.version} ({migration.name}) failed: {exc}; nothing "
                    "was changed. Check that the role may create tables in schema "
                    f"{settings.schema!r}",
                    exc.sqlstate,
                ) from exc
            await tx.exec(q.migration_record, (migration.version, migration.name))
            applied_now.append(migration.version)
    return applied_now


async def schema_version(driver: AsyncDriver, settings: Settings) -> int | None:
    """Return the newest applied migration version, or ``None`` if pgqueue is not installed."""
    q = queries_for(settings)
    rows = await driver.query(q.migration_table_exists, (q.table("migrations"),))
    if not rows[0][0]:
        return None
    version = (await driver.query(q.migration_current_version))[0][0]
    return None if version is None else int(version)
