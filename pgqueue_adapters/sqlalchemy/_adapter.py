"""The SQLAlchemy adapter as the registry sees it: ``ADAPTER``.

Its capabilities are plain values, read without importing SQLAlchemy; each entry point imports
the driver module, and SQLAlchemy with it, when called.
"""

from __future__ import annotations

from pgqueue.adapter_registry import Adapter, AdapterUrl, ModuleAdapter

__all__ = ["ADAPTER", "SQLAlchemyAdapter"]

# The dialect a URL without one gets (see _async._engine_url), and the one that is asyncio-only.
_DEFAULT_DIALECT = "psycopg"
_ASYNCIO_DIALECT = "asyncpg"


class SQLAlchemyAdapter(ModuleAdapter):
    """SQLAlchemy 2 on its psycopg dialect (sync and asyncio) or asyncpg dialect (asyncio).

    No URL scheme names it (``postgresql+asyncpg://`` already means the asyncpg driver): it is
    chosen by name, and then reads the URL's ``+dialect`` itself.
    """

    async_module = __package__ + "._async"
    sync_module = __package__ + "._sync"
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


ADAPTER: Adapter = SQLAlchemyAdapter()
