"""The asyncpg adapter as the registry sees it: ``ADAPTER``.

Its capabilities are plain values, read without importing asyncpg; each entry point imports
the driver module, and asyncpg with it, when called.
"""

from __future__ import annotations

from pgqueue.adapter_registry import Adapter, AdapterUrl, ModuleAdapter, url_without_driver

__all__ = ["ADAPTER", "AsyncpgAdapter"]


class AsyncpgAdapter(ModuleAdapter):
    """asyncpg: asyncio only, named by ``postgresql+asyncpg://``."""

    async_module = __package__ + "._driver"
    sync_module = __package__ + "._driver"
    has_sync = False
    url_schemes = ("postgresql+asyncpg", "postgres+asyncpg")
    reads_url_dialect = False
    native_modules = ("asyncpg",)

    def read_url(self, url: str | None) -> AdapterUrl:
        """Connect to ``url`` without its ``+asyncpg`` part; only under asyncio."""
        return AdapterUrl(url_without_driver(url), asyncio_only=True, description="asyncpg")


ADAPTER: Adapter = AsyncpgAdapter()
