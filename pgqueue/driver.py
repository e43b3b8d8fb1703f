"""The driver protocols and what an adapter needs to implement them: the public seam.

An adapter in ``pgqueue_adapters`` imports from here (and from :mod:`pgqueue.errors` and
:mod:`pgqueue.adapter_registry`), never from pgqueue's private modules:

- the protocols the core calls: :class:`AsyncDriver`, :class:`AsyncListener`,
  :class:`AsyncAdvisoryLock`, :class:`AsyncSupportsCopy` (asyncio) and :class:`Driver`,
  :class:`Listener`, :class:`AdvisoryLock`, :class:`SupportsCopy` (blocking);
- base classes with the behaviour every adapter shares: :class:`AsyncTxDriverBase` /
  :class:`TxDriverBase` (a driver bound to an open transaction) and
  :class:`AsyncAdvisoryLockBase` / :class:`AdvisoryLockBase` (a lock on a dedicated session),
  and :func:`async_advisory_lock_once` / :func:`sync_advisory_lock_once` (one try of one);
- the values both sides pass: :data:`Row`, :data:`Params`, :class:`Notification`, the
  SQLSTATEs that mean a lost session (:data:`LOST_SQLSTATES`) and the advisory-lock SQL;
- :data:`AsyncLock` / :data:`Lock`, the lock that serialises a shared connection's statements.

Each asyncio name and its blocking twin differ only by the ``Async`` prefix, so an adapter
written for asyncio gets its sync side from tools/async_to_sync.py. The asyncio protocols are
written in pgqueue/_async/driver.py; the blocking ones are generated from them.
"""

from __future__ import annotations

import asyncio
import threading

from ._async.driver import (
    AsyncAdvisoryLock,
    AsyncAdvisoryLockBase,
    AsyncDriver,
    AsyncListener,
    AsyncSupportsCopy,
    AsyncTxDriverBase,
    async_advisory_lock_once,
)
from ._driver_values import (
    ADVISORY_LOCK_HELD_SQL,
    ADVISORY_LOCK_IDLE_TIMEOUT_SQL,
    ADVISORY_LOCK_RELEASE_SQL,
    ADVISORY_LOCK_TRY_SQL,
    LOST_SQLSTATES,
    Notification,
    Params,
    Row,
    advisory_lock_held_params,
    idle_timeout_setting,
)
from ._sync.driver import (
    AdvisoryLock,
    AdvisoryLockBase,
    Driver,
    Listener,
    SupportsCopy,
    TxDriverBase,
    sync_advisory_lock_once,
)

__all__ = [
    "ADVISORY_LOCK_HELD_SQL",
    "ADVISORY_LOCK_IDLE_TIMEOUT_SQL",
    "ADVISORY_LOCK_RELEASE_SQL",
    "ADVISORY_LOCK_TRY_SQL",
    "LOST_SQLSTATES",
    "AdvisoryLock",
    "AdvisoryLockBase",
    "AsyncAdvisoryLock",
    "AsyncAdvisoryLockBase",
    "AsyncDriver",
    "AsyncListener",
    "AsyncLock",
    "AsyncSupportsCopy",
    "AsyncTxDriverBase",
    "Driver",
    "Listener",
    "Lock",
    "Notification",
    "Params",
    "Row",
    "SupportsCopy",
    "TxDriverBase",
    "advisory_lock_held_params",
    "async_advisory_lock_once",
    "idle_timeout_setting",
    "sync_advisory_lock_once",
]

AsyncLock = asyncio.Lock
"""Serialises the statements of one shared connection (asyncio side)."""

Lock = threading.Lock
"""Serialises the statements of one shared connection (blocking side)."""
