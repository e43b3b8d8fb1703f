"""The psycopg adapter as the registry sees it: ``ADAPTER``.

Its capabilities are plain values, read without importing psycopg; each entry point imports
the driver module, and psycopg with it, when called.
"""

from __future__ import annotations

from pgqueue.adapter_registry import Adapter, AdapterUrl, ModuleAdapter, url_without_driver

__all__ = ["ADAPTER", "PsycopgAdapter"]


class PsycopgAdapter(ModuleAdapter):
    """psycopg 3 with psycopg_pool: sync and asyncio, named by ``postgresql+psycopg://``."""

    async_module = __package__ + "._async"
    sync_module = __package__ + "._sync"
    has_sync = True
    url_schemes = ("postgresql+psycopg", "postgres+psycopg")
    reads_url_dialect = False
    native_modules = ("psycopg", "psycopg_pool")

    def read_url(self, url: str | None) -> AdapterUrl:
        """Connect to ``url`` without its ``+psycopg`` part."""
        return AdapterUrl(url_without_driver(url), asyncio_only=False, description="psycopg")


ADAPTER: Adapter = PsycopgAdapter()
