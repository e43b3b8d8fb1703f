"""The asyncpg adapter as the registry sees it: ``ADAPTER``.

Its capabilities are plain values, read without importing asyncpg; each entry point imports
the driver module, and asyncpg with it, when called.
"""

from __future__ import annotations

from pgqueue.adapter_registry import Adapter, AdapterUrl, url_without_driver
from pgqueue.driver import AsyncDriver, Driver

__all__ = ["ADAPTER", "AsyncpgAdapter"]


class AsyncpgAdapter:
    """asyncpg: asyncio only, named by ``postgresql+asyncpg://``."""

    has_sync = False
    url_schemes = ("postgresql+asyncpg", "postgres+asyncpg")
    reads_url_dialect = False
    native_modules = ("asyncpg",)

    def read_url(self, url: str | None) -> AdapterUrl:
        """Connect to ``url`` without its ``+asyncpg`` part; only under asyncio."""
        return AdapterUrl(url_without_driver(url), asyncio_only=True, description="asyncpg")

    async def async_connect(self, url: str) -> AsyncDriver:
        """Open a pool on ``url``: see :func:`pgqueue_adapters.asyncpg.async_connect`."""
        from . import _driver

        return await _driver.async_connect(url)

    def async_from_native(self, obj: object) -> AsyncDriver:
        """Use a caller's asyncpg ``Pool`` or ``Connection``."""
        from . import _driver

        return _driver.async_from_native(obj)

    def async_wrap_transaction(self, obj: object) -> AsyncDriver:
        """Run in the transaction open on a caller's asyncpg connection."""
        from . import _driver

        return _driver.async_wrap_transaction(obj)

    def sync_connect(self, url: str) -> Driver:
        """Refuse: asyncpg has no sync API (the error says what to use instead)."""
        from . import _driver

        return _driver.sync_connect(url)

    def sync_from_native(self, obj: object) -> Driver:
        """Refuse: asyncpg has no sync API (the error says what to use instead)."""
        from . import _driver

        return _driver.sync_from_native(obj)

    def sync_wrap_transaction(self, obj: object) -> Driver:
        """Refuse: asyncpg has no sync API (the error says what to use instead)."""
        from . import _driver

        return _driver.sync_wrap_transaction(obj)


ADAPTER: Adapter = AsyncpgAdapter()
