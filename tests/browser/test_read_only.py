"""``pgqueue dashboard --read-only`` in a real browser: no action shown, every forged one refused.

The module's worker leaves a failed job and a queue with jobs. Every page shows the read-only
badge and no button that POSTs (no retry, pause, purge, trigger, bulk bar); and a POST forged
from the page itself (the browser sends the cookies and says it is same-origin) or from a
script is refused with 403 because the dashboard is read-only, leaving the job and the queue
as they were.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request

import pytest

import pgqueue
from tests._sync.helpers import wait_until
from tests.browser.harness import Dashboard, Process
from tests.browser.jobs import Gated, Note
from tests.browser.page import By, WebDriver, hook, hooks, post_buttons

pytestmark = pytest.mark.timeout(180)

# A POST sent by the page itself: same origin, with the page's cookies and, if the page has one,
# its genuine CSRF token: refused all the same, since the dashboard is read-only.
FORGE = """
const [path, fields, done] = arguments;
const token = document.querySelector("input[name=csrf_token]");
const body = new URLSearchParams({csrf_token: token ? token.value : "x".repeat(64), ...fields});
fetch(path, {method: "POST", body, redirect: "manual"})
    .then(async r => done([r.status, await r.text()]), e => done([0, String(e)]));
"""


@pytest.fixture(scope="module")
def failed(client: pgqueue.Client, worker: Process) -> int:
    """A job that failed, once the worker has run it (and a completed one beside it)."""
    job = client.add_job(Gated(token="read-only"), max_attempts=1)
    client.add_job(Note(text="done"))

    def failed() -> bool:
        worker.check_alive()
        info = client.get_job(job.id)
        return info is not None and info.status == "failed"

    wait_until(failed, 30, what="the job failed")
    return job.id


@pytest.mark.parametrize(
    "path", ["/", "/jobs", "/jobs?status=failed", "/job", "/queues", "/periodic", "/workers"]
)
def test_no_page_shows_an_action(
    browser: WebDriver, read_only_dashboard: Dashboard, failed: int, path: str
) -> None:
    browser.get(read_only_dashboard.url(f"/jobs/{failed}" if path == "/job" else path))
    assert hook(browser, "read-only").is_displayed()
    assert post_buttons(browser) == []
    for name in ("bulk-bar", "job-actions", "retry", "purge-form", "pause-all"):
        assert hooks(browser, name) == [], name
    assert not browser.find_elements(By.CSS_SELECTOR, '[data-testid^="pause-"]')
    assert not browser.find_elements(By.CSS_SELECTOR, '[data-testid^="cron-"]')
    if path == "/job":
        assert hook(browser, "job-status").text == "failed"  # the page is there, without actions


def test_a_post_forged_in_the_page_is_refused(
    browser: WebDriver, read_only_dashboard: Dashboard, failed: int, client: pgqueue.Client
) -> None:
    browser.get(read_only_dashboard.url("/jobs"))
    forged = {"scope": "selected", "ids": str(failed), "confirm": "yes"}
    status, body = browser.execute_async_script(FORGE, "/jobs/retry", forged)
    assert status == 403, body
    assert "refused: the dashboard is read-only" in body
    status, body = browser.execute_async_script(FORGE, "/queues/pause", {"queue": "default"})
    assert status == 403, body
    assert "refused: the dashboard is read-only" in body
    info = client.get_job(failed)
    assert info is not None
    assert info.status == "failed"
    assert not any(s.paused for s in client.queue_stats())


def test_a_post_from_a_script_is_refused(
    read_only_dashboard: Dashboard, failed: int, client: pgqueue.Client
) -> None:
    for path, fields in (
        ("/jobs/retry", {"scope": "matching", "status": "failed", "confirm": "yes"}),
        ("/queues/purge", {"queue": "default", "older_than": "0s", "confirm": "yes"}),
    ):
        request = urllib.request.Request(
            read_only_dashboard.url(path),
            data=urllib.parse.urlencode(fields).encode(),
            method="POST",
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 403
        assert "refused: the dashboard is read-only" in refused.value.read().decode()
    assert client.job_counts().get("failed") == 1
    assert client.job_counts().get("completed") == 1
