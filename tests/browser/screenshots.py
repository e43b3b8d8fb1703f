"""Screenshots of the dashboard for docs/dashboard.md: ``python -m tests.browser.screenshots``.

Not a test (CI does not rewrite the docs): it creates a database of its own, fills it with a
small application's jobs (``tests/browser/jobs.py``: e-mails, webhooks, reports, billing, a
cache warmed every five minutes), runs them in a real worker, spreads their times over the last
hour so that the charts have an hour to show (demo data: the worker ran them in seconds), then
starts ``pgqueue dashboard`` and takes each page in headless Chromium into
``docs/dashboard/*.png``: overview, failed jobs, a failed job's attempts, queues, periodic
entries, workers, and the overview on a phone and in dark mode. The database is dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgqueue
from tests.browser import harness
from tests.browser.jobs import (
    GATES_ENV,
    BuildReport,
    ChargeCard,
    DeliverWebhook,
    Note,
    SendEmail,
)

OUT = harness.ROOT / "docs" / "dashboard"
SCHEMA = "public"


def _wait(what: str, check: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"not within {timeout}s: {what}")
        time.sleep(0.1)
    return value


def fill(client: pgqueue.Client) -> None:
    """Enqueue the demo application's jobs (the worker runs them; reports wait: it is paused)."""
    rnd = random.Random(18)
    templates = ("welcome", "reset", "invoice", "digest")
    for i in range(260):
        client.add_job(
            SendEmail(to=f"user{rnd.randint(1, 9999)}@example.com", template=templates[i % 4]),
            queue="emails",
            # some with retries, a tenth of a second apart: the job page's attempt timeline
            max_attempts=1 if i % 3 else 3,
            retry_backoff=timedelta(milliseconds=100),
            retry_backoff_max=timedelta(milliseconds=200),
        )
    for _ in range(140):
        client.add_job(
            DeliverWebhook(
                url=f"https://hooks.example.net/{rnd.choice(['acme', 'globex', 'initech'])}",
                event=rnd.choice(["order.paid", "order.shipped", "invoice.created"]),
            ),
            queue="webhooks",
            max_attempts=1,
        )
    for _ in range(90):
        client.add_job(
            ChargeCard(customer_id=rnd.randint(1000, 9999), amount_cents=rnd.randint(500, 20000)),
            queue="billing",
            max_attempts=1,
        )
    for event in ("order.paid", "order.refunded"):  # three attempts each, all refused
        client.add_job(
            DeliverWebhook(url="https://hooks.example.net/legacy", event=event),
            queue="webhooks",
            max_attempts=3,
            retry_backoff=timedelta(milliseconds=100),
            retry_backoff_max=timedelta(milliseconds=200),
        )
    for month in ("2026-09", "2026-10", "2026-11"):
        client.add_job(BuildReport(report="revenue", month=month))
    client.add_job(Note(text="<script>alert('not run')</script>", extra={"why": "escaping"}))


def spread_over_the_last_hour(conn: psycopg.Connection[Any], jobs: str) -> None:
    """Move the finished jobs back over the last 55 minutes, oldest id first (demo data).

    Each job's times move together, those of its attempts' history too.
    """
    shifted = ", ".join(
        f"'{key}', to_jsonb((e.value->>'{key}')::timestamptz - s.o)"
        for key in ("at", "claimed_at", "started_at", "finished_at")
    )
    conn.execute(
        f"""
        WITH finished AS (
            SELECT id, row_number() OVER (ORDER BY id DESC) AS n, count(*) OVER () AS total
            FROM {jobs} WHERE finished_at IS NOT NULL
        ), s AS (
            SELECT id, (n::float8 / total) * interval '55 min' + random() * interval '20 s' AS o
            FROM finished
        )
        UPDATE {jobs} j SET created_at = j.created_at - s.o, scheduled_for = j.scheduled_for - s.o,
            locked_at = j.locked_at - s.o, finished_at = j.finished_at - s.o,
            last_error_at = j.last_error_at - s.o,
            errors = (
                SELECT coalesce(jsonb_agg(
                    e.value || jsonb_strip_nulls(jsonb_build_object({shifted})) ORDER BY e.ord
                ), '[]'::jsonb)
                FROM jsonb_array_elements(j.errors) WITH ORDINALITY AS e(value, ord)
            )
        FROM s
        WHERE j.id = s.id
        """.encode()
    )


def take(
    driver: Any, url: str, name: str, *, dark: bool = False, phone: bool = False, script: str = ""
) -> None:
    """Load ``url``, run ``script`` in it, and save it as docs/dashboard/<name>.png."""
    harness.emulate(driver, dark=dark, phone=phone)
    driver.get(url)
    if script:
        driver.execute_script(script)
    # the page settles: htmx has run, the times are in the browser's zone
    _wait("page loaded", lambda: driver.execute_script("return document.readyState") == "complete")
    time.sleep(0.5)
    path = OUT / f"{name}.png"
    harness.screenshot(driver, path, max_height=1400 if not phone else 1600)
    print(f"  {path.relative_to(harness.ROOT)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PGQUEUE_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"),
        help="an admin connection: a database is created for the screenshots, then dropped",
    )
    args = parser.parse_args()
    reason = harness.missing_browser()
    if reason:
        raise SystemExit(reason)
    name = f"pgqueue_screenshots_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"'.encode())
    info = conninfo_to_dict(args.dsn)
    info["dbname"] = name
    dsn = make_conninfo(**info)  # type: ignore[arg-type]
    url = f"postgresql://{info.get('user', 'postgres')}@{info.get('host', '127.0.0.1')}"
    url += f":{info.get('port', 5432)}/{name}"
    logs = Path(tempfile.mkdtemp(prefix="pgqueue-screenshots-"))
    env = harness.clean_env(url, SCHEMA, **{GATES_ENV: str(logs)})
    procs: list[harness.Process] = []
    try:
        with pgqueue.Client.connect(url) as client:
            client.migrate()
            client.pause_queue("reports")
            client.add_job(BuildReport(report="daily-revenue"), queue="reports")
            fill(client)
            jobs = f"{client.settings.schema}.{client.settings.prefix}jobs"
            worker = harness.worker(
                env,
                logs / "worker.log",
                "tests.browser.jobs:demo_registry",
                "--queues",
                "default=4,emails=4,webhooks=2,billing=2",
            )
            procs.append(worker)
            with psycopg.connect(dsn, autocommit=True) as conn:

                def pending() -> int:
                    worker.check_alive()
                    q = f"SELECT count(*) FROM {jobs} WHERE status IN ('pending', 'processing')"
                    q += " AND queue <> 'reports'"
                    return int(conn.execute(q.encode()).fetchone()[0])  # type: ignore[index]

                _wait("the periodic entries declared", lambda: len(client.cron_list()) == 3)
                client.cron_trigger("cache.warm.eu")
                client.cron_pause("emails.digest.weekly")
                _wait("the demo jobs ran", lambda: pending() == 0, 120)
                spread_over_the_last_hour(conn, jobs)
                # two long reports run while the pictures are taken (the workers page)
                for month in ("2026-10", "2026-11"):
                    client.add_job(BuildReport(report="ledger", month=month, seconds=300))
                _wait(
                    "the reports run",
                    lambda: conn.execute(
                        f"SELECT count(*) = 2 FROM {jobs} WHERE status = 'processing'".encode()
                    ).fetchone()[0],  # type: ignore[index]
                )
                (failed,) = conn.execute(  # type: ignore[misc]
                    f"SELECT max(id) FROM {jobs} WHERE status = 'failed' AND attempts = 3".encode()
                ).fetchone()
        server = harness.Dashboard(env, logs / "dashboard.log")
        procs.append(server)
        server.wait_ready()
        print(f"screenshots of {server.base} into {OUT.relative_to(harness.ROOT)}/")
        with harness.chromium(1280, 900) as driver:
            take(driver, server.url("/"), "overview")
            take(driver, server.url("/jobs?status=failed"), "jobs")
            last_traceback = "const d = document.querySelectorAll('details'); d[d.length-1].open=1"
            take(driver, server.url(f"/jobs/{failed}"), "job", script=last_traceback)
            take(driver, server.url("/queues"), "queues")
            take(driver, server.url("/periodic"), "periodic")
            take(driver, server.url("/workers"), "workers")
            take(driver, server.url("/"), "overview-phone", phone=True)
            take(driver, server.url("/"), "overview-dark", dark=True)
    finally:
        for proc in reversed(procs):
            proc.stop(timeout=5)
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


if __name__ == "__main__":
    main()
