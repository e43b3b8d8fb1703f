"""pgqueue's asyncpg adapter: ``AsyncpgDriver`` (asyncio only).

Build a driver from a URL (``async_connect``, which opens and owns a pool), or from an asyncpg
``Pool`` or ``Connection`` you already have (``async_from_native``, which never closes it).
asyncpg has no sync API: the ``sync_*`` functions raise :class:`pgqueue.ConfigurationError`.
"""

from ._driver import (
    AsyncpgAdvisoryLock,
    AsyncpgDriver,
    AsyncpgListener,
    AsyncpgTxDriver,
    async_connect,
    async_from_native,
    async_wrap_transaction,
    sync_connect,
    sync_from_native,
    sync_wrap_transaction,
    translate_error,
)

__all__ = [
    "AsyncpgAdvisoryLock",
    "AsyncpgDriver",
    "AsyncpgListener",
    "AsyncpgTxDriver",
    "async_connect",
    "async_from_native",
    "async_wrap_transaction",
    "sync_connect",
    "sync_from_native",
    "sync_wrap_transaction",
    "translate_error",
]
