"""The listener: a dedicated LISTEN session that wakes fetchers and relays cancel requests.

When its session dies it reconnects with backoff and then wakes every fetcher (notifications
sent meanwhile are lost); ``ListenerLost`` and ``ListenerReconnected`` say so.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Mapping

from ...backoff import Backoff
from ...errors import DatabaseError
from ...events import EventHub, ListenerLost, ListenerReconnected
from ...runtime_config import RuntimeConfig
from ...runtime_state import RunTable, read_notification
from ..compat import Event, wait_event
from ..driver import AsyncDriver

__all__ = ["AsyncListener"]

# How long a listener wait may block, so the loop notices shutdown promptly (a stop waits for
# it). A wait is local (no round trip), so a short one costs a wake-up, nothing more.
_LISTEN_WAIT = 0.1
# First pause before reconnecting (doubling up to listener_reconnect_max).
_RETRY_FIRST = 0.1


class AsyncListener:
    """Listens on the runtime's channel until the runtime stops."""

    def __init__(
        self,
        *,
        driver: AsyncDriver,
        channel: str,
        config: RuntimeConfig,
        wake: Mapping[str, Event],
        runs: RunTable,
        stopping: Event,
        events: EventHub,
        instance_id: uuid.UUID,
    ) -> None:
        self._driver = driver
        self._channel = channel
        self._config = config
        self._wake = wake
        self._runs = runs
        self._stopping = stopping
        self._events = events
        self._instance_id = instance_id
        self._backoff = Backoff(_RETRY_FIRST, config.listener_reconnect_max, jitter=0.2)
        self.connected = False  # the LISTEN session is up (the health probes report it)

    async def run(self) -> None:
        """Listen, reconnecting with backoff whenever the session dies."""
        lost_at: float | None = None  # monotonic time the session was lost, while it is
        while not self._stopping.is_set():
            listener = None
            retry_in = self._backoff.upcoming
            try:
                listener = await self._driver.listener(self._channel)
                self.connected = True
                self._backoff.reset()
                # Notifications sent while we were not listening are lost: look for work.
                for wake in self._wake.values():
                    wake.set()
                if lost_at is not None:
                    self._reconnected(time.monotonic() - lost_at)
                    lost_at = None
                while not self._stopping.is_set():
                    wait = min(_LISTEN_WAIT, self._config.poll_interval)
                    for note in await listener.wait(wait):
                        self.on_notification(note.payload)
            except DatabaseError as exc:
                self.connected = False
                retry_in = self._backoff.next()
                if lost_at is None:
                    lost_at = time.monotonic()
                if not self._stopping.is_set() and self._events.wants(ListenerLost):
                    self._events.emit(ListenerLost(self._instance_id, str(exc), retry_in))
            finally:
                self.connected = False
                if listener is not None:
                    with contextlib.suppress(DatabaseError):
                        await listener.close()
            if await wait_event(self._stopping, retry_in):
                break

    def on_notification(self, payload: str) -> None:
        """Act on one notification: wake its queue's fetcher, or stop a cancelled job's runs."""
        note = read_notification(payload)
        if note is None:
            return
        if note.queue is not None:
            wake = self._wake.get(note.queue)
            if wake is not None:
                wake.set()
        elif note.cancel is not None:
            self._runs.cancel(note.cancel)

    def _reconnected(self, down_for: float) -> None:
        if self._events.wants(ListenerReconnected):
            self._events.emit(ListenerReconnected(self._instance_id, down_for))
