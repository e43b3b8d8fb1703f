"""Jobs that the browser tests' and the screenshots' worker processes run.

``Gated`` fails its first attempt; a later attempt (after a retry from the dashboard) waits
until the test opens its gate, a file named after its token (or ``all``) in
``$PGQUEUE_BROWSER_GATES``, so the test sees the job running before it completes. The other
kinds are what the screenshots show: a small application's jobs that take a few milliseconds
and now and then fail.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pgqueue

GATES_ENV = "PGQUEUE_BROWSER_GATES"
ALL_GATES = "all"  # a gate file that opens every gate (the tests' teardown: workers stop at once)


@dataclass
class Gated(pgqueue.Worker):
    """Fails its first attempt; later attempts wait for the gate ``token`` to open."""

    kind = "browser.gated"
    token: str

    def process(self, ctx: pgqueue.JobContext) -> None:
        if ctx.attempt == 1:
            raise RuntimeError(f"{self.token}: the first attempt fails")
        gates = Path(os.environ[GATES_ENV])
        deadline = time.monotonic() + 60
        while not ((gates / self.token).exists() or (gates / ALL_GATES).exists()):
            if ctx.cancelled.is_set() or time.monotonic() > deadline:
                raise RuntimeError(f"{self.token}: the gate did not open")
            time.sleep(0.02)


@dataclass
class Note(pgqueue.Worker):
    """Does nothing: a job whose arguments the tests look at (``text`` may be hostile)."""

    kind = "browser.note"
    text: str
    extra: dict[str, str] = field(default_factory=dict)

    def process(self, ctx: pgqueue.JobContext) -> None:
        pass


class _Demo(pgqueue.Worker):
    """A job of the screenshots' application: a few ms of work, failing ``fail_rate`` of runs."""

    fail_rate = 0.0
    error = "failed"

    def process(self, ctx: pgqueue.JobContext) -> None:
        time.sleep(random.uniform(0.001, 0.02))
        if random.random() < self.fail_rate:
            raise RuntimeError(self.error)


@dataclass
class SendEmail(_Demo):
    """Sends one e-mail (in the screenshots: a few bounce)."""

    kind = "emails.send"
    to: str
    template: str = "welcome"
    fail_rate = 0.04
    error = "SMTPRecipientsRefused: 550 mailbox unavailable"


@dataclass
class DeliverWebhook(_Demo):
    """Delivers one webhook (in the screenshots: some endpoints are down)."""

    kind = "webhooks.deliver"
    url: str
    event: str = "order.paid"
    fail_rate = 0.08
    error = "HTTPError: 503 Service Unavailable"

    def process(self, ctx: pgqueue.JobContext) -> None:
        if self.url.endswith("/legacy"):  # an endpoint that is gone: every attempt fails
            raise ConnectionRefusedError(f"[Errno 111] Connection refused: {self.url}")
        super().process(ctx)


@dataclass
class BuildReport(_Demo):
    """Builds a report."""

    kind = "reports.build"
    report: str
    month: str = "2026-11"
    seconds: float = 0.0  # a long report: the screenshots show it running

    def process(self, ctx: pgqueue.JobContext) -> None:
        deadline = time.monotonic() + self.seconds
        while time.monotonic() < deadline and not ctx.cancelled.is_set():
            time.sleep(0.05)
        super().process(ctx)


@dataclass
class ChargeCard(_Demo):
    """Charges a customer."""

    kind = "billing.charge"
    customer_id: int
    amount_cents: int = 1999
    fail_rate = 0.02
    error = "CardDeclined: insufficient funds"


@dataclass
class WarmCache(_Demo):
    """Warms a cache (a periodic job in the screenshots)."""

    kind = "cache.warm"
    region: str = "eu-west"


# The browser tests' worker: no periodic entries, so that it enqueues nothing on its own.
registry = pgqueue.WorkerRegistry(Gated, Note)

# The screenshots' worker: the application's jobs and its schedule.
demo_registry = pgqueue.WorkerRegistry(
    Gated, Note, SendEmail, DeliverWebhook, BuildReport, ChargeCard, WarmCache
)
demo_registry.schedule(
    pgqueue.Periodic(
        name="cache.warm.eu", job=WarmCache(region="eu-west"), every=timedelta(minutes=5)
    )
)
demo_registry.schedule(
    pgqueue.Periodic(
        name="reports.nightly",
        job=BuildReport(report="daily-revenue"),
        cron="0 3 * * *",
        timezone="Europe/Paris",
        options=pgqueue.JobOptions(queue="reports"),
    )
)
demo_registry.schedule(
    pgqueue.Periodic(
        name="emails.digest.weekly",
        job=SendEmail(to="team@example.com", template="digest"),
        cron="0 8 * * 1",
        overlap="skip",
        options=pgqueue.JobOptions(queue="emails"),
    )
)
