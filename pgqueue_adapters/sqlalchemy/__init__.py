"""pgqueue's SQLAlchemy 2 adapter: ``SQLAlchemyDriver`` (sync) and ``AsyncSQLAlchemyDriver``.

Build a driver from a URL (``sync_connect`` / ``async_connect``, which create and own an
engine; a plain ``postgresql://`` URL uses psycopg 3, ``postgresql+asyncpg://`` asyncpg), or
from an ``Engine`` / ``AsyncEngine`` or ``Connection`` / ``AsyncConnection`` you already have
(``sync_from_native`` / ``async_from_native``, which never dispose of or close it). Enqueue
inside your own transaction by handing a ``Connection`` or ORM ``Session`` (or their asyncio
twins) to ``add_job_with_tx``: ``sync_wrap_transaction`` / ``async_wrap_transaction``.

Listeners, advisory locks and ``COPY`` need SQLAlchemy's ``psycopg`` or ``asyncpg`` dialect:
they run on the library's own connection, through the psycopg and asyncpg adapters' library
modules.

``ADAPTER`` is what pgqueue's registry reads. The other names are imported, with SQLAlchemy,
on first use (see ``pgqueue_adapters._lazy``).
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._adapter import ADAPTER

if TYPE_CHECKING:
    from ._async import (
        AsyncSQLAlchemyDriver,
        AsyncSQLAlchemyTxDriver,
        async_connect,
        async_from_native,
        async_wrap_transaction,
    )
    from ._errors import translate_error
    from ._placeholders import convert_placeholders
    from ._sync import (
        SQLAlchemyDriver,
        SQLAlchemyTxDriver,
        sync_connect,
        sync_from_native,
        sync_wrap_transaction,
    )

__all__ = [
    "ADAPTER",
    "AsyncSQLAlchemyDriver",
    "AsyncSQLAlchemyTxDriver",
    "SQLAlchemyDriver",
    "SQLAlchemyTxDriver",
    "async_connect",
    "async_from_native",
    "async_wrap_transaction",
    "convert_placeholders",
    "sync_connect",
    "sync_from_native",
    "sync_wrap_transaction",
    "translate_error",
]

__getattr__ = lazy_exports(__name__, ("._placeholders", "._errors", "._async", "._sync"))
