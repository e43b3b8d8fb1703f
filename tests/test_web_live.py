"""The dashboard's live updates and ``pgqueue dashboard``: the event stream (LISTEN, polling
without it, no change lost between a page and its stream), the overview's charts, and the
command as a real server process that streams a NOTIFY to an HTTP client.

The pages and actions are in tests/test_web.py, the refusals in tests/test_web_security.py.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import pytest
from starlette.applications import Starlette

import pgqueue
from pgqueue.adapter_registry import load_adapter
from pgqueue.cli import main
from pgqueue.cli.dashboard import exposure_warnings
from pgqueue.web import create_app
from pgqueue.web._app import Dashboard
from pgqueue.web._charts import charts
from pgqueue.web._live import Live, stream
from tests._sync.helpers import wait_until
from tests.web_helpers import World, seeded_world

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def world(database_url: str, db) -> Iterator[World]:  # type: ignore[no-untyped-def]
    with seeded_world(database_url, db) as seeded:
        yield seeded


def dash_of(app: Starlette) -> Dashboard:
    dash = app.state.pgqueue_dashboard
    assert isinstance(dash, Dashboard)
    return dash


# -- live updates -------------------------------------------------------------------------------


async def test_the_event_stream_says_hello_then_a_change_on_notify(world: World) -> None:
    dash = dash_of(
        create_app(lambda: pgqueue.AsyncClient.connect(world.url, settings=world.settings))
    )
    dash.live.poll_interval = 60.0  # only NOTIFY can bring the change within the test
    events = stream(dash.live, max_stream=30)
    try:
        assert await anext(events) == "retry: 3000\n\n"
        assert await anext(events) == 'event: hello\ndata: {"mode":"listen"}\n\n'
        world.db.rows("SELECT pg_notify($1, 'q:emails')", (world.settings.channel,))
        change = await asyncio.wait_for(anext(events), 10)
        assert change == 'event: change\ndata: {"queues":["emails"],"source":"notify"}\n\n'
    finally:
        await events.aclose()
        await dash.close()


async def test_a_change_between_a_page_and_its_stream_is_not_lost(world: World) -> None:
    # Pages note the activity they were read at; the stream compares it with the watcher's.
    dash = dash_of(
        create_app(lambda: pgqueue.AsyncClient.connect(world.url, settings=world.settings))
    )
    dash.live.poll_interval = 60.0  # the watcher reads the activity once, as it starts
    try:
        async with dash.reading() as page:
            pass
        events = stream(dash.live, 30, page.seen)
        try:
            assert await anext(events) == "retry: 3000\n\n"
            assert (await anext(events)).startswith("event: hello")
            # nothing changed since the page was read: the next event is the next change
            world.db.rows("SELECT pg_notify($1, 'q:images')", (world.settings.channel,))
            assert '"source":"notify"' in await asyncio.wait_for(anext(events), 10)
        finally:
            await events.aclose()
        await dash.live.stop()

        async with dash.reading() as page:
            pass
        # a job finishes after the page was read (no NOTIFY says so), before its stream starts
        world.db.rows(
            f"UPDATE {world.table} SET finished_at = now() WHERE id = $1", (world.completed[0],)
        )
        events = stream(dash.live, 30, page.seen)
        try:
            assert await anext(events) == "retry: 3000\n\n"
            assert (await anext(events)).startswith("event: hello")
            change = await asyncio.wait_for(anext(events), 10)
            assert change == 'event: change\ndata: {"queues":[],"source":"page"}\n\n'
        finally:
            await events.aclose()
    finally:
        await dash.close()


async def test_without_listen_the_watcher_polls_for_changes(world: World) -> None:
    # A client on a caller's connection has no LISTEN session to open: polling serves.
    conn = await psycopg.AsyncConnection.connect(world.url, autocommit=True)
    driver = load_adapter("psycopg").async_wrap_transaction(conn)
    client = pgqueue.AsyncClient(driver, settings=world.settings)

    async def same() -> pgqueue.AsyncClient:
        return client

    live = Live(same, poll_interval=0.1)
    try:
        async with live.subscribe() as changes:
            await live.ready(10)
            assert live.mode == "poll"
            world.add(f"q-{uuid.uuid4().hex[:8]}", 1)
            assert await asyncio.wait_for(changes.get(), 10) == {"queues": [], "source": "poll"}
    finally:
        await conn.close()


# -- the charts ---------------------------------------------------------------------------------


def test_charts_stack_each_minute_and_leave_idle_minutes_out_of_the_rate() -> None:
    start = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    rows = [(start + timedelta(minutes=i), c, f, x) for i, (c, f, x) in enumerate(
        [(0, 0, 0), (30, 10, 0), (0, 0, 5), (7, 0, 0)]
    )]  # fmt: skip
    drawn = charts(rows)
    assert drawn.peak == 50  # 40 rounded up to 1, 2 or 5 times a power of ten
    assert (drawn.completed, drawn.failed, drawn.cancelled) == (37, 10, 5)
    assert drawn.failure_rate == pytest.approx(10 / 47)
    busy = drawn.bars[1]
    assert [name for name, _, _ in busy.parts] == ["completed", "failed"]
    assert busy.parts[0][2] == pytest.approx(120 * 30 / 50)
    assert busy.label == "2 min ago: 30 completed, 10 failed, 0 cancelled"
    # minute 2 only cancelled jobs: no rate, so the line breaks and starts again
    assert drawn.rate_path.count("M") == 2
    assert len(drawn.rate_points) == 2
    assert charts([]).finished == 0
    assert charts([]).rate_path == ""


# -- pgqueue dashboard --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_dashboard_command_serves_the_app_and_streams_changes(world: World, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "dashboard.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
    argv = [sys.executable, "-m", "pgqueue", "dashboard", "--dsn", world.url]
    argv += ["--schema", world.settings.schema, "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=out)
    base = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            try:
                return httpx.get(base + "/", timeout=2).status_code == 200
            except httpx.TransportError:
                assert proc.poll() is None, log.read_text()
                return False

        wait_until(up, 30, 0.1, what="the dashboard answering")
        with httpx.stream("GET", base + "/events", timeout=10) as events:
            assert events.headers["content-type"].startswith("text/event-stream")
            lines = events.iter_lines()
            assert "event: hello" in [next(lines) for _ in range(3)]
            world.db.rows("SELECT pg_notify($1, 'q:images')", (world.settings.channel,))
            deadline = time.monotonic() + 10
            while next(lines) != "event: change":
                assert time.monotonic() < deadline, "no change event"
            assert '"images"' in next(lines)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(15)
    output = log.read_text()
    assert code == 0, output
    assert "pgqueue dashboard: warning: no authorization: anyone who can reach" in output
    assert f"on http://127.0.0.1:{port}/" in output
    assert "listening on" not in output  # bound to the loopback interface


def test_dashboard_command_warnings_and_its_bad_input(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    local = exposure_warnings("127.0.0.1", 8080, read_only=False, hide_args=False)
    assert len(local) == 1
    assert "retry, cancel or delete it" in local[0]
    exposed = exposure_warnings("0.0.0.0", 80, read_only=True, hide_args=True)
    assert "see every queue, worker and job." in exposed[0]
    assert "listening on 0.0.0.0, not on this machine only" in exposed[1]
    assert len(exposure_warnings("::1", 80, read_only=True, hide_args=False)) == 1

    args = ["dashboard", "--dsn", world.url]
    assert main([*args, "--schema", "web_nowhere"]) == 1
    assert "run `pgqueue migrate` first" in capsys.readouterr().err
    assert main([*args, "--url-prefix", "pgqueue"]) == 2
    assert "--url-prefix must be a path" in capsys.readouterr().err
