"""The psycopg adapter as the registry sees it: ``ADAPTER``.

Its capabilities are plain values, read without importing psycopg; each entry point imports
the driver module, and psycopg with it, when called.
"""

from __future__ import annotations

from pgqueue.adapter_registry import Adapter, AdapterUrl, url_without_driver
from pgqueue.driver import AsyncDriver, Driver

__all__ = ["ADAPTER", "PsycopgAdapter"]


class PsycopgAdapter:
    """psycopg 3 with psycopg_pool: sync and asyncio, named by ``postgresql+psycopg://``."""

    has_sync = True
    url_schemes = ("postgresql+psycopg", "postgres+psycopg")
    reads_url_dialect = False
    native_modules = ("psycopg", "psycopg_pool")

    def read_url(self, url: str | None) -> AdapterUrl:
        """Connect to ``url`` without its ``+psycopg`` part."""
        return AdapterUrl(url_without_driver(url), asyncio_only=False, description="psycopg")

    async def async_connect(self, url: str) -> AsyncDriver:
        """Open a pool on ``url``: see :func:`pgqueue_adapters.psycopg.async_connect`."""
        from . import _async

        return await _async.async_connect(url)

    def async_from_native(self, obj: object) -> AsyncDriver:
        """Use a caller's ``AsyncConnectionPool`` or ``AsyncConnection``."""
        from . import _async

        return _async.async_from_native(obj)

    def async_wrap_transaction(self, obj: object) -> AsyncDriver:
        """Run in the transaction of a caller's ``AsyncConnection``."""
        from . import _async

        return _async.async_wrap_transaction(obj)

    def sync_connect(self, url: str) -> Driver:
        """Open a pool on ``url``: see :func:`pgqueue_adapters.psycopg.sync_connect`."""
        from . import _sync

        return _sync.sync_connect(url)

    def sync_from_native(self, obj: object) -> Driver:
        """Use a caller's ``ConnectionPool`` or ``Connection``."""
        from . import _sync

        return _sync.sync_from_native(obj)

    def sync_wrap_transaction(self, obj: object) -> Driver:
        """Run in the transaction of a caller's ``Connection``."""
        from . import _sync

        return _sync.sync_wrap_transaction(obj)


ADAPTER: Adapter = PsycopgAdapter()
