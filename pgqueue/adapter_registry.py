"""The registry of adapters: which adapters exist, and how the core picks one.

The core never imports a database library and never names a driver. It finds an adapter by
name (``"psycopg"``), by URL scheme, or by the type of a native object a caller hands in (a
psycopg ``Connection`` given to ``add_job_with_tx``), and asks the :class:`Adapter` what it can
do. What an adapter is lives in its package (``pgqueue_adapters/<name>/``, which exports one
``ADAPTER``); what the registry knows of it is one line of ``_ADAPTERS``: where the package is,
which libraries it needs and which pip extra installs them.

An adapter package imports its library only when an entry point runs, so reading an
adapter's capabilities (to resolve a URL, or to log which driver runs) imports no database
library; :func:`load_adapter` checks the libraries first, with an install hint.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .driver import AsyncDriver, Driver
from .errors import ConfigurationError, DriverNotInstalled

__all__ = [
    "DRIVER_ENV_VAR",
    "Adapter",
    "AdapterUrl",
    "ModuleAdapter",
    "adapter_for_native",
    "asyncio_only",
    "describe_driver",
    "driver_names",
    "load_adapter",
    "resolve_driver_name",
    "url_without_driver",
]

DRIVER_ENV_VAR = "PGQUEUE_DRIVER"


@dataclass(frozen=True)
class AdapterUrl:
    """What an adapter makes of the URL a user gave (see :meth:`Adapter.read_url`)."""

    url: str | None
    """The URL the adapter connects to (``None`` when none was given)."""
    asyncio_only: bool
    """Whether this URL needs asyncio even though the adapter has a sync side (SQLAlchemy's
    ``postgresql+asyncpg://``)."""
    description: str
    """How logs name the driver: ``"psycopg"``, ``"sqlalchemy (asyncpg)"``."""


@runtime_checkable
class Adapter(Protocol):
    """One adapter: what it can do, and the six entry points the clients call.

    Every package in ``pgqueue_adapters`` exports one ``ADAPTER`` that implements this. Its
    capabilities must be readable without importing the database library; the entry points
    import it. Each entry point raises :class:`~pgqueue.ConfigurationError` for an object it
    does not accept, and an adapter without a sync side raises it from the ``sync_*`` ones.
    """

    @property
    def has_sync(self) -> bool:
        """Whether the library has a blocking API, so that ``Client`` can use the adapter."""
        ...

    @property
    def url_schemes(self) -> tuple[str, ...]:
        """URL schemes, lowercase, that name this adapter: ``("postgresql+asyncpg", ...)``."""
        ...

    @property
    def reads_url_dialect(self) -> bool:
        """Whether the adapter reads a URL's ``+dialect`` itself (SQLAlchemy).

        Given this adapter by name, a ``postgresql+<anything>://`` URL is its own to accept or
        refuse; other adapters refuse a scheme that no adapter claims.
        """
        ...

    @property
    def native_modules(self) -> tuple[str, ...]:
        """Top-level modules whose objects the adapter wraps (``("psycopg", "psycopg_pool")``).

        An object whose type is defined in one of them (or below) goes to this adapter.
        """
        ...

    def read_url(self, url: str | None) -> AdapterUrl:
        """Say what the adapter makes of ``url``: what it connects to, and how to name it."""
        ...

    async def async_connect(self, url: str, **options: Any) -> AsyncDriver:
        """Open what ``AsyncClient.connect(url)`` needs; the driver owns and closes it.

        ``options`` (given only when set): ``session_url`` (dedicated sessions connect there)
        and ``pgbouncer`` (``url`` leads to a transaction pooler: prepare no statements).
        """
        ...

    def async_from_native(self, obj: object, **options: Any) -> AsyncDriver:
        """Return a driver that uses, never closes, a caller's pool, engine or connection.

        ``options``: as for :meth:`async_connect`.
        """
        ...

    def async_wrap_transaction(self, obj: object) -> AsyncDriver:
        """Return a driver that runs inside the caller's open transaction on ``obj``.

        It never commits or rolls back; its ``with_tx`` makes a savepoint.
        """
        ...

    def sync_connect(self, url: str, **options: Any) -> Driver:
        """Blocking :meth:`async_connect`, for ``Client.connect(url)``."""
        ...

    def sync_from_native(self, obj: object, **options: Any) -> Driver:
        """Blocking :meth:`async_from_native`."""
        ...

    def sync_wrap_transaction(self, obj: object) -> Driver:
        """Blocking :meth:`async_wrap_transaction`."""
        ...


class ModuleAdapter:
    """A base for ``ADAPTER`` objects whose entry points live in the adapter's driver modules.

    Set ``async_module`` and ``sync_module`` to the dotted names of the modules that define
    ``async_connect``, ``async_from_native``, ``async_wrap_transaction`` and the ``sync_``
    three (one module may hold all six). Each entry point imports its module, and the database
    library with it, on its first call; the capabilities stay plain class attributes.
    """

    async_module: str
    sync_module: str

    def _side(self, module: str, function: str) -> Any:
        return getattr(importlib.import_module(module), function)

    async def async_connect(self, url: str, **options: Any) -> AsyncDriver:
        """Call the async module's ``async_connect(url, **options)``."""
        driver: AsyncDriver = await self._side(self.async_module, "async_connect")(url, **options)
        return driver

    def async_from_native(self, obj: object, **options: Any) -> AsyncDriver:
        """Call the async module's ``async_from_native(obj, **options)``."""
        driver: AsyncDriver = self._side(self.async_module, "async_from_native")(obj, **options)
        return driver

    def async_wrap_transaction(self, obj: object) -> AsyncDriver:
        """Call the async module's ``async_wrap_transaction(obj)``."""
        driver: AsyncDriver = self._side(self.async_module, "async_wrap_transaction")(obj)
        return driver

    def sync_connect(self, url: str, **options: Any) -> Driver:
        """Call the sync module's ``sync_connect(url, **options)``."""
        driver: Driver = self._side(self.sync_module, "sync_connect")(url, **options)
        return driver

    def sync_from_native(self, obj: object, **options: Any) -> Driver:
        """Call the sync module's ``sync_from_native(obj, **options)``."""
        driver: Driver = self._side(self.sync_module, "sync_from_native")(obj, **options)
        return driver

    def sync_wrap_transaction(self, obj: object) -> Driver:
        """Call the sync module's ``sync_wrap_transaction(obj)``."""
        driver: Driver = self._side(self.sync_module, "sync_wrap_transaction")(obj)
        return driver


@dataclass(frozen=True)
class _AdapterInfo:
    module: str  # the adapter package, which exports ADAPTER
    libraries: tuple[str, ...]  # top-level modules that must be importable
    extra: str  # the pip extra that installs them


# One line per adapter. The first is the default driver.
_ADAPTERS: dict[str, _AdapterInfo] = {
    "psycopg": _AdapterInfo("pgqueue_adapters.psycopg", ("psycopg", "psycopg_pool"), "psycopg"),
    "asyncpg": _AdapterInfo("pgqueue_adapters.asyncpg", ("asyncpg",), "asyncpg"),
    "sqlalchemy": _AdapterInfo("pgqueue_adapters.sqlalchemy", ("sqlalchemy",), "sqlalchemy"),
}
_DEFAULT_DRIVER = next(iter(_ADAPTERS))


def driver_names() -> list[str]:
    """Return the names of the drivers pgqueue knows."""
    return sorted(_ADAPTERS)


def _declared(name: str) -> Adapter:
    """Return driver ``name``'s adapter without checking its libraries (its capabilities only)."""
    adapter: Adapter = importlib.import_module(_ADAPTERS[name].module).ADAPTER
    return adapter


def url_without_driver(url: str | None) -> str | None:
    """Return ``url`` with a ``+driver`` part of its scheme removed: ``postgresql://...``."""
    if url is None or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    return "postgresql://" + rest if "+" in scheme else url


PGBOUNCER_ENV_VAR = "PGQUEUE_PGBOUNCER"
"""Environment variable: ``1`` (or ``true``, ``yes``, ``on``) is ``connect(pgbouncer=True)``."""

LISTEN_DSN_ENV_VAR = "PGQUEUE_LISTEN_DSN"
"""Environment variable: the default of ``connect(listen_dsn=...)``."""


def connect_options(*, pgbouncer: bool | None, listen_dsn: str | None) -> dict[str, Any]:
    """Return the options ``connect()`` hands the adapter (see ``Adapter.async_connect``).

    ``None`` reads ``$PGQUEUE_PGBOUNCER`` and ``$PGQUEUE_LISTEN_DSN``. Only the options that
    are set are returned: an adapter that knows neither still takes the call.
    """
    if pgbouncer is None:
        flag = os.environ.get(PGBOUNCER_ENV_VAR, "").strip().lower()
        if flag not in ("", "0", "false", "no", "off", "1", "true", "yes", "on"):
            raise ConfigurationError(f"${PGBOUNCER_ENV_VAR} must be 1 or 0, got {flag!r}")
        pgbouncer = flag in ("1", "true", "yes", "on")
    if listen_dsn is None:
        listen_dsn = os.environ.get(LISTEN_DSN_ENV_VAR) or None
    options: dict[str, Any] = {}
    if listen_dsn is not None:
        if not isinstance(listen_dsn, str) or "://" not in listen_dsn:
            raise ConfigurationError(
                f"listen_dsn must be a postgresql:// URL straight to PostgreSQL, got {listen_dsn!r}"
            )
        options["session_url"] = url_without_driver(listen_dsn)
    if pgbouncer:
        options["pgbouncer"] = True
    return options


def resolve_driver_name(url: str | None, driver: str | None) -> tuple[str, str | None]:
    """Decide which driver to use and return ``(name, url)``, the URL as the driver reads it.

    Precedence: the explicit ``driver`` argument, then a ``postgresql+<driver>://`` URL scheme,
    then ``$PGQUEUE_DRIVER``, then ``"psycopg"``. Most drivers connect to the URL with its
    ``+driver`` part removed; one that reads the dialect itself (SQLAlchemy) keeps it.
    """
    scheme = url.split("://", 1)[0] if url and "://" in url else ""
    scheme_driver = None
    if "+" in scheme:
        lower = scheme.lower()
        scheme_driver = next((n for n in _ADAPTERS if lower in _declared(n).url_schemes), None)
        # Given by name, an adapter that reads the dialect itself judges the scheme.
        named_reader = (
            driver is not None and driver in _ADAPTERS and _declared(driver).reads_url_dialect
        )
        if scheme_driver is None and not named_reader:
            raise ConfigurationError(
                f"unknown driver in URL scheme {scheme!r}: use postgresql:// with "
                f"driver= one of {', '.join(driver_names())}"
            )
    name = driver or scheme_driver or os.environ.get(DRIVER_ENV_VAR) or _DEFAULT_DRIVER
    if name not in _ADAPTERS:
        raise ConfigurationError(f"unknown driver {name!r}: use one of {', '.join(driver_names())}")
    return name, _declared(name).read_url(url).url


def asyncio_only(url: str | None, driver: str | None) -> bool:
    """Whether the driver that ``url`` and ``driver`` select runs only under asyncio.

    That is a driver without a sync side (asyncpg), or a URL that selects one under a driver
    that has one (SQLAlchemy's ``postgresql+asyncpg://``): only :class:`~pgqueue.AsyncClient`
    can use it. Resolution as in :func:`resolve_driver_name`.
    """
    name, _ = resolve_driver_name(url, driver)
    adapter = _declared(name)
    return not adapter.has_sync or adapter.read_url(url).asyncio_only


def describe_driver(url: str | None, driver: str | None) -> str:
    """Name the driver that ``url`` and ``driver`` select, for logs: ``"sqlalchemy (asyncpg)"``."""
    name, _ = resolve_driver_name(url, driver)
    return _declared(name).read_url(url).description


def _require_installed(name: str) -> None:
    """Check that driver ``name``'s libraries can be imported.

    Raises :class:`~pgqueue.DriverNotInstalled`, which says what to install, if one cannot.
    """
    info = _ADAPTERS[name]
    for library in info.libraries:
        try:
            importlib.import_module(library)
        except ImportError as exc:
            raise DriverNotInstalled(
                f"the {name} driver needs the {library} package: "
                f"pip install 'pgqueue[{info.extra}]'"
            ) from exc


def load_adapter(name: str) -> Adapter:
    """Return the adapter of driver ``name``, with an install hint if its library is missing."""
    _require_installed(name)
    return _declared(name)


def adapter_for_native(obj: object) -> Adapter:
    """Return the adapter that can run statements on native object ``obj``."""
    module = type(obj).__module__ or ""
    for name in _ADAPTERS:
        prefixes = _declared(name).native_modules
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return load_adapter(name)
    raise ConfigurationError(
        f"cannot use a {type(obj).__module__}.{type(obj).__qualname__} as a database "
        "connection: pass a connection, pool or session of a supported driver ("
        + ", ".join(driver_names())
        + ")"
    )
