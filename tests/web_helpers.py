"""What the dashboard's tests share: a seeded schema, the app in a test client, forms to post.

The module's schema is seeded the way production fills it: jobs enqueued with the API and run by
pgqueue's own execution path (``pgqueue.testing.drain``: completed ones, and failed ones whose
arguments and error contain markup), a periodic entry declared by a worker, and a worker that
stays registered (it serves a queue no test uses). The app runs in Starlette's ``TestClient``
(httpx) with its lifespan, on a client it connects itself on that loop.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx
from starlette.testclient import TestClient

import pgqueue
from pgqueue.events import AdminAction
from pgqueue.testing import drain
from pgqueue.web import create_app
from tests import jobs
from tests._sync.helpers import wait_until
from tests.conftest import Db

__all__ = ["HOSTILE", "Web", "World", "dashboard", "seeded_world"]

HOSTILE = "<script>alert('x')</script>"
"""Markup in a job's arguments and error: the pages must show it as text."""

registry = pgqueue.WorkerRegistry(jobs.Record, jobs.Fail)
registry.schedule(
    pgqueue.Periodic(
        "nightly",
        jobs.Record(token="web-nightly"),
        cron="0 3 1 1 *",
        options=pgqueue.JobOptions(queue="cron"),
    )
)


@dataclass
class World:
    """The module's schema and what was seeded in it."""

    url: str
    settings: pgqueue.Settings
    db: Db
    completed: list[int]
    failed: list[int]
    pending: list[int]

    @property
    def table(self) -> str:
        return f'"{self.settings.schema}".{self.settings.prefix}jobs'

    def client(self) -> pgqueue.Client:
        return pgqueue.Client.connect(self.url, settings=self.settings, registry=registry)

    def add(self, queue: str, n: int, *, fail: bool = False, **options: Any) -> list[int]:
        """Enqueue ``n`` jobs in ``queue`` (failing ones if ``fail``); return their ids."""
        job: pgqueue.Worker = (
            jobs.Fail(token=HOSTILE, message=HOSTILE) if fail else jobs.Record(token="web")
        )
        opts = pgqueue.JobOptions(queue=queue, **options)
        with self.client() as client:
            return [h.id for h in client.add_jobs([(job, opts)] * n)]

    def run(self, queue: str) -> None:
        """Run the due jobs of ``queue`` through a worker's execution path."""
        with self.client() as client:
            drain(client, queue)

    def status(self, job_id: int) -> str | None:
        rows = self.db.rows(f"SELECT status FROM {self.table} WHERE id = $1", (job_id,))
        return str(rows[0][0]) if rows else None

    def statuses(self, ids: list[int]) -> list[str | None]:
        return [self.status(i) for i in ids]


@contextmanager
def seeded_world(database_url: str, db: Db) -> Iterator[World]:
    """A migrated schema of its own, seeded (see the module), dropped at the end."""
    settings = pgqueue.Settings(schema=f"web_{uuid.uuid4().hex[:10]}")
    with pgqueue.Client.connect(database_url, settings=settings, registry=registry) as client:
        client.migrate()
        world = World(database_url, settings, db, [], [], [])
        world.completed = world.add("emails", 3)
        world.failed = world.add("emails", 2, fail=True, max_attempts=1)
        world.run("emails")
        world.pending = world.add("images", 2)
        world.add("images", 1, run_in=timedelta(hours=1))
        # a worker that stays registered (and declares the periodic entry) on a queue no test uses
        client.start({"idle": 1}, config=pgqueue.RuntimeConfig(poll_interval=0.2))
        try:
            wait_until(lambda: client.cron_list() and client.list_workers(), 15, 0.05)
            yield world
        finally:
            client.stop()
            db.rows(f'DROP SCHEMA IF EXISTS "{settings.schema}" CASCADE')


TOKEN_RE = re.compile(r'name="csrf_token" value="([^"]+)"')


@dataclass
class Web:
    """The dashboard in a test client, and what its own client saw (``AdminAction`` events)."""

    http: TestClient
    actions: list[AdminAction] = field(default_factory=list)

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.http.get(path, **kwargs)

    def page(self, path: str) -> str:
        response = self.get(path)
        assert response.status_code == 200, (path, response.status_code, response.text[:2000])
        return response.text

    def token(self, path: str = "/jobs") -> str:
        """The CSRF token of the forms of a page (which also sets the cookie)."""
        match = TOKEN_RE.search(self.get(path).text)
        assert match, "no form with a CSRF token on " + path
        return match.group(1)

    def post(
        self,
        path: str,
        data: dict[str, Any] | list[tuple[str, Any]],
        *,
        token: str | None = "fetch",
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """POST a form as the dashboard's page would (same-origin headers, its CSRF token)."""
        fields = list(data.items()) if isinstance(data, dict) else list(data)
        if token == "fetch":
            token = self.token()
        if token is not None:
            fields.append(("csrf_token", token))
        sent = {"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin", **(headers or {})}
        body = "&".join(f"{httpx.QueryParams({k: str(v)})}" for k, v in fields)
        return self.http.post(
            path,
            content=body,
            headers={**sent, "Content-Type": "application/x-www-form-urlencoded"},
        )


@contextmanager
def dashboard(world: World, **options: Any) -> Iterator[Web]:
    """The dashboard on ``world``'s schema, in a test client (its lifespan runs)."""
    web: Web

    async def connect() -> pgqueue.AsyncClient:
        client = await pgqueue.AsyncClient.connect(world.url, settings=world.settings)
        client.events.subscribe(web.actions.append, AdminAction)
        return client

    app = create_app(connect, **options)
    with TestClient(app, base_url="http://testserver", follow_redirects=False) as http:
        web = Web(http)
        yield web
