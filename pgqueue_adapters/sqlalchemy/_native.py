"""The fast path of an engine's single statements: the library's connection under a pooled one.

A statement of pgqueue's outside a transaction (a claim, a batch of outcomes, one ``add_job``)
through SQLAlchemy's ``Connection`` costs a ``Connection``, an isolation level switched to
AUTOCOMMIT and back, the dialect's cursor (under asyncio, a greenlet switch for each await of
the library) and a ``CursorResult``: twice the time of the statement on the library alone.
So, on an engine whose dialect is ``psycopg`` or ``asyncpg``, the drivers check a connection
out of the engine's pool (its checkout events, ``pool_pre_ping`` and ``pool_timeout`` hold) and
run the statement on the library's connection under it with the psycopg or asyncpg adapter's
own ``run``, in autocommit, as those adapters do; the connection goes back to the pool as it
came (the caller's transaction settings untouched), or is invalidated if it broke.

An engine that someone watches keeps the ``Connection`` path, so that nothing of pgqueue's
escapes them: connection or dialect event listeners (``before_cursor_execute``, the tracing
instrumentations), ``echo`` logging, or execution options set on the engine.

Side-independent pieces, written once; the drivers' code that awaits is in ``_async.py`` (and
its generated twin). Also here: how a script (a migration) runs inside a transaction of
SQLAlchemy's asyncpg dialect, on asyncpg's own connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from sqlalchemy.engine import Engine

from ._errors import DB_ERRORS, translate_error

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

__all__ = ["AUTOCOMMIT_REFUSAL", "asyncpg_script", "is_script", "native_idle", "watched"]

AUTOCOMMIT_REFUSAL = (
    "the SQLAlchemy engine or connection runs with isolation_level='AUTOCOMMIT': "
    "pgqueue needs real transactions, give it one without that setting"
)


def watched(engine: Engine | AsyncEngine) -> bool:
    """Return True if anything would see ``engine``'s statements go through ``Connection``.

    Event listeners on the engine or its dialect, ``echo``, or execution options of the
    engine's own (``engine.execution_options(...)``): then statements keep that path.
    """
    sync = cast("Engine", getattr(engine, "sync_engine", engine))  # an AsyncEngine's
    return bool(
        sync._has_events or sync.dialect._has_events or sync.echo or sync.get_execution_options()
    )


def native_idle(native: Any) -> bool:
    """Return True if a psycopg or asyncpg connection is open and outside any transaction."""
    is_closed = getattr(native, "is_closed", None)  # asyncpg
    if is_closed is not None:
        return not is_closed() and not native.is_in_transaction()
    return int(native.pgconn.transaction_status) == 0  # psycopg: libpq's PQTRANS_IDLE


def is_script(sql: str) -> bool:
    """Return True if ``sql`` may hold several statements (a ``;`` with text after it)."""
    return ";" in sql.rstrip().rstrip(";")


async def asyncpg_script(conn: AsyncConnection, sql: str) -> None:
    """Run a parameterless script of several statements in ``conn``'s transaction (asyncpg).

    SQLAlchemy's asyncpg dialect prepares every statement, and a prepared statement holds one
    command; asyncpg's own ``execute()`` without arguments uses the simple query protocol,
    which takes a script (a migration file).
    """
    from pgqueue_adapters.asyncpg import run

    try:
        raw: Any = (await conn.get_raw_connection()).driver_connection
        if not raw.is_in_transaction():
            # Have SQLAlchemy's adapter send its BEGIN, so that the script runs inside it.
            await conn.exec_driver_sql(";")
    except DB_ERRORS as exc:
        raise translate_error(exc) from exc
    await run(raw, sql, (), False)
