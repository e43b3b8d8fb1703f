"""Values that both sides of the driver seam use, defined once.

The asyncio protocols (pgqueue/_async/driver.py), their generated sync twin and every adapter
share these: the row and parameter types, :class:`Notification`, the SQLSTATEs that mean a lost
session, and the advisory-lock statements. They live in a module of their own so that the
protocol modules and :mod:`pgqueue.driver` (which re-exports them for adapters) can all import
them without an import cycle. Nothing here imports a database library.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ADVISORY_LOCK_HELD_SQL",
    "ADVISORY_LOCK_IDLE_TIMEOUT_SQL",
    "ADVISORY_LOCK_RELEASE_SQL",
    "ADVISORY_LOCK_TRY_SQL",
    "LOST_SQLSTATES",
    "Notification",
    "Params",
    "Row",
    "advisory_lock_held_params",
    "idle_timeout_setting",
]

Row = tuple[Any, ...]
"""One result row: a tuple of Python values, in the statement's column order."""

Params = Sequence[Any]
"""Positional parameters for ``$1, $2, ...`` placeholders."""

LOST_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "57P04", "57P05", "25P03"})
"""SQLSTATEs (besides class 08, connection exceptions) that mean the session is gone:
admin_shutdown (pg_terminate_backend), crash_shutdown, cannot_connect_now, database_dropped,
idle_session_timeout and idle_in_transaction_session_timeout. Adapters raise ConnectionLost."""


@dataclass(frozen=True)
class Notification:
    """One NOTIFY received by a listener."""

    channel: str
    payload: str
    pid: int


Notification.__module__ = "pgqueue"

ADVISORY_LOCK_TRY_SQL = "SELECT pg_try_advisory_lock($1)"
"""Take session advisory lock ``$1`` without waiting; returns whether it was taken."""

ADVISORY_LOCK_IDLE_TIMEOUT_SQL = (
    "SELECT set_config('idle_session_timeout', $1, false) "
    "WHERE current_setting('server_version_num')::int >= 140000"
)
"""Give an advisory-lock session an idle timeout (``$1`` from :func:`idle_timeout_setting`).

Servers before PostgreSQL 14 have no ``idle_session_timeout``; there the lock lasts as long as
the session."""

ADVISORY_LOCK_HELD_SQL = (
    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' "
    "AND pid = pg_backend_pid() AND granted AND objsubid = 1 "
    "AND classid::bigint = $1 AND objid::bigint = $2)"
)
"""Whether this session holds advisory lock key; parameters from
:func:`advisory_lock_held_params`."""

ADVISORY_LOCK_RELEASE_SQL = "SELECT pg_advisory_unlock($1)"
"""Release session advisory lock ``$1``."""


def advisory_lock_held_params(key: int) -> tuple[int, int]:
    """Return the parameters of :data:`ADVISORY_LOCK_HELD_SQL` for lock ``key``.

    ``pg_locks`` splits a bigint key into ``classid`` (high 32 bits) and ``objid`` (low 32 bits).
    """
    return ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF)


def idle_timeout_setting(seconds: float) -> str:
    """``seconds`` as an ``idle_session_timeout`` value (whole milliseconds, at least 1)."""
    return f"{max(1, round(seconds * 1000))}ms"
