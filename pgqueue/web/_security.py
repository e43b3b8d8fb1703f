"""Who may do what on the dashboard, and the checks every change passes before it runs.

- :func:`resolve_grant` asks the app's ``authorize(request)`` for an :data:`Access` and turns it
  into a :class:`Grant`: the actions the request may take (none: read only), capped by
  ``read_only``, and who asks (the actor the log lines name).
- :class:`Csrf`: the double-submit token of the forms. A random value lives in a cookie; each
  form carries its HMAC under the app's secret; a change must bring both, and they must agree.
  A site that makes a browser post to the dashboard can send the cookie but cannot read it, nor
  compute the HMAC.
- :func:`cross_site`: a change must come from the dashboard's own pages: the browser's
  ``Sec-Fetch-Site`` and ``Origin`` headers, when it sends them, must say so.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import secrets
from collections.abc import Awaitable, Callable, Set
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from starlette.requests import Request

__all__ = [
    "ACTIONS",
    "Access",
    "Authorize",
    "Csrf",
    "Grant",
    "actor_of",
    "cross_site",
    "resolve_grant",
]

ACTIONS: frozenset[str] = frozenset(
    {
        "retry",
        "cancel",
        "delete",
        "purge",
        "pause",
        "resume",
        "cron_pause",
        "cron_resume",
        "cron_trigger",
    }
)
"""The changes the dashboard can make, named as the admin API's ``AdminAction`` events name them:
``retry``, ``cancel`` and ``delete`` (jobs), ``purge`` (a queue's finished jobs), ``pause`` and
``resume`` (queues), ``cron_pause``, ``cron_resume`` and ``cron_trigger`` (periodic entries)."""

Access = Literal["all", "read"] | Set[str] | bool | None
"""What ``authorize(request)`` returns: ``"all"`` (or ``True``): every page and action;
``"read"``: every page, no action; a set of action names (:data:`ACTIONS`): every page and those
actions; ``None`` or ``False``: nothing (403)."""

Authorize = Callable[[Request], Access | Awaitable[Access]]
"""``authorize(request) -> Access``, a plain function or a coroutine function."""

# Access values that are not sets, and what each allows (None: forbidden).
_LEVELS: dict[object, frozenset[str] | None] = {
    "all": ACTIONS,
    "read": frozenset(),
}


@dataclass(frozen=True)
class Grant:
    """What one request may do: read every page, and take ``actions``.

    ``read_only``: the app caps every request at reading (``create_app(read_only=True)``);
    ``actor``: who asks, as the log lines of the actions name them.
    """

    actions: frozenset[str]
    actor: str
    read_only: bool = False

    def allows(self, action: str) -> bool:
        """Whether the request may take ``action``."""
        return action in self.actions

    @property
    def acts(self) -> bool:
        """Whether the request may take any action at all (else the pages show none)."""
        return bool(self.actions)


class Forbidden(Exception):
    """``authorize`` refused the request (``None`` or ``False``)."""


def _actions(access: object) -> frozenset[str] | None:
    if access is True:
        return ACTIONS
    if access is None or access is False:
        return None
    if isinstance(access, str):
        if access in _LEVELS:
            return _LEVELS[access]
        raise ValueError(
            f"authorize returned {access!r}: return 'all', 'read', a set of actions "
            f"({', '.join(sorted(ACTIONS))}), or None to refuse"
        )
    if isinstance(access, Set):
        unknown = sorted(str(a) for a in access if a not in ACTIONS)
        if unknown:
            raise ValueError(
                f"authorize returned unknown actions {unknown}: the actions are "
                f"{', '.join(sorted(ACTIONS))}"
            )
        return frozenset(str(a) for a in access)
    raise TypeError(
        f"authorize returned a {type(access).__name__}: return 'all', 'read', a set of action "
        "names, or None to refuse"
    )


def actor_of(request: Request) -> str:
    """Name who sends ``request``, for the log lines of its actions.

    ``request.state.pgqueue_actor`` when ``authorize`` set it; else the authenticated user of
    Starlette's ``AuthenticationMiddleware`` (its ``display_name``); else ``anonymous`` and the
    client's address.
    """
    named = getattr(request.state, "pgqueue_actor", None)
    if named:
        return str(named)
    user = request.scope.get("user")
    if user is not None and getattr(user, "is_authenticated", False):
        display = getattr(user, "display_name", None) or str(user)
        if display:
            return str(display)
    host = request.client.host if request.client is not None else "unknown"
    return f"anonymous ({host})"


async def resolve_grant(request: Request, authorize: Authorize | None, read_only: bool) -> Grant:
    """Ask ``authorize`` what ``request`` may do; raise :class:`Forbidden` when nothing.

    Without ``authorize`` every action is allowed (the standalone command warns about it).
    ``read_only`` caps every request at reading, whatever ``authorize`` says.
    """
    if authorize is None:
        actions: frozenset[str] | None = ACTIONS
    else:
        access = authorize(request)
        if inspect.isawaitable(access):
            access = await access
        actions = _actions(access)
    if actions is None:
        raise Forbidden
    if read_only:
        actions = frozenset()
    return Grant(actions, actor_of(request), read_only)


class Csrf:
    """The forms' double-submit token: a random cookie, and its HMAC in every form.

    ``secret``: the app's key (``create_app(secret=...)``, else random per process, so that the
    pages a restart outlives must be loaded again before they can change anything).
    """

    COOKIE = "pgqueue_csrf"
    FIELD = "csrf_token"
    HEADER = "x-csrf-token"

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def sign(self, value: str, purpose: str) -> str:
        """Return the HMAC of ``value`` for ``purpose`` (hex), under the app's secret."""
        message = f"{purpose}\x00{value}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    @staticmethod
    def new_cookie() -> str:
        """Return a fresh random cookie value."""
        return secrets.token_urlsafe(32)

    @staticmethod
    def cookie_of(request: Request) -> str | None:
        """Return the request's token cookie when it looks like one of ours."""
        value = request.cookies.get(Csrf.COOKIE)
        if value is None or not 20 <= len(value) <= 100:
            return None
        return value

    def token(self, cookie: str) -> str:
        """Return the form token that goes with ``cookie``."""
        return self.sign(cookie, "csrf")

    def refusal(self, request: Request, sent: str | None) -> str | None:
        """Return why a change's token is refused, or ``None`` when it is good.

        ``sent``: the token of the form (or of the ``X-CSRF-Token`` header).
        """
        cookie = self.cookie_of(request)
        if cookie is None:
            return (
                "the form's security cookie is missing (cookies blocked, or it expired): load "
                "the page again and resubmit"
            )
        if not sent:
            return "the form carries no security token: submit it from the dashboard's page"
        if not hmac.compare_digest(sent, self.token(cookie)):
            return (
                "the form's security token does not match (the dashboard restarted, or the form "
                "came from elsewhere): load the page again and resubmit"
            )
        return None


def cross_site(request: Request) -> str | None:
    """Return why ``request`` looks sent by another site, or ``None`` when it looks our own.

    Browsers send ``Sec-Fetch-Site`` (``same-origin`` for a form of our pages) and ``Origin`` on
    a POST; when present they must say the request comes from the dashboard's own origin (its
    host, as the ``Host`` header names it). A client that sends neither (curl, a script) is
    judged by the CSRF token alone.
    """
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return f"the request came from another site (Sec-Fetch-Site: {site})"
    origin = request.headers.get("origin")
    if origin is not None:
        host = request.headers.get("host", "")
        netloc = urlsplit(origin).netloc if origin != "null" else ""
        if not netloc or netloc.lower() != host.lower():
            return f"the request came from another origin ({origin}, not {host or 'unknown'})"
    return None
