"""SQLAlchemy's errors translated to pgqueue's, the same on both sides (written once).

The errors of the dedicated sessions and of ``COPY``, which run on the library's own
connection, are translated by the psycopg and asyncpg adapters' library modules.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import exc as sa_exc

from pgqueue.driver import LOST_SQLSTATES
from pgqueue.errors import ConnectionLost, DatabaseError

__all__ = ["DB_ERRORS", "dbapi_error", "translate_checkout_error", "translate_error"]

DB_ERRORS = (sa_exc.DBAPIError, sa_exc.TimeoutError, OSError)
"""What statements and connection checkouts raise: SQLAlchemy wraps the DBAPI's errors, but
its asyncpg dialect lets a failed connect's OSError through as it is, and a pool with no
connection free within its pool_timeout raises its own TimeoutError."""


def translate_error(exc: BaseException) -> DatabaseError:
    """Map a SQLAlchemy error (or a raw connect ``OSError``) to pgqueue's errors.

    The sqlstate and constraint name come from the DBAPI exception (``exc.orig``) or, for
    SQLAlchemy's asyncpg dialect, from the asyncpg exception it wraps (``orig.__cause__``).
    """
    if not isinstance(exc, sa_exc.DBAPIError):
        message = str(exc).strip() or type(exc).__name__
        if isinstance(exc, OSError):
            return ConnectionLost(f"lost the database connection: {message}")
        return DatabaseError(message)
    orig = exc.orig
    native = orig.__cause__ if orig is not None and orig.__cause__ is not None else orig
    state: str | None = None
    constraint: str | None = None
    for candidate in (native, orig):
        state = state or getattr(candidate, "sqlstate", None) or getattr(candidate, "pgcode", None)
        constraint = constraint or getattr(candidate, "constraint_name", None)
        diag = getattr(candidate, "diag", None)
        constraint = constraint or getattr(diag, "constraint_name", None)
    message = str(native if native is not None else exc).strip() or type(exc).__name__
    detail = getattr(native, "detail", None)  # asyncpg keeps it apart; psycopg's text has it
    if isinstance(detail, str) and detail and detail not in message:
        message = f"{message}\nDETAIL: {detail}"
    lost = (
        exc.connection_invalidated
        or isinstance(exc, sa_exc.InterfaceError)
        or (state is not None and (state.startswith("08") or state in LOST_SQLSTATES))
        or (isinstance(exc, sa_exc.OperationalError) and state is None)
    )
    if lost:
        return ConnectionLost(f"lost the database connection: {message}", state)
    return DatabaseError(message, state, constraint)


def translate_checkout_error(exc: BaseException, dialect: Any) -> DatabaseError:
    """Map what checking a connection out of an engine's pool raised to pgqueue's errors.

    ``engine.raw_connection()`` lets the DBAPI's own connect error through unwrapped (a server
    shutting down or restarting: ``psycopg.OperationalError``), where ``engine.connect()``
    wraps it; it is wrapped here the same way first.
    """
    base = dbapi_error(dialect)
    if isinstance(exc, base) and not isinstance(exc, sa_exc.DBAPIError):
        exc = sa_exc.DBAPIError.instance(None, None, exc, base, dialect=dialect)
    return translate_error(exc)


def dbapi_error(dialect: Any) -> type[Exception]:
    """Return the base class of the errors of ``dialect``'s DBAPI module (``Error``)."""
    base = getattr(getattr(dialect, "loaded_dbapi", None), "Error", None)
    return base if isinstance(base, type) and issubclass(base, Exception) else sa_exc.DBAPIError
