"""``Dashboard``: what every page and action of one app shares.

The client (given, or made on first use by the app's factory), who may do what
(:mod:`._security`), the reading transactions with their statement timeout, the templates, the
one-time messages after an action (a signed cookie), the log of actions, and the live watcher.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Router

from .._async.client import AsyncClient
from .._async.store import AsyncStore
from ._live import Live, token
from ._render import templates
from ._security import Authorize, Csrf, Forbidden, Grant, cross_site, resolve_grant

__all__ = ["ROOT_KEY", "ClientSource", "Dashboard", "Reader"]

logger = logging.getLogger("pgqueue.web")

ClientSource = AsyncClient | Callable[[], Awaitable[AsyncClient]]
"""What ``create_app`` takes: a connected client, or a coroutine function that connects one."""

FLASH_COOKIE = "pgqueue_flash"
ROOT_KEY = "pgqueue.web.root"
"""The scope key where the app notes the ``root_path`` it was entered with (its mount point)."""


@dataclass(frozen=True)
class Reader:
    """A page's reading transaction: the admin API (``client``) and the store, both on it.

    ``seen``: the :func:`~pgqueue.web._live.token` of the activity as the transaction began,
    which the page passes to its event stream.
    """

    client: AsyncClient
    store: AsyncStore
    seen: str


class Dashboard:
    """The shared state of one dashboard app (see the module)."""

    def __init__(
        self,
        client: ClientSource,
        *,
        authorize: Authorize | None,
        read_only: bool,
        hide_args: bool,
        secret: str | bytes | None,
        statement_timeout: float,
    ) -> None:
        if isinstance(client, AsyncClient):
            self._client: AsyncClient | None = client
            self._factory: Callable[[], Awaitable[AsyncClient]] | None = None
        elif callable(client) and not isinstance(client, type):
            self._client, self._factory = None, client
        else:
            raise TypeError(
                f"create_app needs a pgqueue.AsyncClient (or a coroutine function that connects "
                f"one), not a {type(client).__module__}.{type(client).__qualname__}: the "
                "dashboard is an asyncio app, and a sync pgqueue.Client would block it. Connect "
                "one with `await pgqueue.AsyncClient.connect(url)`, or pass "
                "`lambda: pgqueue.AsyncClient.connect(url)`"
            )
        if not (statement_timeout > 0):
            raise ValueError(
                f"statement_timeout must be a number of seconds > 0, got {statement_timeout!r}"
            )
        self.authorize = authorize
        self.read_only = read_only
        self.hide_args = hide_args
        self.statement_timeout = float(statement_timeout)
        key = secret.encode() if isinstance(secret, str) else secret
        self.csrf = Csrf(key if key else secrets.token_bytes(32))
        self.templates = templates()
        self.live = Live(self.client)
        self._lock: asyncio.Lock | None = None
        self.router: Router | None = None
        """The app's router (``create_app`` sets it): the dashboard's own route names."""

    # -- the client -------------------------------------------------------------------------

    async def client(self) -> AsyncClient:
        """Return the client, connecting it with the factory on first use."""
        if self._client is not None:
            return self._client
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._client is None:
                assert self._factory is not None
                made = await self._factory()
                if not isinstance(made, AsyncClient):
                    raise TypeError(
                        f"the client factory returned a {type(made).__qualname__}, not a "
                        "pgqueue.AsyncClient"
                    )
                self._client = made
            return self._client

    async def close(self) -> None:
        """Stop the live watcher; close the client when the factory made it (not a given one)."""
        await self.live.stop()
        if self._factory is not None and self._client is not None:
            client, self._client = self._client, None
            await client.close()

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[Reader]:
        """Run the block's reads in one read-only transaction with the statement timeout."""
        client = await self.client()
        async with client.driver.with_tx() as tx:
            store = AsyncStore(tx, client.settings)
            await store.session_read_limits(round(self.statement_timeout * 1000))
            seen = token(await store.web_activity())
            yield Reader(AsyncClient(tx, settings=client.settings), store, seen)

    # -- who may do what --------------------------------------------------------------------

    async def grant(self, request: Request) -> Grant:
        """Return what ``request`` may do; 403 when ``authorize`` refuses it."""
        try:
            return await resolve_grant(request, self.authorize, self.read_only)
        except Forbidden:
            raise HTTPException(403, "you are not allowed to see this dashboard") from None

    async def guard(self, request: Request, action: str) -> tuple[Grant, FormData]:
        """Check that ``request`` may take ``action``; return its grant and its form.

        403 when the app is read-only, when ``authorize`` does not allow the action, when the
        request comes from another site, or when its CSRF token is missing or wrong. Each
        refusal is logged with who asked.
        """
        grant = await self.grant(request)
        if grant.read_only:
            self._refuse(request, grant, action, "the dashboard is read-only")
        if not grant.allows(action):
            self._refuse(request, grant, action, f"{action} is not allowed for {grant.actor}")
        reason = cross_site(request)
        if reason is not None:
            self._refuse(request, grant, action, reason)
        form = await request.form()
        sent = form.get(Csrf.FIELD)
        token = sent if isinstance(sent, str) else request.headers.get(Csrf.HEADER)
        reason = self.csrf.refusal(request, token)
        if reason is not None:
            self._refuse(request, grant, action, reason)
        return grant, form

    def _refuse(self, request: Request, grant: Grant, action: str, reason: str) -> None:
        logger.warning(
            "dashboard: refused %s by %s: %s",
            action,
            grant.actor,
            reason,
            extra={"actor": grant.actor, "action": action, "refused": reason},
        )
        raise HTTPException(403, f"refused: {reason}; nothing changed")

    def log_action(self, grant: Grant, action: str, summary: str, **detail: Any) -> None:
        """Log an action the dashboard took, with who took it."""
        logger.info(
            "dashboard: %s by %s: %s",
            action,
            grant.actor,
            summary,
            extra={"actor": grant.actor, "action": action, **detail},
        )

    # -- responses --------------------------------------------------------------------------

    def url(self, request: Request, route: str, /, **params: Any) -> str:
        """Return the path of the dashboard's ``route``, under where it is mounted.

        Built from the dashboard's own routes (never the host app's, whose route names may be
        the same), after the path the host mounted it at (``root_path`` as the request entered
        the dashboard).
        """
        assert self.router is not None  # set by create_app
        mounted = str(request.scope.get(ROOT_KEY, ""))
        return mounted + str(self.router.url_path_for(route, **params))

    def root(self, request: Request) -> str:
        """Return the path of the overview (``/`` under the mount point and prefix)."""
        return self.url(request, "overview")

    def render(
        self,
        request: Request,
        template: str,
        context: dict[str, Any],
        *,
        grant: Grant | None,
        status: int = 200,
        headers: dict[str, str] | None = None,
    ) -> Response:
        """Render a page; set the CSRF cookie if the browser has none, and use up the flash."""
        cookie = Csrf.cookie_of(request)
        fresh = cookie is None
        if cookie is None:
            cookie = Csrf.new_cookie()
        flash = self._read_flash(request)
        context = {
            "request": request,
            "grant": grant,
            "dash": self,
            "csrf_field": Csrf.FIELD,
            "csrf_token": self.csrf.token(cookie),
            "flash": flash,
            "url": lambda route, /, **params: self.url(request, route, **params),
            "here": request.url.path + (f"?{request.url.query}" if request.url.query else ""),
            "seen": None,
            **context,
        }
        response = self.templates.TemplateResponse(
            request, template, context, status_code=status, headers=headers
        )
        root = self.root(request)
        secure = request.url.scheme == "https"
        if fresh:
            response.set_cookie(
                Csrf.COOKIE, cookie, path=root, httponly=True, samesite="strict", secure=secure
            )
        if request.cookies.get(FLASH_COOKIE) is not None:
            response.delete_cookie(FLASH_COOKIE, path=root)
        return response

    def redirect(
        self, request: Request, url: str, flash: tuple[str, str] | None = None
    ) -> Response:
        """Redirect (303: GET the page) after an action, with a one-time message to show.

        ``flash``: ``("ok" or "error", text)``, carried in a short-lived signed cookie.
        """
        response = RedirectResponse(url, status_code=303)
        if flash is not None:
            raw = base64.urlsafe_b64encode(json.dumps(list(flash)).encode()).decode()
            response.set_cookie(
                FLASH_COOKIE,
                f"{raw}.{self.csrf.sign(raw, 'flash')}",
                max_age=60,
                path=self.root(request),
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
        return response

    def _read_flash(self, request: Request) -> tuple[str, str] | None:
        value = request.cookies.get(FLASH_COOKIE)
        if not value or "." not in value:
            return None
        raw, _, signature = value.rpartition(".")
        if not secrets.compare_digest(signature, self.csrf.sign(raw, "flash")):
            return None
        try:
            kind, text = json.loads(base64.urlsafe_b64decode(raw))
        except (ValueError, TypeError, binascii.Error):
            return None
        return (str(kind), str(text))

    def back(self, request: Request, form: FormData, default: str) -> str:
        """Return the form's ``next`` page when it is one of the dashboard's, else ``default``.

        Only a path under the dashboard's own root is followed: never another site.
        """
        wanted = form.get("next")
        root = self.root(request)
        if (
            isinstance(wanted, str)
            and wanted.startswith(root)
            and "//" not in wanted
            and "\\" not in wanted
            and all(ch.isprintable() for ch in wanted)
        ):
            return wanted
        return default
