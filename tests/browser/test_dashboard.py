"""The dashboard in a real browser, every action allowed: what an operator does in an incident.

One ``pgqueue dashboard`` process, one worker process and one headless Chromium for the module
(conftest.py). The worker has run a job that failed (``Gated``: its first attempt fails, a retry
waits for the test to open its gate), a few that completed, and a job whose arguments hold
markup; a job in a queue no worker serves stays pending. The tests load the overview, filter
the jobs, open the failed job, retry it and watch it run and complete without reloading the
page (the server-sent events), pause a queue, and check that the markup in arguments and in a
filter is shown as text and never runs.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

import pgqueue
from tests._sync.helpers import wait_until
from tests.browser.harness import Dashboard, Process
from tests.browser.jobs import Gated, Note
from tests.browser.page import By, WebDriver, assert_nothing_ran, click, hook, hooks, wait

pytestmark = pytest.mark.timeout(180)

# Markup that would set a global, or raise an alert, if the page ran it.
HOSTILE = (
    "</pre></script><script>window.pgqueueXss = 1; alert('xss')</script>"
    '<img src="nowhere.png" onerror="window.pgqueueXss = 2">'
)


def rows(driver: WebDriver) -> list[tuple[str, str]]:
    """The jobs page's rows: (data-testid, data-status) of each, read in one script."""
    return [
        (a, b)
        for a, b in driver.execute_script(
            "return [...document.querySelectorAll('[data-testid^=\"job-row-\"]')]"
            ".map(r => [r.dataset.testid, r.dataset.status])"
        )
    ]


@pytest.fixture(scope="module")
def jobs(client: pgqueue.Client, worker: Process) -> dict[str, int]:
    """The module's jobs, once the worker has run those it serves."""
    failed = client.add_job(Gated(token="retry-me"), max_attempts=1)
    done = [client.add_job(Note(text=f"note {i}")) for i in range(3)]
    mail = client.add_job(Note(text="hello"), queue="emails")
    hostile = client.add_job(Note(text=HOSTILE, extra={"<b>key</b>": HOSTILE}), queue="held")

    def status(handle: pgqueue.JobHandle) -> str:
        worker.check_alive()
        info = client.get_job(handle.id)
        assert info is not None
        return info.status

    wait_until(lambda: status(failed) == "failed", 30, what="the first attempt failed")
    wait_until(
        lambda: all(status(h) == "completed" for h in [*done, mail]), 30, what="the notes ran"
    )
    return {"failed": failed.id, "hostile": hostile.id, "done": done[0].id}


def test_the_overview_shows_the_queues_and_goes_live(
    browser: WebDriver, dashboard: Dashboard, jobs: dict[str, int]
) -> None:
    browser.get(dashboard.url("/"))
    assert hook(browser, "page-overview").tag_name == "body"
    for queue in ("default", "emails", "held"):
        assert hook(browser, f"queue-row-{queue}").is_displayed()
    assert hook(browser, "total-failed").find_element(By.TAG_NAME, "b").text == "1"
    assert hook(browser, "total-workers").find_element(By.TAG_NAME, "b").text == "1"
    assert hook(browser, "chart-throughput").find_elements(By.TAG_NAME, "svg")
    # the page's event stream opens
    wait(
        browser,
        "the live indicator",
        lambda d: hook(d, "live").get_attribute("data-state") == "live",
    )


def test_filtering_the_jobs_by_status_and_queue(
    browser: WebDriver, dashboard: Dashboard, jobs: dict[str, int]
) -> None:
    browser.get(dashboard.url("/jobs"))
    assert len(rows(browser)) == 6
    click(browser, "filter-status-failed")
    click(browser, "filter-apply")
    failed = [(f"job-row-{jobs['failed']}", "failed")]
    wait(
        browser,
        "only the failed job",
        lambda d: "status=failed" in d.current_url and rows(d) == failed,
    )

    browser.get(dashboard.url("/jobs"))
    queue = hook(browser, "filter-queue")
    queue.clear()
    queue.send_keys("held")
    click(browser, "filter-apply")
    held = [(f"job-row-{jobs['hostile']}", "pending")]
    wait(browser, "only the held job", lambda d: "queue=held" in d.current_url and rows(d) == held)


def test_a_failed_job_retried_runs_and_completes_live(
    browser: WebDriver,
    dashboard: Dashboard,
    jobs: dict[str, int],
    client: pgqueue.Client,
    gates: Path,
) -> None:
    job_id = jobs["failed"]
    browser.get(dashboard.url("/jobs?status=failed"))
    click(browser, f"job-link-{job_id}")
    wait(browser, "the job's page", lambda d: hooks(d, "job-detail"))
    assert hook(browser, "job-detail").get_attribute("data-job-id") == str(job_id)
    assert hook(browser, "job-status").text == "failed"
    # its times, sent in UTC, are shown in the browser's zone
    times = browser.find_elements(By.CSS_SELECTOR, "time[datetime]")
    assert times
    assert all(t.get_attribute("data-local") == "1" for t in times)
    assert "the first attempt fails" in hook(browser, "job-last-error").text
    assert hook(browser, "attempt-1").get_attribute("data-outcome") == "failed"
    traceback = hook(browser, "traceback").get_attribute("textContent") or ""
    assert "RuntimeError: retry-me: the first attempt fails" in traceback

    click(browser, "retry")
    # the action answers with the job's page again (303), and a message
    wait(browser, "the retry's message", lambda d: "retried" in hook(d, "flash").text)
    # from here on the page is never reloaded: a mark on its window stays
    browser.execute_script("window.pgqueueMark = 'still this page'")
    wait(browser, "the job running", lambda d: hook(d, "job-status").text == "processing")
    (gates / "retry-me").touch()
    wait(
        browser,
        "the job completed, on its second attempt",
        lambda d: (
            (
                hook(d, "job-status").text,
                hook(d, "job-attempts").text,
                hook(d, "attempt-2").get_attribute("data-outcome"),
            )
            == ("completed", "2 of 2", "completed")
        ),
    )
    assert browser.execute_script("return window.pgqueueMark") == "still this page"
    info = client.get_job(job_id)
    assert info is not None
    assert (info.status, info.attempts) == ("completed", 2)


def test_pausing_a_queue(
    browser: WebDriver, dashboard: Dashboard, jobs: dict[str, int], client: pgqueue.Client
) -> None:
    def paused() -> dict[str, bool]:
        return {s.queue: s.paused for s in client.queue_stats()}

    assert paused()["emails"] is False
    browser.get(dashboard.url("/queues"))
    # the rows are live (swapped on each update): read them through waits, which find again
    wait(
        browser,
        "the queue shown running",
        lambda d: hook(d, "queue-row-emails").get_attribute("data-paused") == "no",
    )
    click(browser, "pause-emails")
    wait(
        browser,
        "the queue shown paused",
        lambda d: hook(d, "queue-row-emails").get_attribute("data-paused") == "yes",
    )
    wait(browser, "the resume button", lambda d: hook(d, "resume-emails").is_displayed())
    wait(browser, "the row says paused", lambda d: "paused" in hook(d, "queue-row-emails").text)
    assert paused() == {"default": False, "emails": True, "held": False}


def test_markup_in_arguments_and_filters_is_shown_as_text(
    browser: WebDriver, dashboard: Dashboard, jobs: dict[str, int]
) -> None:
    browser.get(dashboard.url(f"/jobs/{jobs['hostile']}"))
    # read at once (a live refresh may replace the element between two calls)
    args, children, html = browser.execute_script(
        "const el = document.querySelector('[data-testid=job-args]');"
        "return [el.textContent, el.children.length, el.parentElement.innerHTML];"
    )
    assert "<script>window.pgqueueXss = 1; alert('xss')</script>" in args, html
    assert '"<b>key</b>"' in args, html
    assert children == 0, html
    assert_nothing_ran(browser)

    # a filter echoes what was typed: in the form, and in the error it gives
    browser.get(dashboard.url("/jobs?" + urllib.parse.urlencode({"kind": HOSTILE})))
    assert hook(browser, "filter-kind").get_attribute("value") == HOSTILE
    assert_nothing_ran(browser)
    browser.get(dashboard.url("/jobs?" + urllib.parse.urlencode({"args": HOSTILE})))
    assert hook(browser, "filter-error").is_displayed()
    assert_nothing_ran(browser)


def test_a_post_without_the_pages_token_is_refused(
    dashboard: Dashboard, jobs: dict[str, int], client: pgqueue.Client
) -> None:
    # another site's form (the browser would send its Origin), and a script without the token
    for headers in ({"Origin": "http://evil.example"}, {}):
        request = urllib.request.Request(
            dashboard.url("/queues/pause"),
            data=urllib.parse.urlencode({"queue": "default", "csrf_token": "x" * 64}).encode(),
            headers=headers,
            method="POST",
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 403
        assert "refused" in refused.value.read().decode()
    assert {s.queue: s.paused for s in client.queue_stats()}["default"] is False
