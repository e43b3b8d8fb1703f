"""``pgqueue.web``: the dashboard, an ASGI app to mount in a web app or to run on its own.

``create_app(client, ...)`` returns a Starlette app: server-rendered pages (Jinja2, autoescaped)
over the admin API, with htmx served from the package and live updates over server-sent events.
``pgqueue dashboard`` runs it standalone with uvicorn. Needs the ``web`` extra
(``pip install 'pgqueue[web]'``). See docs/dashboard.md.

Modules: ``_app`` (what the pages share: the client, the reading transactions, rendering),
``_security`` (who may do what, CSRF and same-site checks), ``_views`` (the pages),
``_actions`` (the POST actions), ``_forms`` (what they read from forms), ``_live`` (the event
stream), ``_charts`` (the overview's SVG charts), ``_render`` (the templates' helpers).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import DatabaseError, SchemaNotMigrated
from ._actions import Actions
from ._app import ROOT_KEY, ClientSource, Dashboard
from ._security import ACTIONS, Access, Authorize, Grant
from ._views import Pages

__all__ = ["ACTIONS", "Access", "Authorize", "ClientSource", "Grant", "create_app"]

STATE_ATTRIBUTE = "pgqueue_dashboard"
"""The attribute of the app's ``state`` that holds its :class:`~pgqueue.web._app.Dashboard`."""

# Sent with every response of the dashboard (a host app's own headers are left alone).
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}


class _Entry:
    """The dashboard's outermost layer: notes where it is mounted, adds the security headers.

    Pages and errors are never cached (``Cache-Control: no-store``); the static files are.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope[ROOT_KEY] = scope.get("root_path", "")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
                kind = headers.get("content-type", "")
                if not kind.startswith(("text/css", "text/javascript", "application/javascript")):
                    headers.setdefault("cache-control", "no-store")
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _routes(dash: Dashboard) -> list[BaseRoute]:
    pages, actions = Pages(dash), Actions(dash)
    post = ["POST"]
    return [
        Route("/", pages.overview, name="overview"),
        Route("/jobs", pages.jobs, name="jobs"),
        Route("/jobs/{job_id:int}", pages.job, name="job"),
        Route("/jobs/retry", actions.retry, methods=post, name="retry"),
        Route("/jobs/cancel", actions.cancel, methods=post, name="cancel"),
        Route("/jobs/delete", actions.delete, methods=post, name="delete"),
        Route("/queues", pages.queues, name="queues"),
        Route("/queues/pause", actions.pause, methods=post, name="pause"),
        Route("/queues/resume", actions.resume, methods=post, name="resume"),
        Route("/queues/purge", actions.purge, methods=post, name="purge"),
        Route("/periodic", pages.periodic, name="periodic"),
        Route("/periodic/pause", actions.cron_pause, methods=post, name="cron_pause"),
        Route("/periodic/resume", actions.cron_resume, methods=post, name="cron_resume"),
        Route("/periodic/trigger", actions.cron_trigger, methods=post, name="cron_trigger"),
        Route("/periodic/entries/{name}", pages.periodic_entry, name="periodic_entry"),
        Route("/workers", pages.workers, name="workers"),
        Route("/events", pages.events, name="events"),
        Mount("/static", StaticFiles(packages=[("pgqueue.web", "static")]), name="static"),
    ]


def create_app(
    client: ClientSource,
    *,
    authorize: Authorize | None = None,
    read_only: bool = False,
    hide_args: bool = False,
    prefix: str = "",
    secret: str | bytes | None = None,
    statement_timeout: float = 5.0,
) -> Starlette:
    """Return the dashboard: a Starlette (ASGI) app on ``client``.

    - ``client``: a connected :class:`~pgqueue.AsyncClient` (the app never closes it), or a
      coroutine function that connects one (``lambda: pgqueue.AsyncClient.connect(url)``),
      called at the first request; the app closes that one when its lifespan ends. A sync
      :class:`~pgqueue.Client` is refused (``TypeError``): the app is asyncio.
    - ``authorize(request)``: returns what the request may do (:data:`Access`): ``"all"``,
      ``"read"``, a set of :data:`ACTIONS`, or ``None``/``False`` (403 on every page). May be
      a coroutine function, and may set ``request.state.pgqueue_actor`` to name who acts in the
      log. Without it, every request may do everything.
    - ``read_only``: every action is refused (403) and none is shown, whatever ``authorize``
      says.
    - ``hide_args``: the jobs' arguments and tracebacks are not shown (nor filterable).
    - ``prefix``: a path the app's routes sit under (``"/pgqueue"``), for hosts that pass it
      the full path (a Django ``asgi.py`` that routes by prefix); a framework's mount
      (``app.mount("/pgqueue", ...)``) needs none.
    - ``secret``: the key of the CSRF tokens and messages; default random per process (pass
      the same one to every process that serves the dashboard behind one address).
    - ``statement_timeout``: seconds each of the pages' statements may take (default 5).
    """
    dash = Dashboard(
        client,
        authorize=authorize,
        read_only=read_only,
        hide_args=hide_args,
        secret=secret,
        statement_timeout=statement_timeout,
    )
    if prefix and (not prefix.startswith("/") or prefix.endswith("/") or "//" in prefix):
        raise ValueError(f"prefix must be '' or a path such as '/pgqueue', got {prefix!r}")
    routes = _routes(dash)
    if prefix:
        routes = [Mount(prefix, routes=routes)]

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return dash.render(
            request,
            "error.html",
            {"nav": None, "status": exc.status_code, "detail": exc.detail},
            grant=None,
            status=exc.status_code,
            headers=dict(exc.headers or {}),
        )

    async def database_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, DatabaseError)
        if exc.sqlstate == "57014":  # query_canceled: the statement timeout
            status, detail = (
                504,
                (
                    f"the database did not answer within {dash.statement_timeout:g} s (the "
                    "dashboard's statement timeout); nothing changed. Narrow the filter, or try "
                    "again"
                ),
            )
        elif isinstance(exc, SchemaNotMigrated):
            status, detail = 503, f"pgqueue's tables are not there: {exc}"
        else:
            status, detail = 503, f"the database failed: {exc}"
        return dash.render(
            request,
            "error.html",
            {"nav": None, "status": status, "detail": detail},
            grant=None,
            status=status,
        )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await dash.close()

    app = Starlette(
        routes=routes,
        middleware=[Middleware(_Entry)],
        exception_handlers={HTTPException: http_error, DatabaseError: database_error},
        lifespan=lifespan,
    )
    dash.router = app.router
    setattr(app.state, STATE_ATTRIBUTE, dash)
    return app
