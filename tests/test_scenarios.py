"""The three scenarios of SPEC §4, end to end, with the programs under examples/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import pgqueue
from tests._sync.helpers import wait_until

pytestmark = pytest.mark.timeout(180)
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def env(database_url: str, schema: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
    env.update(
        PGQUEUE_DSN=database_url,
        PGQUEUE_SCHEMA=schema,
        PGQUEUE_POLL_INTERVAL="0.5",
        PGQUEUE_HEARTBEAT_INTERVAL="0.5",
        PGQUEUE_LEADER_INTERVAL="0.5",
        PGQUEUE_RESCUE_AFTER="5",
    )
    return env


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def post(url: str) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_wsgi_app_enqueues_in_the_request_transaction(
    env: dict[str, str], processes: list[subprocess.Popen[str]], db, schema: str
) -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "examples.wsgi_app", "--port", "0"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    processes.append(server)
    assert server.stdout is not None
    line = server.stdout.readline()
    assert line.startswith("listening on "), line
    base = line.split("listening on ", 1)[1].strip()
    worker = subprocess.Popen(
        [sys.executable, "-m", "pgqueue", "worker", "examples.wsgi_app:registry"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    processes.append(worker)

    status, body = post(f"{base}/signup?email=ada@example.com")
    assert status == 201, body
    status, body = post(f"{base}/signup?email=bob@example.com&fail=1")
    assert status == 500
    assert body == {"error": "the handler failed after enqueueing"}
    status, _ = post(f"{base}/signup?email=cy@example.com")
    assert status == 201

    wait_until(
        lambda: len(db.rows(f'SELECT email FROM "{schema}".welcome_log')) == 2,
        timeout=30,
        what="both welcome emails",
    )
    welcomed = db.rows(f'SELECT email FROM "{schema}".welcome_log ORDER BY email')
    assert welcomed == [("ada@example.com",), ("cy@example.com",)]
    # the failed request left neither its user nor its job
    assert db.rows(f'SELECT email FROM "{schema}".users ORDER BY email') == welcomed
    assert db.value(f'SELECT count(*) FROM "{schema}".pgqueue_jobs') == 2


def sa_url(database_url: str) -> str:
    return database_url.replace("postgresql://", "postgresql+psycopg://", 1)


def test_sqlalchemy_session_signup_is_atomic(
    database_url: str, settings: pgqueue.Settings, db, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGQUEUE_SCHEMA", schema)
    import importlib

    import examples.sqlalchemy_app as app

    app = importlib.reload(app)  # picks up the schema of this test
    engine = create_engine(sa_url(database_url))
    with pgqueue.Client.connect(engine, registry=app.registry, settings=settings) as client:
        client.migrate()  # creates the schema too
        app.Base.metadata.create_all(engine)
        with Session(engine) as session:
            app.signup(session, client, "kept@example.com")
            session.commit()
        with Session(engine) as session:
            app.signup(session, client, "gone@example.com")
            session.rollback()
        assert db.rows(f'SELECT email FROM "{schema}".users') == [("kept@example.com",)]
        assert db.value(f'SELECT count(*) FROM "{schema}".pgqueue_jobs') == 1
        client.start({"default": 2}, config=pgqueue.RuntimeConfig(poll_interval=0.2))
        wait_until(lambda: app.WELCOMED == ["kept@example.com"], timeout=20, what="job ran")
    engine.dispose()


async def test_sqlalchemy_async_session_signup_is_atomic(
    database_url: str, settings: pgqueue.Settings, db, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGQUEUE_SCHEMA", schema)
    import importlib

    import examples.sqlalchemy_app as app

    app = importlib.reload(app)
    engine = create_async_engine(sa_url(database_url))
    client = await pgqueue.AsyncClient.connect(engine, registry=app.registry, settings=settings)
    async with client:
        await client.migrate()  # creates the schema too
        async with engine.begin() as conn:
            await conn.run_sync(app.Base.metadata.create_all)
        async with AsyncSession(engine) as session:
            await app.asignup(session, client, "kept@example.com")
            await session.commit()
        async with AsyncSession(engine) as session:
            await app.asignup(session, client, "gone@example.com")
            await session.rollback()
        assert db.rows(f'SELECT email FROM "{schema}".users') == [("kept@example.com",)]
        assert db.value(f'SELECT count(*) FROM "{schema}".pgqueue_jobs') == 1
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT 1"))).scalar() == 1
    await engine.dispose()


@pytest.mark.parametrize(
    ("driver", "sync", "driver_class"),
    [
        ("psycopg", False, "AsyncPsycopgDriver"),
        ("asyncpg", False, "AsyncpgDriver"),
        ("sqlalchemy", False, "AsyncSQLAlchemyDriver"),
        ("psycopg", True, "PsycopgDriver"),
        ("sqlalchemy", True, "SQLAlchemyDriver"),
    ],
)
def test_one_program_on_every_driver(
    env: dict[str, str], driver: str, sync: bool, driver_class: str
) -> None:
    args = [sys.executable, "-m", "examples.any_driver", *(["--sync"] if sync else [])]
    result = subprocess.run(
        args,
        cwd=ROOT,
        env={**env, "PGQUEUE_DRIVER": driver},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [driver_class, "completed=20"]


def test_asyncpg_with_the_sync_client_says_what_to_use(env: dict[str, str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "examples.any_driver", "--sync"],
        cwd=ROOT,
        env={**env, "PGQUEUE_DRIVER": "asyncpg"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "asyncio-only" in result.stderr
    assert "Traceback" not in result.stderr
