"""pgqueue's psycopg 3 adapter: ``PsycopgDriver`` (sync) and ``AsyncPsycopgDriver`` (asyncio).

Build a driver from a URL (``sync_connect`` / ``async_connect``, which open and own a pool), or
from a ``ConnectionPool`` / ``AsyncConnectionPool`` or ``Connection`` / ``AsyncConnection`` you
already have (``sync_from_native`` / ``async_from_native``, which never close it).
"""

from ._async import (
    AsyncPsycopgAdvisoryLock,
    AsyncPsycopgDriver,
    AsyncPsycopgListener,
    AsyncPsycopgTxDriver,
    async_connect,
    async_from_native,
    async_wrap_transaction,
    translate_error,
)
from ._sync import (
    PsycopgAdvisoryLock,
    PsycopgDriver,
    PsycopgListener,
    PsycopgTxDriver,
    sync_connect,
    sync_from_native,
    sync_wrap_transaction,
)

__all__ = [
    "AsyncPsycopgAdvisoryLock",
    "AsyncPsycopgDriver",
    "AsyncPsycopgListener",
    "AsyncPsycopgTxDriver",
    "PsycopgAdvisoryLock",
    "PsycopgDriver",
    "PsycopgListener",
    "PsycopgTxDriver",
    "async_connect",
    "async_from_native",
    "async_wrap_transaction",
    "sync_connect",
    "sync_from_native",
    "sync_wrap_transaction",
    "translate_error",
]
