"""The dashboard's refusals, on a real database: read-only mode, ``authorize``'s access levels,
CSRF tokens, cross-site requests, GET on an action, and redirects that stay in the dashboard.

Every refused action is checked to have changed nothing in the database. The pages and actions
themselves are in tests/test_web.py; both modules seed their schema with tests/web_helpers.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.requests import Request

from pgqueue.web import ACTIONS, Access
from tests.web_helpers import Web, World, dashboard, seeded_world

pytestmark = pytest.mark.timeout(120)

# Every action route, with a form that would change something if it were accepted.
ACTION_ROUTES: dict[str, dict[str, Any]] = {
    "/jobs/retry": {"scope": "matching", "status": "failed", "confirm": "yes"},
    "/jobs/cancel": {"scope": "matching", "queue": "images", "confirm": "yes"},
    "/jobs/delete": {"scope": "matching", "queue": "emails", "confirm": "yes"},
    "/queues/pause": {"queue": "images"},
    "/queues/resume": {"queue": "*"},
    "/queues/purge": {"queue": "*", "older_than": "0s", "confirm": "yes"},
    "/periodic/pause": {"name": "nightly"},
    "/periodic/resume": {"name": "nightly"},
    "/periodic/trigger": {"name": "nightly"},
}
# The buttons and forms of the actions, as the pages mark them.
ACTION_HOOKS = (
    'data-testid="bulk-bar"',
    'data-testid="retry',
    'data-testid="cancel',
    'data-testid="delete',
    'data-testid="pause-',
    'data-testid="resume-',
    'data-testid="purge',
    'data-testid="cron-',
    'data-testid="select-',
)
PAGES = ["/", "/jobs", "/queues", "/periodic", "/periodic/entries/nightly", "/workers"]


@pytest.fixture(scope="module")
def world(database_url: str, db) -> Iterator[World]:  # type: ignore[no-untyped-def]
    with seeded_world(database_url, db) as seeded:
        yield seeded


@pytest.fixture
def web(world: World) -> Iterator[Web]:
    with dashboard(world) as app:
        yield app


def ledger(world: World) -> list[tuple[Any, ...]]:
    """Everything an action could change: jobs, queue pauses, periodic entries and ticks."""
    schema, prefix = f'"{world.settings.schema}"', world.settings.prefix
    return [
        *world.db.rows(f"SELECT id, status, scheduled_for FROM {world.table} ORDER BY id"),
        *world.db.rows(f"SELECT name, paused_at FROM {schema}.{prefix}queues ORDER BY name"),
        *world.db.rows(f"SELECT name, paused_at FROM {schema}.{prefix}cron_entries ORDER BY 1"),
        *world.db.rows(f"SELECT name, tick FROM {schema}.{prefix}cron_ticks ORDER BY 1, 2"),
    ]


def pages_of(web: Web, world: World) -> str:
    return "".join(web.page(path) for path in [*PAGES, f"/jobs/{world.failed[0]}"])


def test_get_on_an_action_is_405(web: Web) -> None:
    for path in ACTION_ROUTES:
        response = web.get(path)
        assert response.status_code == 405, path
        assert response.headers["allow"] == "POST"


def test_read_only_shows_no_action_and_refuses_every_one(world: World) -> None:
    before = ledger(world)
    with dashboard(world, read_only=True) as web:
        html = pages_of(web, world)
        assert 'data-testid="read-only"' in html
        for hook in ACTION_HOOKS:
            assert hook not in html, hook
        token = web.token()  # a page still has one: a forged form can carry it
        for path, form in ACTION_ROUTES.items():
            refused = web.post(path, form, token=token)
            assert refused.status_code == 403, path
            assert "refused: the dashboard is read-only; nothing changed" in refused.text
    assert ledger(world) == before


def test_read_only_wins_over_authorize(world: World) -> None:
    with dashboard(world, read_only=True, authorize=lambda request: "all") as web:
        assert web.post("/queues/pause", {"queue": "images"}).status_code == 403


def test_authorize_read_shows_pages_and_refuses_actions(world: World) -> None:
    before = ledger(world)
    with dashboard(world, authorize=lambda request: "read") as web:
        html = pages_of(web, world)
        for hook in ACTION_HOOKS:
            assert hook not in html, hook
        for path, form in ACTION_ROUTES.items():
            refused = web.post(path, form)
            assert refused.status_code == 403, path
            assert "is not allowed for anonymous (testclient)" in refused.text
    assert ledger(world) == before


def test_authorize_a_set_of_actions_allows_those_only_and_names_the_actor(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    def retry_only(request: Request) -> Access:
        request.state.pgqueue_actor = "alice"
        return {"retry"}

    caplog.set_level(logging.INFO, "pgqueue.web")
    job_id = world.failed[0]
    with dashboard(world, authorize=retry_only) as web:
        html = web.page(f"/jobs/{job_id}")
        assert 'data-testid="retry"' in html
        assert 'data-testid="delete"' not in html
        listing = web.page("/jobs?status=failed")
        assert 'data-testid="retry-matching"' in listing
        assert 'data-testid="delete-matching"' not in listing
        refused = web.post("/jobs/delete", {"scope": "selected", "ids": job_id, "confirm": "yes"})
        assert refused.status_code == 403
        assert "delete is not allowed for alice" in refused.text
        assert world.status(job_id) == "failed"
        form = {"scope": "selected", "ids": job_id, "confirm": "yes"}
        assert web.post("/jobs/retry", form).status_code == 303
        assert world.status(job_id) == "pending"
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("dashboard: refused delete by alice") for m in messages), messages
    assert any(m.startswith("dashboard: retry by alice: 1 job changed") for m in messages)
    world.run("emails")  # failed again (max_attempts grew by one): as the module seeded it
    assert world.status(job_id) == "failed"


@pytest.mark.parametrize("refusal", [None, False])
def test_authorize_refusing_forbids_every_page_and_the_events(world: World, refusal: Any) -> None:
    with dashboard(world, authorize=lambda request: refusal) as web:
        for path in [*PAGES, "/events", "/jobs/1"]:
            response = web.get(path)
            assert response.status_code == 403, path
            assert "you are not allowed to see this dashboard" in response.text
        assert web.post("/queues/pause", {"queue": "images"}, token=None).status_code == 403
        assert web.get("/static/htmx.min.js").status_code == 200  # public code, no data


def test_authorize_may_be_a_coroutine_function(world: World) -> None:
    async def everything(request: Request) -> Access:
        return "all"

    with dashboard(world, authorize=everything) as web:
        html = web.page("/queues")
        assert 'data-testid="pause-images"' in html


def test_authorize_returning_something_else_is_an_error(world: World) -> None:
    admin = dashboard(world, authorize=lambda request: "admin")
    with admin as web, pytest.raises(ValueError, match="authorize returned 'admin'"):
        web.get("/")
    destroy = dashboard(world, authorize=lambda request: {"retry", "destroy"})
    with destroy as web, pytest.raises(ValueError, match=r"unknown actions \['destroy'\]"):
        web.get("/")
    assert "retry" in ACTIONS
    assert "cron_trigger" in ACTIONS


def test_an_action_needs_the_csrf_token_that_goes_with_the_cookie(web: Web, world: World) -> None:
    before = ledger(world)
    form = {"queue": "images"}
    token = web.token()  # the page sets the cookie
    missing = web.post("/queues/pause", form, token=None)
    assert missing.status_code == 403
    assert "carries no security token" in missing.text
    wrong = web.post("/queues/pause", form, token="0" * 64)
    assert wrong.status_code == 403
    assert "security token does not match" in wrong.text
    with dashboard(world) as other:  # another app: another secret
        other.http.cookies.update(web.http.cookies)
        foreign = other.post("/queues/pause", form, token=token)
        assert foreign.status_code == 403
        assert "does not match" in foreign.text
    web.http.cookies.clear()
    no_cookie = web.post("/queues/pause", form, token=token)
    assert no_cookie.status_code == 403
    assert "security cookie is missing" in no_cookie.text
    assert ledger(world) == before


def test_a_shared_secret_keeps_tokens_valid_across_processes(world: World) -> None:
    with dashboard(world, secret="s3cret") as first, dashboard(world, secret="s3cret") as second:
        token = first.token()
        second.http.cookies.update(first.http.cookies)
        done = second.post("/queues/resume", {"queue": "never-paused"}, token=token)
        assert done.status_code == 303


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({"Origin": "https://evil.example"}, "came from another origin (https://evil.example"),
        ({"Origin": "null"}, "came from another origin (null"),
        ({"Origin": "http://testserver.evil.example"}, "another origin"),
        ({"Sec-Fetch-Site": "cross-site"}, "came from another site (Sec-Fetch-Site: cross-site)"),
        ({"Sec-Fetch-Site": "same-site"}, "Sec-Fetch-Site: same-site"),
    ],
)
def test_an_action_from_another_site_is_refused(
    web: Web, world: World, headers: dict[str, str], reason: str
) -> None:
    before = ledger(world)
    refused = web.post("/queues/pause", {"queue": "images"}, headers=headers)
    assert refused.status_code == 403
    assert reason in refused.text.replace("&#39;", "'")
    assert ledger(world) == before


def test_a_client_that_sends_neither_header_is_judged_by_its_token(web: Web) -> None:
    token = web.token()
    response = web.http.post(
        "/queues/resume",
        data={"queue": "never-paused", "csrf_token": token},
    )
    assert response.status_code == 303


def test_after_an_action_the_redirect_stays_in_the_dashboard(web: Web) -> None:
    for target in ("https://evil.example/", "//evil.example/x", "/\\evil.example", "jobs"):
        done = web.post("/queues/resume", {"queue": "never-paused", "next": target})
        assert done.headers["location"] == "/queues", target
    done = web.post("/queues/resume", {"queue": "never-paused", "next": "/queues?x=1"})
    assert done.headers["location"] == "/queues?x=1"


def test_cookies_are_http_only_and_same_site_strict(world: World) -> None:
    with dashboard(world) as web:
        cookie = web.get("/").headers["set-cookie"]
        assert cookie.startswith("pgqueue_csrf=")
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie
        assert "Path=/" in cookie
        assert "set-cookie" not in web.get("/jobs").headers  # kept once set
