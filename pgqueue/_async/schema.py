"""Applying and inspecting pgqueue's versioned migrations (generated into ``_sync``)."""

from __future__ import annotations

from ..errors import DatabaseError, MigrationError
from ..queries import migrations_for
from ..settings import Settings
from .driver import AsyncDriver
from .store import AsyncStore

__all__ = ["schema_migrate", "schema_uninstall", "schema_version"]


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
    applied_now: list[int] = []
    async with AsyncStore(driver, settings).transaction() as tx:
        done = await tx.migration_prepare()
        for migration in migrations_for(settings):
            if migration.version in done:
                continue
            try:
                await tx.migration_apply(migration)
            except DatabaseError as exc:
                raise MigrationError(
                    f"migration {migration.version} ({migration.name}) failed: {exc}; nothing "
                    "was changed. Check that the role may create tables in schema "
                    f"{settings.schema!r}",
                    exc.sqlstate,
                ) from exc
            applied_now.append(migration.version)
    return applied_now


async def schema_version(driver: AsyncDriver, settings: Settings) -> int | None:
    """Return the newest applied migration version, or ``None`` if pgqueue is not installed."""
    return await AsyncStore(driver, settings).schema_version()


async def schema_uninstall(driver: AsyncDriver, settings: Settings) -> None:
    """Drop pgqueue's tables, and its schema when that is not ``public`` and is left empty."""
    await AsyncStore(driver, settings).schema_uninstall()
