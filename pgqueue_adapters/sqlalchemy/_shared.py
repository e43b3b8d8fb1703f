"""What the SQLAlchemy adapter does the same way on both sides, written once.

Reading URLs and naming objects do not depend on the side: ``_async.py`` and its generated
twin ``_sync.py`` both import these.
"""

from __future__ import annotations

from sqlalchemy import URL, make_url
from sqlalchemy import exc as sa_exc

from pgqueue.errors import ConfigurationError

__all__ = ["describe", "engine_url", "library_dsn", "unscope"]

# URL query keys that SQLAlchemy's dialects consume themselves; the libraries would reject them.
_SQLALCHEMY_QUERY_KEYS = (
    "async_fallback",
    "prepared_statement_cache_size",
    "prepared_statement_name_func",
)


def describe(obj: object) -> str:
    """Name ``obj``'s type with its module, for error messages."""
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def unscope(obj: object) -> object:
    """Return the current session of a scoped session (Flask-SQLAlchemy's ``db.session``)."""
    # Matched by name, so that both sides know scoped_session and its asyncio twin.
    if type(obj).__name__.endswith("scoped_session") and callable(obj):
        return obj()
    return obj


def engine_url(url: str) -> URL:
    """Parse ``url``; a plain ``postgresql://`` one gets the psycopg dialect."""
    try:
        parsed = make_url(url)
    except sa_exc.ArgumentError as exc:
        raise ConfigurationError(f"not a database URL: {exc}") from exc
    backend, _, dialect = parsed.drivername.partition("+")
    if backend == "postgres":  # libpq's alias, which SQLAlchemy no longer knows
        backend = "postgresql"
    return parsed.set(drivername=f"{backend}+{dialect or 'psycopg'}")


def library_dsn(url: URL) -> str:
    """Return the plain ``postgresql://`` URL of an engine's URL, for the library itself."""
    plain = url.set(drivername="postgresql").difference_update_query(_SQLALCHEMY_QUERY_KEYS)
    return plain.render_as_string(hide_password=False)
