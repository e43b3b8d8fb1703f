"""pgqueue.contrib.django end to end: the example project (examples/django_project) on
PostgreSQL, served by gunicorn, its tasks run by ``manage.py pgqueue worker``.

Django's settings are process-global (and tests/test_django.py configures bare ones in this
process), so the project runs in subprocesses only: ``manage.py migrate``, ``manage.py pgqueue
migrate``, the worker, gunicorn, ``manage.py shell``. Every table, Django's and pgqueue's, lives
in a schema of this module's own (the connection's search_path), dropped at the end.
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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

from tests._sync.helpers import wait_until

pytest.importorskip("django")
pytest.importorskip("gunicorn")

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "examples" / "django_project"
BIN = Path(sys.executable).parent
MANAGE = ["manage.py"]


@dataclass
class Project:
    """The running example: its URL, environment, schema and processes."""

    url: str
    env: dict[str, str]
    schema: str
    worker: subprocess.Popen[bytes]
    server: subprocess.Popen[bytes]
    logs: Path

    def request(self, method: str, path: str) -> tuple[int, Any]:
        req = urllib.request.Request(self.url + path, method=method)
        try:
            with urllib.request.urlopen(req, timeout=10) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def result(self, task_id: str) -> dict[str, Any]:
        status, body = self.request("GET", f"/tasks/{task_id}")
        assert status == 200, body
        return dict(body)

    def finished(self, task_id: str) -> dict[str, Any]:
        return dict(
            wait_until(
                lambda: (r := self.result(task_id))["status"] in ("SUCCESSFUL", "FAILED") and r,
                timeout=15,
                interval=0.05,
                what=f"task {task_id} to finish; worker log:\n{self.log('worker')}",
            )
        )

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, *MANAGE, *args],
            cwd=PROJECT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def table(self, name: str) -> str:
        return f'"{self.schema}"."{name}"'

    def row(self, db: Any, table: str, columns: str, row_id: object) -> tuple[Any, ...] | None:
        rows = db.rows(f"SELECT {columns} FROM {self.table(table)} WHERE id = $1", (row_id,))
        return tuple(rows[0]) if rows else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(args, cwd=PROJECT, env=env, stdout=out, stderr=subprocess.STDOUT)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    # SIGTERM first: gunicorn's master then stops its worker (SIGKILL would orphan it).
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait(10)


@pytest.fixture(scope="module")
def project(
    database_url: str, db: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Project]:
    schema = f"dj_{uuid.uuid4().hex[:10]}"
    db.rows(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)).as_string(db.conn))
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PGQUEUE_", "DJANGO_")) and key != "DATABASE_URL"
    }
    env.update(
        PGQUEUE_DSN=database_url,
        PGQUEUE_SCHEMA=schema,
        EXAMPLE_HEARTBEAT_SECONDS="1",
        EXAMPLE_RETRY_BACKOFF="0.05",
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    )
    logs = tmp_path_factory.mktemp("django")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        setup = Project("", env, schema, None, None, logs)  # type: ignore[arg-type]
        setup.manage("migrate", "--no-input")
        assert "schema at version" in setup.manage("pgqueue", "migrate")
        port = _free_port()
        worker = _start(
            [sys.executable, "manage.py", "pgqueue", "worker"], env, logs / "worker.log"
        )
        procs.append(worker)
        gunicorn = [str(BIN / "gunicorn"), "project.wsgi", "--workers", "1", "--no-control-socket"]
        server = _start([*gunicorn, "--bind", f"127.0.0.1:{port}"], env, logs / "server.log")
        procs.append(server)
        running = Project(f"http://127.0.0.1:{port}", env, schema, worker, server, logs)

        def up() -> bool:
            assert server.poll() is None, running.log("server")
            try:
                return running.request("GET", "/health")[0] == 200
            except (urllib.error.URLError, ConnectionError, json.JSONDecodeError):
                return False

        wait_until(up, timeout=20, interval=0.05, what="gunicorn to serve the project")
        yield running
    finally:
        for proc in procs:
            _stop(proc)
        db.rows(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE")
            .format(sql.Identifier(schema))
            .as_string(db.conn)
        )


def test_atomic_commit_enqueues_and_the_worker_runs_the_task(project: Project, db: Any) -> None:
    status, body = project.request("POST", "/signups?email=ada@example.com")
    assert status == 201, body
    signup, task_id = body["signup"], body["task"]
    # both committed when the response came back
    assert project.row(db, "signups_signup", "email", signup) == ("ada@example.com",)
    kind, payload = project.row(db, "pgqueue_jobs", "kind, payload", int(task_id)) or ("", {})
    assert kind == "django.task"
    assert payload["task"] == "signups.tasks.welcome"
    assert payload["args"] == [signup]

    result = project.finished(task_id)
    assert result["status"] == "SUCCESSFUL", result
    assert result["return_value"] == {"email": "ada@example.com", "welcomed": True}
    assert result["attempts"] == 1
    assert result["errors"] == []
    assert result["task"] == "signups.tasks.welcome"
    assert result["args"] == [signup]
    # the task used the ORM, in the worker
    assert project.row(db, "signups_signup", "welcomed", signup) == (True,)


def test_atomic_rollback_leaves_neither_row_nor_job(project: Project, db: Any) -> None:
    status, body = project.request("POST", "/signups/rollback?email=bob@example.com")
    assert status == 409, body
    signup, task_id = body["signup"], body["task"]
    assert int(task_id) > 0  # the job was inserted, in the transaction that rolled back
    assert project.row(db, "signups_signup", "id", signup) is None
    assert project.row(db, "pgqueue_jobs", "id", int(task_id)) is None
    assert project.request("GET", f"/tasks/{task_id}") == (404, {"error": "no such task"})


def test_an_async_view_enqueues_an_async_task(project: Project) -> None:
    status, body = project.request("POST", "/add?a=2&b=40")
    assert status == 201, body
    result = project.finished(body["task"])
    assert (result["status"], result["return_value"]) == ("SUCCESSFUL", 42)


def test_a_failing_task_is_retried_then_failed_with_its_errors(project: Project) -> None:
    status, body = project.request("POST", "/broken?reason=no+mail+server")
    assert status == 201, body
    result = project.finished(body["task"])
    assert result["status"] == "FAILED"
    assert result["attempts"] == 2  # PGQUEUE JOB_OPTIONS max_attempts
    # the class path each attempt raised, as the worker recorded it
    assert result["errors"] == ["signups.tasks.WelcomeError"] * 2
    assert "return_value" not in result


def test_run_after_and_priority_from_a_shell(project: Project, db: Any) -> None:
    out = project.manage(
        "shell",
        "-c",
        "from datetime import timedelta\n"
        "from django.utils import timezone\n"
        "from signups.tasks import heartbeat\n"
        "later = timezone.now() + timedelta(hours=1)\n"
        "r = heartbeat.using(run_after=later, priority=7).enqueue()\n"
        "again = heartbeat.get_result(r.id)\n"
        "print(r.id, again.status, again.task.priority, again.is_finished)\n",
    )
    # the last line: Django 5.2's shell may first say what it imported
    task_id, status, priority, finished = out.strip().splitlines()[-1].split()
    assert (status, priority, finished) == ("READY", "7", "False")
    columns = "priority, status, scheduled_for - now() > interval '50 minutes'"
    assert project.row(db, "pgqueue_jobs", columns, int(task_id)) == (7, "pending", True)


def test_the_periodic_entry_of_the_settings_ticks(project: Project, db: Any) -> None:
    jobs = project.table("pgqueue_jobs")
    wait_until(
        lambda: db.value(
            f"SELECT count(*) FROM {jobs} WHERE payload->>'task' = 'signups.tasks.heartbeat' "
            "AND status = 'completed'"
        ),
        timeout=15,
        what=f"a heartbeat tick to run; worker log:\n{project.log('worker')}",
    )
    # the admin commands run on the project's queue too
    listed = json.loads(project.manage("pgqueue", "cron", "list", "--format", "json"))
    entries = {entry["name"]: entry for entry in listed}
    assert entries["signups.tasks.heartbeat"]["schedule"] == "every 1s"
    assert "pgqueue.django.prune-results" in entries


def test_pruning_deletes_the_results_whose_job_is_gone(project: Project, db: Any) -> None:
    results = project.table("pgqueue_django_results")
    db.rows(f"INSERT INTO {results} (job_id, errors) VALUES (-1, '[]')")  # no job -1
    kept = db.value(f"SELECT count(*) FROM {results} WHERE job_id > 0")
    assert kept  # the results of the jobs above
    project.manage("pgqueue", "cron", "trigger", "pgqueue.django.prune-results")
    wait_until(
        lambda: not db.value(f"SELECT count(*) FROM {results} WHERE job_id = -1"),
        timeout=15,
        what=f"the orphaned result to go; worker log:\n{project.log('worker')}",
    )
    assert db.value(f"SELECT count(*) FROM {results} WHERE job_id > 0") >= kept


def test_the_worker_stops_gracefully_on_sigterm(project: Project) -> None:
    project.worker.send_signal(signal.SIGTERM)
    wait_until(lambda: project.worker.poll() is not None, timeout=15, what="the worker to exit")
    log = project.log("worker")
    assert project.worker.returncode == 0, log
    assert "worker started" in log, log
    assert "stopping gracefully" in log, log
