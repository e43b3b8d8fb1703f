"""The Starlette/FastAPI and Flask integrations, end to end, with the apps under examples/.

Each example app runs in a real server (uvicorn; gunicorn with two pre-forked workers), its jobs
in a real worker process (``pgqueue worker``; ``flask pgqueue worker``), and the tests talk
HTTP to it. The servers start once per module, each in a schema of its own. A few checks of the
integrations' own behaviour (a composed Starlette lifespan, ``flask pgqueue``'s precedence of
the app's config, the Flask extension after a fork) run in this process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gunicorn
import httpx
import pytest
from flask import Flask
from psycopg import sql
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import pgqueue
from pgqueue.contrib.flask import PgQueue
from pgqueue.contrib.starlette import get_client, pgqueue_lifespan
from tests._sync.helpers import wait_until

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parent.parent


# -- processes ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def call(method: str, url: str) -> tuple[int, Any]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@dataclass
class Proc:
    """A process of the test, its output in a file (read when something goes wrong)."""

    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, timeout: float = 15) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        return self.popen.returncode


class Procs:
    """The processes a fixture started: all stopped at its end, whatever happened."""

    def __init__(self, logs: Path, env: dict[str, str]) -> None:
        self.logs = logs
        self.env = env
        self.started: list[Proc] = []

    def start(self, name: str, *args: str) -> Proc:
        log = self.logs / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                [sys.executable, *args], cwd=ROOT, env=self.env, stdout=out, stderr=out
            )
        proc = Proc(popen, log)
        self.started.append(proc)
        return proc

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def stop_all(self) -> None:
        for proc in reversed(self.started):
            proc.stop()


def wait_serving(base: str, server: Proc) -> None:
    """Wait until the app answers (any job id it does not have: 404)."""

    def serving() -> bool:
        if server.popen.poll() is not None:
            raise AssertionError(f"the server exited:\n{server.output()}")
        try:
            return call("GET", f"{base}/jobs/0")[0] == 404
        except OSError:
            return False

    wait_until(serving, timeout=30, interval=0.05, what=f"{base} serving")


def make_env(database_url: str, schema: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PGQUEUE_", "FLASK_"))}
    env.update(
        PGQUEUE_DSN=database_url,
        PGQUEUE_SCHEMA=schema,
        PGQUEUE_POLL_INTERVAL="0.5",
        PGQUEUE_HEARTBEAT_INTERVAL="0.5",
        PGQUEUE_LEADER_INTERVAL="0.5",
        PGQUEUE_RESCUE_AFTER="5",
    )
    return env


@pytest.fixture(scope="module")
def new_schema(db) -> Iterator[Callable[[], str]]:
    """Names of fresh schemas for this module's servers, dropped at its end."""
    names: list[str] = []

    def new() -> str:
        names.append(f"t_{uuid.uuid4().hex[:12]}")
        return names[-1]

    yield new
    for name in names:
        drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
        db.rows(drop.as_string(db.conn))


@dataclass
class App:
    """An example app being served, the process that runs its jobs, and its schema."""

    base: str
    schema: str
    server: Proc
    worker: Proc | None
    procs: Procs


def welcomed(db, schema: str, email: str) -> list[tuple[Any, ...]]:
    return db.rows(f'SELECT job_id, pid FROM "{schema}".welcome_log WHERE email = $1', [email])


def jobs_for(db, schema: str, email: str) -> list[tuple[Any, ...]]:
    return db.rows(
        f"SELECT id, status FROM \"{schema}\".pgqueue_jobs WHERE payload->>'email' = $1", [email]
    )


def users(db, schema: str, email: str) -> int:
    return int(db.value(f'SELECT count(*) FROM "{schema}".users WHERE email = $1', [email]))


# -- FastAPI -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fastapi_app(
    database_url: str, new_schema: Callable[[], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[App]:
    schema = new_schema()
    procs = Procs(tmp_path_factory.mktemp("fastapi"), make_env(database_url, schema))
    port = free_port()
    try:
        server = procs.start(
            "uvicorn", "-m", "uvicorn", "examples.fastapi_app:app", "--port", str(port)
        )
        base = f"http://127.0.0.1:{port}"
        wait_serving(base, server)  # its lifespan migrated and created the tables
        worker = procs.start("worker", "-m", "pgqueue", "worker", "examples.fastapi_app:registry")
        yield App(base, schema, server, worker, procs)
    finally:
        procs.stop_all()


def test_fastapi_commit_enqueues_with_the_row_and_the_worker_runs_it(fastapi_app: App, db) -> None:
    app = fastapi_app
    status, body = call("POST", f"{app.base}/signup?email=ada@example.com")
    assert status == 201, body
    assert body["pid"] == app.server.pid
    # committed together before the answer: the row and the job are there
    assert users(db, app.schema, "ada@example.com") == 1
    assert [job_id for job_id, _ in jobs_for(db, app.schema, "ada@example.com")] == [body["job"]]
    assert app.worker is not None
    ran = wait_until(
        lambda: welcomed(db, app.schema, "ada@example.com"), timeout=20, what="the job ran"
    )
    assert ran == [(body["job"], app.worker.pid)]  # in the worker process, not the server
    # GET /jobs/{id}: Depends(get_client) hands the lifespan's client to the endpoint
    # the outcome is recorded just after process() returns
    wait_until(
        lambda: (
            call("GET", f"{app.base}/jobs/{body['job']}")
            == (
                200,
                {"id": body["job"], "kind": "example.fastapi.send_welcome", "status": "completed"},
            )
        ),
        timeout=20,
        what="GET /jobs/{id} says completed",
    )


def test_fastapi_rollback_leaves_neither_row_nor_job(fastapi_app: App, db) -> None:
    app = fastapi_app
    status, body = call("POST", f"{app.base}/signup?email=bob@example.com&fail=true")
    assert status == 500
    assert body == {"detail": "the handler failed after enqueueing"}
    assert users(db, app.schema, "bob@example.com") == 0
    assert jobs_for(db, app.schema, "bob@example.com") == []
    status, body = call("GET", f"{app.base}/jobs/987654")
    assert (status, body) == (404, {"detail": "no job 987654"})


def test_fastapi_lifespan_runs_workers_in_the_app_process(
    database_url: str, new_schema: Callable[[], str], tmp_path: Path, db
) -> None:
    schema = new_schema()  # no other worker serves it: the app's process must run the job
    procs = Procs(tmp_path, make_env(database_url, schema))
    port = free_port()
    try:
        server = procs.start(
            "uvicorn",
            "-m",
            "uvicorn",
            "examples.fastapi_app:app_with_workers",
            "--port",
            str(port),
        )
        base = f"http://127.0.0.1:{port}"
        wait_serving(base, server)
        status, body = call("POST", f"{base}/signup?email=cy@example.com")
        assert status == 201, body
        ran = wait_until(lambda: welcomed(db, schema, "cy@example.com"), timeout=20, what="ran")
        assert ran == [(body["job"], server.pid)]
        assert db.value(f'SELECT count(*) FROM "{schema}".pgqueue_instances') == 1
        # SIGTERM: uvicorn runs the lifespan's shutdown, which stops the workers gracefully
        # (then uvicorn ends by the signal it got, as recent versions do)
        assert server.stop() in (0, -signal.SIGTERM), server.output()
        assert "Application shutdown complete." in server.output()
        assert db.value(f'SELECT count(*) FROM "{schema}".pgqueue_instances') == 0
    finally:
        procs.stop_all()


async def test_starlette_lifespan_composes_with_the_apps_own(
    database_url: str, schema: str, db
) -> None:
    settings = pgqueue.Settings(schema=schema)
    seen: list[str] = []

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        seen.append("app starts")
        async with pgqueue_lifespan(database_url, settings=settings, migrate=True)(app):
            seen.append(f"client open: {type(app.state.pgqueue).__name__}")
            yield
        seen.append("app stops")

    async def version(request: Request) -> JSONResponse:
        # plain Starlette: call get_client with the request
        return JSONResponse({"version": await get_client(request).schema_version()})

    app = Starlette(routes=[Route("/", version)], lifespan=lifespan)
    async with app.router.lifespan_context(app):  # what the server runs around serving
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
            response = await http.get("/")
        assert response.status_code == 200
        assert response.json()["version"] >= 1  # migrated at startup, in the test's schema
        assert db.value(f"SELECT to_regclass('\"{schema}\".pgqueue_jobs') IS NOT NULL")
        client = app.state.pgqueue
    assert seen == ["app starts", "client open: AsyncClient", "app stops"]
    assert not hasattr(app.state, "pgqueue")  # closed and removed at shutdown
    with pytest.raises(RuntimeError, match="no pgqueue client on this app"):
        get_client(Request({"type": "http", "app": app}))
    assert isinstance(client, pgqueue.AsyncClient)
    with pytest.raises(pgqueue.ConfigurationError, match="run_workers needs a registry"):
        pgqueue_lifespan(database_url, run_workers={"default": 1})


# -- Flask -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def flask_app(
    database_url: str, new_schema: Callable[[], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[App]:
    schema = new_schema()
    procs = Procs(tmp_path_factory.mktemp("flask"), make_env(database_url, schema))
    flask = ("-m", "flask", "--app", "examples.flask_app")
    try:
        migrated = procs.run(*flask, "pgqueue", "migrate")
        assert migrated.returncode == 0, migrated.stderr
        assert "pgqueue schema at version" in migrated.stdout
        created = procs.run(*flask, "create-tables")
        assert created.returncode == 0, created.stderr
        port = free_port()
        # --preload: the app is imported once, in the master, then forked into both workers
        no_control = ["--no-control-socket"] if gunicorn.version_info >= (27,) else []
        server = procs.start(
            "gunicorn",
            "-m",
            "gunicorn",
            "--workers",
            "2",
            "--preload",
            *no_control,
            "--bind",
            f"127.0.0.1:{port}",
            "examples.flask_app:app",
        )
        # no registry argument: it comes from the app's PGQUEUE_REGISTRY
        worker = procs.start("worker", *flask, "pgqueue", "worker")
        base = f"http://127.0.0.1:{port}"
        wait_serving(base, server)
        yield App(base, schema, server, worker, procs)
    finally:
        procs.stop_all()


def test_flask_commit_enqueues_with_the_row_and_the_worker_runs_it(flask_app: App, db) -> None:
    app = flask_app
    status, body = call("POST", f"{app.base}/signup?email=ada@example.com")
    assert status == 201, body
    assert body["pid"] != app.server.pid  # a gunicorn worker answered, not the master
    assert users(db, app.schema, "ada@example.com") == 1
    assert [job_id for job_id, _ in jobs_for(db, app.schema, "ada@example.com")] == [body["job"]]
    assert app.worker is not None
    ran = wait_until(
        lambda: welcomed(db, app.schema, "ada@example.com"), timeout=20, what="the job ran"
    )
    assert ran == [(body["job"], app.worker.pid)]  # run by `flask pgqueue worker`
    # the outcome is recorded just after process() returns
    wait_until(
        lambda: (
            call("GET", f"{app.base}/jobs/{body['job']}")
            == (
                200,
                {"id": body["job"], "kind": "example.flask.send_welcome", "status": "completed"},
            )
        ),
        timeout=20,
        what="GET /jobs/{id} says completed",
    )


def test_flask_rollback_leaves_neither_row_nor_job(flask_app: App, db) -> None:
    app = flask_app
    status, body = call("POST", f"{app.base}/signup?email=bob@example.com&fail=1")
    assert (status, body) == (500, {"error": "the handler failed after enqueueing"})
    assert users(db, app.schema, "bob@example.com") == 0
    assert jobs_for(db, app.schema, "bob@example.com") == []
    assert call("GET", f"{app.base}/jobs/987654") == (404, {"error": "no job 987654"})


def test_flask_each_gunicorn_worker_opens_its_own_pool(flask_app: App) -> None:
    app = flask_app
    sessions: dict[int, set[int]] = {}  # server process -> its database sessions

    def both_workers_answered() -> bool:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: call("GET", f"{app.base}/health"), range(16)))
        for status, body in answers:
            assert status == 200, body
            assert body["schema_version"] >= 1  # the extension's client works in each
            sessions.setdefault(body["pid"], set()).add(body["db_backend_pid"])
        return len(sessions) == 2

    wait_until(both_workers_answered, timeout=20, interval=0, what="both workers answered")
    assert app.server.pid not in sessions
    first, second = sessions.values()
    # a pool opened before the fork would be shared: the same database sessions in both
    assert not first & second, sessions


def test_flask_pgqueue_commands_use_the_apps_config(flask_app: App) -> None:
    app = flask_app
    status, body = call("POST", f"{app.base}/signup?email=dee@example.com")
    assert status == 201, body
    # (the fixture ran `flask pgqueue migrate`; the precedence of the app's config over the
    # environment is checked in this process, below)
    listed = app.procs.run("-m", "flask", "--app", "examples.flask_app", "pgqueue", "jobs", "list")
    assert listed.returncode == 0, listed.stderr
    assert body["job"] in [job["id"] for job in json.loads(listed.stdout)]


# -- Flask, in this process --------------------------------------------------------------------


def test_flask_config_wins_over_the_environment(
    database_url: str, schema: str, db, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = f"t_{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("PGQUEUE_SCHEMA", other)
    monkeypatch.delenv("PGQUEUE_DSN", raising=False)
    app = Flask(__name__)
    app.config.update(PGQUEUE_DSN=database_url, PGQUEUE_SCHEMA=schema)
    ext = PgQueue(app)
    runner = app.test_cli_runner()
    result = runner.invoke(args=["pgqueue", "migrate"])
    assert result.exit_code == 0, result.output
    assert db.value(f"SELECT to_regclass('\"{schema}\".pgqueue_jobs') IS NOT NULL")
    assert db.value("SELECT count(*) FROM pg_namespace WHERE nspname = $1", [other]) == 0
    # the command line still wins over the app's config
    result = runner.invoke(args=["pgqueue", "sql", "--schema", "given_here"])
    assert result.exit_code == 0, result.output
    assert 'CREATE SCHEMA IF NOT EXISTS "given_here"' in result.output
    # the extension's client is on the same schema, and closes
    assert ext.client.settings.schema == schema
    assert ext.client.schema_version() is not None
    ext.close()
    # a pgqueue error is one line and status 1, as with `pgqueue`
    result = runner.invoke(args=["pgqueue", "worker", "no_such_module_x:registry"])
    assert result.exit_code == 1
    assert "pgqueue: error: cannot import 'no_such_module_x'" in result.output


def test_flask_extension_opens_its_own_pool_after_a_fork(
    database_url: str, schema: str, db
) -> None:
    app = Flask(__name__)
    app.config.update(PGQUEUE_DSN=database_url, PGQUEUE_SCHEMA=schema)
    ext = PgQueue(app)

    def session() -> int:
        with ext.connection() as conn:
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
            assert row is not None
            return int(row[0])

    with app.app_context():
        ext.client.migrate()  # the parent opens its pool (as an app that migrates at import)
        parent_client, parent_session = ext.client, session()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, and leave without running anything of pytest's
            status = 1
            try:
                child_client = ext.client
                report = {
                    "session": session(),
                    "new_client": child_client is not parent_client,
                    "version": child_client.schema_version(),
                }
                os.write(write, json.dumps(report).encode())
                status = 0
            finally:
                os._exit(status)
        os.close(write)
        _, status = os.waitpid(pid, 0)
        with os.fdopen(read) as pipe:
            report = json.loads(pipe.read() or "{}")
        assert os.waitstatus_to_exitcode(status) == 0
        assert report["new_client"] is True
        assert report["version"] is not None
        assert report["session"] != parent_session
        # the child neither used nor closed the parent's connections: the session is alive
        alive = "SELECT count(*) FROM pg_stat_activity WHERE pid = $1"
        assert db.value(alive, [parent_session]) == 1
        session()  # and the parent's pool still works
        assert ext.client is parent_client
    ext.close()
