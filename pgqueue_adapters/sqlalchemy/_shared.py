"""What the SQLAlchemy adapter does the same way on both sides, written once.

Reading URLs and naming objects do not depend on the side, and the checks of what belongs to a
side only on which side it is (``Side``): ``_async.py`` and its generated twin ``_sync.py`` both
import these.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import URL, make_url
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Dialect

from pgqueue.errors import ConfigurationError

__all__ = ["Side", "describe", "engine_url", "library_dsn", "refuse_pgbouncer", "unscope"]

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


@dataclass(frozen=True)
class Side:
    """The sync or asyncio side of the adapter: what belongs to it, and what it can do.

    ``libraries``: the dialects whose library pgqueue can use directly, for dedicated sessions
    (listeners, advisory locks) and ``COPY`` (asyncpg is asyncio-only).
    """

    is_async: bool
    libraries: tuple[str, ...]

    @property
    def _other_side(self) -> str:
        return f"use pgqueue.{'Client' if self.is_async else 'AsyncClient'} with it"

    def refuse_other_side(self, obj: object) -> None:
        """Raise if ``obj`` is a SQLAlchemy object of the other (sync or asyncio) side."""
        module = type(obj).__module__ or ""
        if not module.startswith("sqlalchemy"):
            return
        is_async = module.startswith("sqlalchemy.ext.asyncio")
        if is_async != self.is_async:
            flavour = "an asyncio" if is_async else "a sync"
            raise ConfigurationError(
                f"{type(obj).__qualname__} is {flavour} SQLAlchemy object: {self._other_side}"
            )

    def check_dialect(self, dialect: Dialect) -> None:
        """Raise unless ``dialect`` is PostgreSQL's, of this side."""
        if dialect.name != "postgresql":
            raise ConfigurationError(
                f"pgqueue needs PostgreSQL, but the SQLAlchemy engine's dialect is {dialect.name!r}"
            )
        if dialect.is_async != self.is_async:
            raise ConfigurationError(
                f"the engine's {dialect.driver} dialect is "
                f"{'asyncio' if dialect.is_async else 'sync'}: {self._other_side}"
            )

    def require_library(self, dialect: Dialect) -> None:
        """Raise unless pgqueue can use the dialect's library itself (dedicated sessions, COPY)."""
        if dialect.driver not in self.libraries:
            hint = " or ".join(f"postgresql+{library}://" for library in self.libraries)
            raise ConfigurationError(
                f"listeners, advisory locks and COPY need an engine on {hint}; "
                f"this one uses {dialect.name}+{dialect.driver}"
            )

    def dedicated_dsn(self, dialect: Dialect, url: URL) -> str:
        """Return the plain ``postgresql://`` URL that a dedicated session connects to."""
        self.require_library(dialect)
        return library_dsn(url)


def refuse_pgbouncer() -> None:
    """Refuse ``pgbouncer=True``: pgqueue on SQLAlchemy is not tested behind a transaction pooler.

    SQLAlchemy's dialects prepare statements in ways of their own (its asyncpg dialect always
    does); the psycopg and asyncpg drivers are the tested route.
    """
    raise ConfigurationError(
        "pgbouncer=True is supported with the psycopg and asyncpg drivers, not through "
        "SQLAlchemy: connect pgqueue with a postgresql:// (psycopg) or postgresql+asyncpg:// URL "
        "(your application can keep SQLAlchemy for its own work and add_job_with_tx)"
    )
