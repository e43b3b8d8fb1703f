"""The dashboard (``pgqueue.web``) through an ASGI test client, on a real database: every page,
the actions with their counts and confirmations, escaping, where it is mounted, and the reading
transactions (statement timeout, read only).

The refusals (read-only, ``authorize``, CSRF, cross-site requests, GET on an action) are in
tests/test_web_security.py; the live updates and ``pgqueue dashboard`` in tests/test_web_live.py.
The module shares one seeded schema (tests/web_helpers.py); a test that changes jobs works in
queues of its own.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

import pgqueue
from pgqueue.web import create_app
from pgqueue.web._app import Dashboard
from tests.web_helpers import Web, World, dashboard, seeded_world

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def world(database_url: str, db) -> Iterator[World]:  # type: ignore[no-untyped-def]
    with seeded_world(database_url, db) as seeded:
        yield seeded


@pytest.fixture
def web(world: World) -> Iterator[Web]:
    with dashboard(world) as app:
        yield app


def queue_name() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


def dash_of(app: Starlette) -> Dashboard:
    dash = app.state.pgqueue_dashboard
    assert isinstance(dash, Dashboard)
    return dash


# -- pages --------------------------------------------------------------------------------------


def test_overview_shows_totals_charts_queues_and_the_leader(web: Web, world: World) -> None:
    html = web.page("/")
    assert 'data-testid="page-overview"' in html
    assert re.search(r'data-events="/events\?seen=[0-9a-f]{16}"', html)
    for queue in ("emails", "images", "idle"):
        assert f'data-testid="queue-row-{queue}"' in html
    summary = re.search(
        r"(\d+) jobs finished in the last 60 minutes: (\d+) completed, (\d+) failed", html
    )
    assert summary, html
    assert int(summary.group(2)) >= 3
    assert int(summary.group(3)) >= 2
    assert html.count('class="bar-completed"') >= 1
    assert 'class="rate"' in html
    assert f"{socket.gethostname()}:{os.getpid()}" in html  # the leader (this process's worker)
    assert 'class="card alert" href="/jobs?status=failed" data-testid="total-failed"' in html


def test_jobs_page_filters_and_pages_by_key(web: Web, world: World) -> None:
    html = web.page("/jobs?queue=emails&status=failed")
    for job_id in world.failed:
        assert f'data-testid="job-row-{job_id}"' in html
    for job_id in world.completed:
        assert f'data-testid="job-row-{job_id}"' not in html
    html = web.page('/jobs?queue=emails&status=completed&args={"token": "web"}')
    assert all(f'data-testid="job-row-{i}"' in html for i in world.completed)

    first = web.page("/jobs?queue=emails&limit=1")
    assert f'data-testid="job-row-{world.failed[-1]}"' in first  # newest first
    found = re.search(r'href="([^"]+)" data-testid="page-next"', first)
    assert found
    second = web.page(found.group(1).replace("&amp;", "&"))
    assert f'data-testid="job-row-{world.failed[-2]}"' in second
    assert 'data-testid="page-first"' in second

    jump = web.get(f"/jobs?id={world.pending[0]}")
    assert jump.status_code == 303
    assert jump.headers["location"] == f"/jobs/{world.pending[0]}"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("args=[1]", "give a JSON object"),
        ("args={bad", "not valid JSON"),
        ("status=bogus", "unknown status 'bogus'"),
        ("queue=x%27;%20DROP%20TABLE%20jobs", "invalid queue name"),
        ("limit=5000", "from 1 to 1000"),
        ("cursor=nonsense", "not one list_jobs returned"),
        ("id=12x", "is not a job id"),
    ],
)
def test_bad_filters_are_said_on_the_page(web: Web, query: str, message: str) -> None:
    response = web.get(f"/jobs?{query}")
    assert response.status_code == 400
    error = re.search(r'data-testid="filter-error">([^<]*)<', response.text)
    assert error, response.text[-3000:]
    assert message in error.group(1).replace("&#39;", "'")


def test_job_page_shows_arguments_attempts_and_escapes_markup(web: Web, world: World) -> None:
    html = web.page(f"/jobs/{world.failed[0]}")
    assert '<span class="status status-failed" data-testid="job-status">failed</span>' in html
    assert 'data-testid="attempt-1" data-outcome="failed"' in html
    assert "Traceback (most recent call last)" in html
    # arguments, the error and the traceback hold <script>: all shown as text
    assert "<script>alert" not in html
    escaped = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"
    assert html.count(escaped) >= 3, html
    listing = web.page("/jobs?queue=emails&status=failed")
    assert "<script>alert" not in listing
    assert escaped in listing

    done = web.page(f"/jobs/{world.completed[0]}")
    assert 'data-testid="attempt-1" data-outcome="completed"' in done
    assert "&#34;token&#34;: &#34;web&#34;" in done  # the arguments, as JSON (escaped)

    missing = web.get("/jobs/987654321")
    assert missing.status_code == 404
    assert "no job 987654321" in missing.text


def test_hide_args_hides_arguments_and_tracebacks(world: World) -> None:
    with dashboard(world, hide_args=True) as web:
        html = web.page(f"/jobs/{world.failed[0]}")
        assert 'data-testid="job-args-hidden"' in html
        assert "&#34;token&#34;" not in html
        assert "Traceback (most recent" not in html
        listing = web.page("/jobs?queue=emails")
        assert "&#34;token&#34;" not in listing
        assert 'data-testid="filter-args"' not in listing
        refused = web.get('/jobs?args={"token": "web"}')
        assert refused.status_code == 400
        assert "cannot filter by them" in refused.text


def test_queues_workers_and_periodic_pages(web: Web, world: World) -> None:
    queues = web.page("/queues")
    assert 'data-testid="queue-row-images" data-paused="no"' in queues
    assert 'data-testid="pause-images"' in queues
    assert 'data-testid="purge-form"' in queues
    workers = web.page("/workers")
    assert re.search(r'data-testid="worker-row-[0-9a-f-]{36}"', workers)
    assert 'data-testid="worker-leader"' in workers
    periodic = web.page("/periodic")
    assert 'data-testid="periodic-row-nightly"' in periodic
    assert "0 3 1 1 *" in periodic
    assert 'data-testid="cron-trigger-nightly"' in periodic
    entry = web.page("/periodic/entries/nightly")
    assert 'data-testid="periodic-entry"' in entry
    assert web.get("/periodic/entries/nope").status_code == 404
    assert web.get("/periodic/entries/bad%20name!").status_code == 404


def test_static_files_and_security_headers(web: Web) -> None:
    page = web.get("/")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["cache-control"] == "no-store"
    htmx = web.get("/static/htmx.min.js")
    assert htmx.status_code == 200
    assert htmx.text.startswith("var htmx=")
    assert "no-store" not in htmx.headers.get("cache-control", "")
    assert "Zero-Clause BSD" in web.get("/static/htmx.LICENSE").text
    assert web.get("/static/pgqueue.css").status_code == 200
    assert "EventSource" in web.get("/static/pgqueue.js").text
    assert web.get("/static/../__init__.py").status_code == 404


# -- actions ------------------------------------------------------------------------------------


def test_retry_by_filter_counts_asks_then_acts_and_logs_who(
    web: Web, world: World, caplog: pytest.LogCaptureFixture
) -> None:
    queue = queue_name()
    ids = world.add(queue, 3, fail=True, max_attempts=1)
    world.run(queue)
    form = {"scope": "matching", "status": "failed", "queue": queue}
    asked = web.post("/jobs/retry", form)
    assert asked.status_code == 200
    assert 'data-testid="confirm-page" data-action="retry" data-count="3"' in asked.text
    assert f"status=failed, queue={queue}" in asked.text
    assert world.statuses(ids) == ["failed"] * 3  # counting changed nothing

    caplog.set_level(logging.INFO, "pgqueue.web")
    done = web.post("/jobs/retry", {**form, "confirm": "yes"})
    assert done.status_code == 303
    assert done.headers["location"] == f"/jobs?status=failed&queue={queue}"
    assert world.statuses(ids) == ["pending"] * 3
    assert 'data-testid="flash">retried 3 jobs<' in web.page(done.headers["location"])
    assert [(a.action, sorted(a.job_ids)) for a in web.actions] == [("retry", sorted(ids))]
    assert any(
        "retry by anonymous (testclient)" in r.getMessage() and r.__dict__["changed"] == 3
        for r in caplog.records
    )


def test_selected_jobs_show_what_would_be_refused_before_acting(web: Web, world: World) -> None:
    queue = queue_name()
    done = world.add(queue, 1)
    world.run(queue)
    waiting = world.add(queue, 2)
    pairs = [("scope", "selected"), ("ids", waiting[1]), ("ids", done[0])]
    asked = web.post("/jobs/cancel", pairs)
    assert 'data-count="1"' in asked.text
    assert f"job {done[0]}: it has already ended (completed)" in asked.text
    acted = web.post("/jobs/cancel", [*pairs, ("confirm", "yes")])
    assert acted.status_code == 303
    assert world.statuses([waiting[0], waiting[1], done[0]]) == [
        "pending",
        "cancelled",
        "completed",
    ]
    flash = web.page(acted.headers["location"])
    assert f"cancelled 1 job; 1 refused (job {done[0]}: it has already ended" in flash
    nothing = web.post("/jobs/retry", [("scope", "selected")])
    assert nothing.status_code == 303
    assert "select the jobs to retry first" in web.page(nothing.headers["location"])


def test_job_page_retries_at_once_and_deletes_after_confirmation(web: Web, world: World) -> None:
    queue = queue_name()
    (job_id,) = world.add(queue, 1, fail=True, max_attempts=1)
    world.run(queue)
    html = web.page(f"/jobs/{job_id}")
    assert 'data-testid="retry"' in html
    assert 'data-testid="delete"' in html
    assert 'data-testid="cancel"' not in html
    retried = web.post(
        "/jobs/retry",
        {"scope": "selected", "ids": job_id, "confirm": "yes", "next": f"/jobs/{job_id}"},
    )
    assert retried.status_code == 303
    assert retried.headers["location"] == f"/jobs/{job_id}"
    assert world.status(job_id) == "pending"
    assert 'data-testid="cancel"' in web.page(f"/jobs/{job_id}")

    asked = web.post("/jobs/delete", {"scope": "selected", "ids": job_id, "next": "/jobs"})
    assert 'data-testid="confirm"' in asked.text
    assert world.status(job_id) == "pending"
    deleted = web.post(
        "/jobs/delete", {"scope": "selected", "ids": job_id, "confirm": "yes", "next": "/jobs"}
    )
    assert deleted.headers["location"] == "/jobs"
    assert world.status(job_id) is None
    assert web.get(f"/jobs/{job_id}").status_code == 404


def test_an_action_the_api_refuses_changes_nothing(web: Web, world: World) -> None:
    refused = web.post("/jobs/retry", {"scope": "matching", "status": "processing"})
    assert refused.status_code == 400
    assert "retry does not apply to processing jobs" in refused.text
    empty = web.post("/jobs/retry", {"scope": "matching", "queue": queue_name()})
    assert 'data-count="0"' in empty.text
    assert "Nothing to retry" in empty.text
    assert web.post("/jobs/retry", {"scope": "everything"}).status_code == 400


def test_pause_resume_and_purge_a_queue(web: Web, world: World) -> None:
    queue = queue_name()
    world.add(queue, 1)
    paused = web.post("/queues/pause", {"queue": queue})
    assert paused.status_code == 303
    assert paused.headers["location"] == "/queues"
    html = web.page("/queues")
    assert f"paused {queue} (workers finish what they run" in html
    assert f'data-testid="queue-row-{queue}" data-paused="yes"' in html
    assert f'data-testid="resume-{queue}"' in html
    with world.client() as client:
        assert [q.paused for q in client.queue_stats(queue)] == [True]
    web.post("/queues/resume", {"queue": queue})
    assert f'data-testid="pause-{queue}"' in web.page("/queues")
    again = web.post("/queues/resume", {"queue": queue})
    assert f"nothing to resume: {queue} is not paused" in web.page(again.headers["location"])

    old = world.add(queue, 2)
    world.run(queue)
    world.db.rows(
        f"UPDATE {world.table} SET finished_at = now() - interval '3 days' WHERE id = ANY($1)",
        (old,),
    )
    form = {"queue": queue, "older_than": "2d", "status": "completed"}
    asked = web.post("/queues/purge", form)
    assert 'data-action="purge" data-count="2"' in asked.text
    assert world.statuses(old) == ["completed", "completed"]
    purged = web.post("/queues/purge", {**form, "confirm": "yes"})
    assert "purged 2 jobs" in web.page(purged.headers["location"])
    assert world.statuses(old) == [None, None]
    bad = web.post("/queues/purge", {**form, "older_than": "7"})
    assert bad.status_code == 400
    assert "add a unit" in bad.text


def test_periodic_entry_trigger_pause_and_resume(web: Web, world: World) -> None:
    triggered = web.post("/periodic/trigger", {"name": "nightly"})
    flash = web.page(triggered.headers["location"])
    found = re.search(r"triggered nightly: enqueued job (\d+)", flash)
    assert found
    history = web.page("/periodic/entries/nightly")
    assert re.search(
        r'data-testid="tick-row-1">\s*<td><time[^>]*>[^<]*</time></td>\s*<td>manual', history
    )
    assert f'href="/jobs/{found.group(1)}"' in history

    web.post("/periodic/pause", {"name": "nightly"})
    assert 'data-testid="periodic-row-nightly" data-paused="yes"' in web.page("/periodic")
    web.post("/periodic/resume", {"name": "nightly"})
    assert 'data-testid="periodic-row-nightly" data-paused="no"' in web.page("/periodic")
    missing = web.post("/periodic/trigger", {"name": "nope"})
    assert "no periodic entry named &#39;nope&#39;" in web.page(missing.headers["location"])


# -- where it is mounted ------------------------------------------------------------------------


def test_prefix_puts_every_route_and_link_under_it(world: World) -> None:
    with dashboard(world, prefix="/pgqueue") as web:
        html = web.page("/pgqueue/")
        assert 'href="/pgqueue/jobs"' in html
        assert 'src="/pgqueue/static/htmx.min.js"' in html
        assert 'data-events="/pgqueue/events?seen=' in html
        assert web.get("/").status_code == 404
        assert web.get("/pgqueue/static/htmx.min.js").status_code == 200
        token = web.token("/pgqueue/jobs")
        done = web.post("/pgqueue/queues/resume", {"queue": queue_name()}, token=token)
        assert done.headers["location"] == "/pgqueue/queues"
    with pytest.raises(ValueError, match="prefix must be"):
        create_app(lambda: pgqueue.AsyncClient.connect(), prefix="pgqueue/")


def test_mounted_in_a_host_app_links_stay_its_own(world: World) -> None:
    async def connect() -> pgqueue.AsyncClient:
        return await pgqueue.AsyncClient.connect(world.url, settings=world.settings)

    dashboard_app = create_app(connect)
    host = Starlette(
        routes=[
            # a route of the host named like one of the dashboard's: it must not be used
            Route("/jobs", lambda request: PlainTextResponse("host"), name="jobs"),
            Mount("/ops/queue", app=dashboard_app),
        ]
    )
    with TestClient(host, follow_redirects=False) as http:
        try:
            web = Web(http)
            html = web.page("/ops/queue/")
            assert 'href="/ops/queue/jobs"' in html
            assert 'href="/jobs"' not in html
            assert web.page("/jobs") == "host"
            done = web.post("/ops/queue/queues/resume", {"queue": queue_name()}, token=None)
            assert done.status_code == 403  # no token: the cookie is the dashboard's
            token = web.token("/ops/queue/jobs")
            done = web.post("/ops/queue/queues/resume", {"queue": queue_name()}, token=token)
            assert done.headers["location"] == "/ops/queue/queues"
        finally:
            http.portal.call(dash_of(dashboard_app).close)  # a mounted app has no lifespan


def test_a_sync_client_is_refused(world: World) -> None:
    with world.client() as client, pytest.raises(TypeError, match=r"needs a pgqueue\.AsyncClient"):
        create_app(client)  # type: ignore[arg-type]


# -- reading: the statement timeout, read-only transactions ------------------------------------


def test_a_slow_page_ends_at_the_statement_timeout(world: World) -> None:
    with dashboard(world, statement_timeout=0.3) as web:
        assert web.get("/jobs").status_code == 200
        with psycopg.connect(world.url) as locker:
            locker.execute(f"LOCK TABLE {world.table} IN ACCESS EXCLUSIVE MODE")
            started = time.monotonic()
            slow = web.get("/jobs")
            assert slow.status_code == 504
            assert time.monotonic() - started < 5
            assert "did not answer within 0.3 s" in slow.text
        assert web.get("/jobs").status_code == 200


async def test_pages_read_in_read_only_transactions(world: World) -> None:
    dash = dash_of(
        create_app(lambda: pgqueue.AsyncClient.connect(world.url, settings=world.settings))
    )
    try:
        with pytest.raises(pgqueue.DatabaseError) as caught:
            async with dash.reading() as reader:
                await reader.store.queue_pause(["never"])
        assert caught.value.sqlstate == "25006"  # read_only_sql_transaction
    finally:
        await dash.close()
