"""pgqueue's asyncpg adapter: ``AsyncpgDriver`` (asyncio only).

Build a driver from a URL (``async_connect``, which opens and owns a pool), or from an asyncpg
``Pool`` or ``Connection`` you already have (``async_from_native``, which never closes it).
asyncpg has no sync API: the ``sync_*`` functions raise :class:`pgqueue.ConfigurationError`.

``ADAPTER`` is what pgqueue's registry reads. The other names are imported, with asyncpg, on
first use (see ``pgqueue_adapters._lazy``). The listener, advisory lock, ``COPY`` and error
translation (``_library``) are shared with the SQLAlchemy adapter.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._adapter import ADAPTER

if TYPE_CHECKING:
    from ._driver import (
        AsyncpgDriver,
        AsyncpgTxDriver,
        async_connect,
        async_from_native,
        async_wrap_transaction,
        sync_connect,
        sync_from_native,
        sync_wrap_transaction,
    )
    from ._library import (
        AsyncpgAdvisoryLock,
        AsyncpgListener,
        copy_rows,
        open_session,
        run,
        translate_error,
    )

__all__ = [
    "ADAPTER",
    "AsyncpgAdvisoryLock",
    "AsyncpgDriver",
    "AsyncpgListener",
    "AsyncpgTxDriver",
    "async_connect",
    "async_from_native",
    "async_wrap_transaction",
    "copy_rows",
    "open_session",
    "run",
    "sync_connect",
    "sync_from_native",
    "sync_wrap_transaction",
    "translate_error",
]

__getattr__ = lazy_exports(__name__, ("._library", "._driver"))
