"""The SQLAlchemy adapter as the registry sees it: ``ADAPTER``.

Its capabilities are plain values, read without importing SQLAlchemy; each entry point imports
the driver module, and SQLAlchemy with it, when called.
"""

from __future__ import annotations

from pgqueue.adapter_registry import Adapter, AdapterUrl
from pgqueue.driver import AsyncDriver, Driver

__all__ = ["ADAPTER", "SQLAlchemyAdapter"]

# The dialect a URL without one gets (see _async._engine_url), and the one that is asyncio-only.
_DEFAULT_DIALECT = "psycopg"
_ASYNCIO_DIALECT = "asyncpg"


class SQLAlchemyAdapter:
    """SQLAlchemy 2 on its psycopg dialect (sync and asyncio) or asyncpg dialect (asyncio).

    No URL scheme names it (``postgresql+asyncpg://`` already means the asyncpg driver): it is
    chosen by name, and then reads the URL's ``+dialect`` itself.
    """

    has_sync = True
    url_schemes: tuple[str, ...] = ()
    reads_url_dialect = True
    native_modules = ("sqlalchemy",)

    def read_url(self, url: str | None) -> AdapterUrl:
        """Keep ``url`` as given, ``+dialect`` included: SQLAlchemy reads it."""
        scheme = url.split("://", 1)[0].lower() if url and "://" in url else ""
        _, plus, dialect = scheme.partition("+")
        return AdapterUrl(
            url,
            asyncio_only=scheme.endswith("+" + _ASYNCIO_DIALECT),
            description=f"sqlalchemy ({dialect if plus else _DEFAULT_DIALECT})",
        )

    async def async_connect(self, url: str) -> AsyncDriver:
        """Create an engine on ``url``: see :func:`pgqueue_adapters.sqlalchemy.async_connect`."""
        from . import _async

        return await _async.async_connect(url)

    def async_from_native(self, obj: object) -> AsyncDriver:
        """Use a caller's ``AsyncEngine``, ``AsyncConnection`` or ``AsyncSession``'s bind."""
        from . import _async

        return _async.async_from_native(obj)

    def async_wrap_transaction(self, obj: object) -> AsyncDriver:
        """Run in the transaction of a caller's ``AsyncConnection`` or ``AsyncSession``."""
        from . import _async

        return _async.async_wrap_transaction(obj)

    def sync_connect(self, url: str) -> Driver:
        """Create an engine on ``url``: see :func:`pgqueue_adapters.sqlalchemy.sync_connect`."""
        from . import _sync

        return _sync.sync_connect(url)

    def sync_from_native(self, obj: object) -> Driver:
        """Use a caller's ``Engine``, ``Connection`` or ``Session``'s bind."""
        from . import _sync

        return _sync.sync_from_native(obj)

    def sync_wrap_transaction(self, obj: object) -> Driver:
        """Run in the transaction of a caller's ``Connection`` or ``Session``."""
        from . import _sync

        return _sync.sync_wrap_transaction(obj)


ADAPTER: Adapter = SQLAlchemyAdapter()
