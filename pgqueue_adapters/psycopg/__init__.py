"""pgqueue's psycopg 3 adapter: ``PsycopgDriver`` (sync) and ``AsyncPsycopgDriver`` (asyncio).

Build a driver from a URL (``sync_connect`` / ``async_connect``, which open and own a pool), or
from a ``ConnectionPool`` / ``AsyncConnectionPool`` or ``Connection`` / ``AsyncConnection`` you
already have (``sync_from_native`` / ``async_from_native``, which never close it).

``ADAPTER`` is what pgqueue's registry reads. The other names are imported, with psycopg, on
first use (see ``pgqueue_adapters._lazy``). The listener, advisory lock, ``COPY`` and error
translation (``_async_library`` and its sync twin) are shared with the SQLAlchemy adapter.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._adapter import ADAPTER

if TYPE_CHECKING:
    from ._async import (
        AsyncPsycopgDriver,
        AsyncPsycopgTxDriver,
        async_connect,
        async_from_native,
        async_wrap_transaction,
    )
    from ._async_library import (
        AsyncPsycopgAdvisoryLock,
        AsyncPsycopgListener,
        async_copy_rows,
        async_open_session,
        translate_error,
    )
    from ._sync import (
        PsycopgDriver,
        PsycopgTxDriver,
        sync_connect,
        sync_from_native,
        sync_wrap_transaction,
    )
    from ._sync_library import (
        PsycopgAdvisoryLock,
        PsycopgListener,
        sync_copy_rows,
        sync_open_session,
    )

__all__ = [
    "ADAPTER",
    "AsyncPsycopgAdvisoryLock",
    "AsyncPsycopgDriver",
    "AsyncPsycopgListener",
    "AsyncPsycopgTxDriver",
    "PsycopgAdvisoryLock",
    "PsycopgDriver",
    "PsycopgListener",
    "PsycopgTxDriver",
    "async_connect",
    "async_copy_rows",
    "async_from_native",
    "async_open_session",
    "async_wrap_transaction",
    "sync_connect",
    "sync_copy_rows",
    "sync_from_native",
    "sync_open_session",
    "sync_wrap_transaction",
    "translate_error",
]

__getattr__ = lazy_exports(__name__, ("._async_library", "._sync_library", "._async", "._sync"))
