"""The live view: one watcher per app that tells every open page something changed.

``GET /events`` is a stream of server-sent events. Behind it, one :class:`Live` per app (however
many browsers watch) runs while someone listens, and ``LINGER`` seconds more (a browser that
moves to another page reconnects at once):

- it LISTENs on the installation's channel (``Settings.channel``), on which enqueues, retries,
  cancels and resumes NOTIFY (``q:<queue>``, ``c:<job id>``);
- and every ``poll_interval`` seconds it reads
  :meth:`~pgqueue._async.store.AsyncStore.web_activity` (the newest job, the newest finish, the
  running count, the newest pauses, the workers), which catches what sends no NOTIFY: a job
  that starts or finishes. When LISTEN is unavailable (a driver without listening sessions, a
  pooler in transaction mode, a lost session), the polling alone serves.

Each change becomes one ``change`` event (at most one per ``min_gap`` seconds), whose data is a
JSON object: ``queues`` (the queues that NOTIFY named, if any) and ``source`` (``notify``,
``poll`` or ``page``). A ``hello`` event opens the stream (``{"mode": "listen"}`` or
``{"mode": "poll"}``). Each page notes the activity it was read at (:func:`token`) and passes it
as ``/events?seen=...``: when the activity differs once the watcher has read it, the stream
sends a ``change`` (``source: page``) right after ``hello``, so that a change between the page's
reading and its stream's start is not lost. A comment every 15 s keeps proxies from closing the
stream, and it ends after ``max_stream`` seconds (the browser reconnects, and is authorized
again).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from .._async.client import AsyncClient
from .._async.store import AsyncStore
from ..errors import ConfigurationError, DatabaseError
from ..runtime_state import read_notification

__all__ = ["Live", "sse", "stream", "token"]

logger = logging.getLogger("pgqueue.web")

KEEPALIVE = 15.0
"""Seconds between the comments that keep an idle stream open through proxies."""
RETRY_LISTEN = 30.0
"""Seconds before LISTEN is tried again after it failed (polling serves meanwhile)."""
LINGER = 10.0
"""Seconds the watcher keeps running after its last stream closed."""


def sse(event: str, data: object) -> str:
    """Return one server-sent event: ``event: <event>`` and its JSON ``data``."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def token(activity: tuple[object, ...]) -> str:
    """Return a short text that stands for a reading of ``web_activity`` (16 hex digits)."""
    return hashlib.sha256(repr(activity).encode()).hexdigest()[:16]


class Live:
    """Watches the database for changes while streams are open (see the module)."""

    def __init__(
        self,
        client: Callable[[], Awaitable[AsyncClient]],
        *,
        poll_interval: float = 2.0,
        min_gap: float = 0.5,
        linger: float = LINGER,
    ) -> None:
        self._client = client
        self.poll_interval = poll_interval
        self.min_gap = min_gap
        self.linger = linger
        self.mode = "poll"
        """``listen`` while the LISTEN session is up, else ``poll``."""
        self.activity: tuple[object, ...] | None = None
        """The watcher's last reading of ``web_activity`` (``None`` before the first)."""
        self._queues: set[asyncio.Queue[dict[str, object]]] = set()
        self._task: asyncio.Task[None] | None = None
        self._ending = False  # the watcher decided to end: a new stream starts another
        self._ready = asyncio.Event()  # the watcher tried LISTEN and read the activity once

    @contextlib.asynccontextmanager
    async def subscribe(self) -> AsyncIterator[asyncio.Queue[dict[str, object]]]:
        """Receive the change events while the block runs (starting the watcher if needed)."""
        queue: asyncio.Queue[dict[str, object]] = asyncio.Queue(maxsize=16)
        self._queues.add(queue)
        if self._task is None or self._task.done() or self._ending:
            self._ready, self._ending = asyncio.Event(), False
            self._task = asyncio.get_running_loop().create_task(self._watch())
        try:
            yield queue
        finally:
            self._queues.discard(queue)

    async def stop(self) -> None:
        """Stop the watcher now (the next stream starts it again)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def ready(self, timeout: float) -> None:
        """Wait until the watcher is watching (or ``timeout`` seconds, or it has failed)."""
        task = self._task
        if task is None:
            return
        waiter = asyncio.ensure_future(self._ready.wait())
        try:
            await asyncio.wait({waiter, task}, timeout=timeout, return_when="FIRST_COMPLETED")
        finally:
            waiter.cancel()

    def _publish(self, data: dict[str, object]) -> None:
        for queue in list(self._queues):
            if queue.full():  # a stream that stopped reading: it gets the newest news only
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
            queue.put_nowait(data)

    async def _connect(self) -> AsyncClient:
        while True:
            try:
                return await self._client()
            except (DatabaseError, ConfigurationError) as exc:
                logger.warning("dashboard: cannot watch for changes (%s); trying again", exc)
                await asyncio.sleep(self.poll_interval)

    async def _watch(self) -> None:
        client = await self._connect()
        store = AsyncStore(client.driver, client.settings)
        listener = None
        listen_after = 0.0  # monotonic time to try LISTEN (again)
        next_poll = 0.0
        last_sent = 0.0
        alone_since: float | None = None  # since when no stream is open
        pending: set[str] = set()
        changed_by: str | None = None
        self.activity = None
        try:
            while True:
                now = time.monotonic()
                if self._queues:
                    alone_since = None
                elif alone_since is None:
                    alone_since = now
                elif now - alone_since >= self.linger:
                    self._ending = True
                    return
                # poll_only (a transaction pooler, no direct URL): LISTEN would hear nothing
                if listener is None and now >= listen_after and not client.poll_only:
                    try:
                        listener = await client.driver.listener(client.settings.channel)
                        self.mode = "listen"
                    except (DatabaseError, ConfigurationError, NotImplementedError) as exc:
                        listen_after = now + RETRY_LISTEN
                        logger.info("dashboard: no LISTEN session (%s); polling for changes", exc)
                # Until the next poll, or, with a change to send, until the gap allows it.
                due = next_poll if changed_by is None else min(next_poll, last_sent + self.min_gap)
                wait = min(max(0.01, due - time.monotonic()), self.poll_interval)
                if listener is not None:
                    try:
                        for note in await listener.wait(wait):
                            read = read_notification(note.payload)
                            if read is not None:
                                changed_by = changed_by or "notify"
                                if read.queue is not None:
                                    pending.add(read.queue)
                    except DatabaseError as exc:
                        logger.info("dashboard: LISTEN session lost (%s); polling", exc)
                        with contextlib.suppress(DatabaseError):
                            await listener.close()
                        listener, self.mode = None, "poll"
                        listen_after = time.monotonic() + RETRY_LISTEN
                else:
                    await asyncio.sleep(wait)
                now = time.monotonic()
                if now >= next_poll:
                    next_poll = now + self.poll_interval
                    try:
                        activity = await store.web_activity()
                    except DatabaseError as exc:
                        logger.info("dashboard: could not poll for changes (%s)", exc)
                    else:
                        if self.activity is not None and activity != self.activity:
                            changed_by = changed_by or "poll"
                        self.activity = activity
                    self._ready.set()
                if changed_by is not None and now - last_sent >= self.min_gap:
                    self._publish({"queues": sorted(pending), "source": changed_by})
                    pending, changed_by, last_sent = set(), None, now
        finally:
            if asyncio.current_task() is self._task:  # not a watcher that a new one replaced
                self.mode = "poll"
            if listener is not None:
                with contextlib.suppress(DatabaseError):
                    await listener.close()


async def stream(live: Live, max_stream: float, seen: str | None = None) -> AsyncIterator[str]:
    """Yield the text of one browser's event stream (see the module).

    ``seen``: the :func:`token` of the activity the page was read at, if it says.
    """
    async with live.subscribe() as queue:
        # The watcher tries LISTEN and reads the activity first, so that hello says how changes
        # are found, and the page's reading can be compared with the watcher's.
        await live.ready(timeout=10)
        yield "retry: 3000\n\n"
        yield sse("hello", {"mode": live.mode})
        if seen is not None and live.activity is not None and token(live.activity) != seen:
            yield sse("change", {"queues": [], "source": "page"})
        ends = time.monotonic() + max_stream
        while (left := ends - time.monotonic()) > 0:
            try:
                data = await asyncio.wait_for(queue.get(), min(KEEPALIVE, left))
            except TimeoutError:
                yield ": keepalive\n\n"
                continue
            yield sse("change", data)
