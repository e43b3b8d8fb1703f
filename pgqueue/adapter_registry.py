"""Types shared by both sides of the driver seam, and the lookup from a name to an adapter.

The core never imports a database library. It finds an adapter by name (``"psycopg"``) or by
the type of a native object a caller hands in (a psycopg ``Connection`` given to
``add_job_with_tx``), and imports the adapter module only then.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .errors import ConfigurationError, DriverNotInstalled

__all__ = [
    "DRIVER_ENV_VAR",
    "LOCK_IDLE_TIMEOUT_SQL",
    "LOST_SQLSTATES",
    "Notification",
    "Params",
    "Row",
    "adapter_for_native",
    "asyncio_only",
    "describe_driver",
    "driver_names",
    "idle_timeout_setting",
    "load_adapter",
    "native_transaction",
    "resolve_driver_name",
]

Row = tuple[Any, ...]
"""One result row: a tuple of Python values, in the statement's column order."""

Params = Sequence[Any]
"""Positional parameters for ``$1, $2, ...`` placeholders."""

DRIVER_ENV_VAR = "PGQUEUE_DRIVER"

LOST_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "57P04", "57P05", "25P03"})
"""SQLSTATEs (besides class 08, connection exceptions) that mean the session is gone:
admin_shutdown (pg_terminate_backend), crash_shutdown, cannot_connect_now, database_dropped,
idle_session_timeout and idle_in_transaction_session_timeout. Adapters raise ConnectionLost."""

# Run by adapters on an advisory-lock session that was given an idle timeout. Servers before
# PostgreSQL 14 have no idle_session_timeout; there the lock lasts as long as the session.
LOCK_IDLE_TIMEOUT_SQL = (
    "SELECT set_config('idle_session_timeout', $1, false) "
    "WHERE current_setting('server_version_num')::int >= 140000"
)


def idle_timeout_setting(seconds: float) -> str:
    """``seconds`` as an ``idle_session_timeout`` value (whole milliseconds, at least 1)."""
    return f"{max(1, round(seconds * 1000))}ms"


@dataclass(frozen=True)
class Notification:
    """One NOTIFY received by a listener."""

    channel: str
    payload: str
    pid: int


@dataclass(frozen=True)
class _AdapterInfo:
    module: str
    libraries: tuple[str, ...]  # top-level modules that must be importable
    extra: str  # the pip extra that installs it
    native_prefixes: tuple[str, ...]  # module prefixes of native objects it can wrap


# Every adapter module offers the same six functions: async_connect(url), async_from_native(obj),
# async_wrap_transaction(obj) and their sync_ twins (an asyncio-only library raises a
# ConfigurationError from the sync ones).
_ADAPTERS: dict[str, _AdapterInfo] = {
    "psycopg": _AdapterInfo(
        "pgqueue_adapters.psycopg",
        ("psycopg", "psycopg_pool"),
        "psycopg",
        ("psycopg", "psycopg_pool"),
    ),
    "asyncpg": _AdapterInfo("pgqueue_adapters.asyncpg", ("asyncpg",), "asyncpg", ("asyncpg",)),
    "sqlalchemy": _AdapterInfo(
        "pgqueue_adapters.sqlalchemy", ("sqlalchemy",), "sqlalchemy", ("sqlalchemy",)
    ),
}

# URL schemes that name a driver, as SQLAlchemy spells them.
_SCHEME_DRIVERS = {
    "postgresql+psycopg": "psycopg",
    "postgres+psycopg": "psycopg",
    "postgresql+asyncpg": "asyncpg",
    "postgres+asyncpg": "asyncpg",
}


def driver_names() -> list[str]:
    """Return the names of the drivers pgqueue knows."""
    return sorted(_ADAPTERS)


def resolve_driver_name(url: str | None, driver: str | None) -> tuple[str, str | None]:
    """Decide which driver to use and return ``(name, url)`` with any driver scheme removed.

    Precedence: the explicit ``driver`` argument, then a ``postgresql+<driver>://`` URL scheme,
    then ``$PGQUEUE_DRIVER``, then ``"psycopg"``. For the ``sqlalchemy`` driver the URL is kept
    as given: SQLAlchemy reads its own ``+dialect`` part.
    """
    scheme_driver = None
    plain_url = url
    if url is not None and "://" in url:
        scheme, rest = url.split("://", 1)
        if "+" in scheme:
            scheme_driver = _SCHEME_DRIVERS.get(scheme.lower())
            if scheme_driver is None and driver != "sqlalchemy":
                raise ConfigurationError(
                    f"unknown driver in URL scheme {scheme!r}: use postgresql:// with "
                    f"driver= one of {', '.join(driver_names())}"
                )
            plain_url = "postgresql://" + rest
    name = driver or scheme_driver or os.environ.get(DRIVER_ENV_VAR) or "psycopg"
    if name not in _ADAPTERS:
        raise ConfigurationError(f"unknown driver {name!r}: use one of {', '.join(driver_names())}")
    return name, (url if name == "sqlalchemy" else plain_url)


def asyncio_only(url: str | None, driver: str | None) -> bool:
    """Whether the driver that ``url`` and ``driver`` select runs only under asyncio.

    That is asyncpg, directly or as the dialect of a ``postgresql+asyncpg://`` SQLAlchemy URL:
    only :class:`~pgqueue.AsyncClient` can use it. Resolution as in :func:`resolve_driver_name`.
    """
    name, _ = resolve_driver_name(url, driver)
    if name == "asyncpg":
        return True
    return name == "sqlalchemy" and _url_scheme(url).endswith("+asyncpg")


def describe_driver(url: str | None, driver: str | None) -> str:
    """Name the driver that ``url`` and ``driver`` select, for logs: ``"sqlalchemy (asyncpg)"``."""
    name, _ = resolve_driver_name(url, driver)
    if name != "sqlalchemy":
        return name
    _, plus, dialect = _url_scheme(url).partition("+")
    return f"sqlalchemy ({dialect if plus else 'psycopg'})"


def _url_scheme(url: str | None) -> str:
    return (url or "").split("://", 1)[0].lower() if url and "://" in url else ""


def load_adapter(name: str) -> ModuleType:
    """Import the adapter module for driver ``name``, with an install hint if it cannot be."""
    info = _ADAPTERS[name]
    for library in info.libraries:
        try:
            importlib.import_module(library)
        except ImportError as exc:
            raise DriverNotInstalled(
                f"the {name} driver needs the {library} package: "
                f"pip install 'pgqueue[{info.extra}]'"
            ) from exc
    return importlib.import_module(info.module)


def native_transaction(obj: object) -> object:
    """Return the database library's connection behind a framework's connection object.

    A Django database connection (``django.db.connection``, or ``django.db.connections[alias]``)
    becomes the psycopg 3 connection it wraps, connected first if it was not yet. Django is not
    imported: it is recognised by its module and by ``vendor`` and ``ensure_connection``. Any
    other object is returned as it is.
    """
    module = type(obj).__module__ or ""
    if module.split(".")[0] != "django":
        return obj
    vendor = getattr(obj, "vendor", None)
    ensure_connection = getattr(obj, "ensure_connection", None)
    if not isinstance(vendor, str) or not callable(ensure_connection):
        return obj
    if vendor != "postgresql":
        raise ConfigurationError(
            f"this Django database connection is {vendor!r}: pgqueue needs PostgreSQL; pass "
            "the connection of a database with ENGINE 'django.db.backends.postgresql'"
        )
    try:
        ensure_connection()
    except Exception as exc:
        if type(exc).__name__ != "SynchronousOnlyOperation":
            raise
        raise ConfigurationError(
            "Django's database connection is sync, and Django refuses it inside a running "
            "event loop: enqueue with pgqueue.Client from sync code (in an async view, wrap "
            "the call in asgiref's sync_to_async)"
        ) from exc
    native: object = getattr(obj, "connection", None)
    library = (type(native).__module__ or "").split(".")[0]
    if library != "psycopg":
        raise ConfigurationError(
            f"this Django database connection runs on {library or 'an unknown library'}, not "
            "psycopg 3: pip install 'psycopg[binary]' (Django 4.2 and later use psycopg 3 when "
            "it is installed), or pass a connection of pgqueue's own"
        )
    return native


def adapter_for_native(obj: object) -> ModuleType:
    """Return the adapter module that can run statements on native object ``obj``."""
    module = type(obj).__module__ or ""
    for name, info in _ADAPTERS.items():
        if any(module == p or module.startswith(p + ".") for p in info.native_prefixes):
            return load_adapter(name)
    raise ConfigurationError(
        f"cannot use a {type(obj).__module__}.{type(obj).__qualname__} as a database "
        "connection: pass a connection, pool or session of a supported driver ("
        + ", ".join(driver_names())
        + ")"
    )
