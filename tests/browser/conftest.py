"""Fixtures of the browser tests: a schema, a real dashboard, a real worker, headless Chromium.

Everything is module-scoped: each test module starts one dashboard, one worker and one
browser, and its tests share them (a browser takes a second or two to start). Without Debian's
chromium and chromium-driver (or selenium) every test here is skipped, with the reason.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

import pgqueue
from tests.browser import harness
from tests.browser.jobs import ALL_GATES, GATES_ENV

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the browser tests, saying why, when this machine has no browser for them."""
    reason = harness.missing_browser()
    if reason is None:
        return
    for item in items:
        if _HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="module")
def browser_schema(database_url: str, db: Any) -> Iterator[str]:
    """A migrated schema of its own for the module."""
    name = f"t_browser_{uuid.uuid4().hex[:10]}"
    with pgqueue.Client.connect(database_url, settings=pgqueue.Settings(schema=name)) as client:
        client.migrate()
    yield name
    db.rows(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)).as_string())


@pytest.fixture(scope="module")
def client(database_url: str, browser_schema: str) -> Iterator[pgqueue.Client]:
    """A sync client on the module's schema: what the tests enqueue and check with."""
    settings = pgqueue.Settings(schema=browser_schema)
    with pgqueue.Client.connect(database_url, settings=settings) as c:
        yield c


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder for the module's process logs."""
    return tmp_path_factory.mktemp("browser-logs")


@pytest.fixture(scope="module")
def gates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the Gated jobs' gates (a file named after a token opens its gate)."""
    return tmp_path_factory.mktemp("gates")


@pytest.fixture(scope="module")
def env(database_url: str, browser_schema: str, gates: Path) -> dict[str, str]:
    """The environment of the module's pgqueue processes."""
    return harness.clean_env(database_url, browser_schema, **{GATES_ENV: str(gates)})


@pytest.fixture(scope="module")
def worker(env: dict[str, str], logs: Path, gates: Path) -> Iterator[harness.Process]:
    """``pgqueue worker tests.browser.jobs:registry`` on the queues default and emails."""
    proc = harness.worker(
        env, logs / "worker.log", "tests.browser.jobs:registry", "--queues", "default=4,emails=2"
    )
    yield proc
    (gates / ALL_GATES).touch()  # a job still waiting at its gate (a failed test) ends now
    proc.stop()


def _dashboard(
    env: dict[str, str], log: Path, browser: Any, *options: str
) -> Iterator[harness.Dashboard]:
    server = harness.Dashboard(env, log, *options)
    try:
        server.wait_ready()
        yield server
    finally:
        # the page's event stream would hold the server's graceful stop for seconds
        browser.get("about:blank")
        server.stop()


@pytest.fixture(scope="module")
def dashboard(env: dict[str, str], logs: Path, browser: Any) -> Iterator[harness.Dashboard]:
    """``pgqueue dashboard`` with every action allowed."""
    yield from _dashboard(env, logs / "dashboard.log", browser)


@pytest.fixture(scope="module")
def read_only_dashboard(
    env: dict[str, str], logs: Path, browser: Any
) -> Iterator[harness.Dashboard]:
    """``pgqueue dashboard --read-only``."""
    yield from _dashboard(env, logs / "dashboard-read-only.log", browser, "--read-only")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium (a Selenium WebDriver) for the module."""
    with harness.chromium() as driver:
        yield driver
