"""The templates (``pgqueue/web/templates``) and the helpers they call.

Autoescaping is on for every template: a job's arguments, errors and tracebacks, and every name,
are text, never markup. The helpers that return markup (:func:`when`) escape what they insert.
Times are written as UTC in ``<time datetime="...">`` elements; the pages' script shows them in
the browser's time zone.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import jinja2
from markupsafe import Markup
from starlette.templating import Jinja2Templates

from ..cli._output import age, duration_text

__all__ = ["templates", "when"]


def when(moment: datetime | None, relative: bool = False) -> Markup:
    """Return ``<time datetime="<UTC ISO>">`` for ``moment`` (the page's script localises it).

    Its text is the UTC time (what shows without the script); ``relative`` adds how long ago
    (``3m 12s ago``) after it, as the server computed it.
    """
    if moment is None:
        return Markup("")
    utc = moment.astimezone(UTC)
    tag = Markup('<time datetime="{}" title="{}">{}</time>').format(
        utc.isoformat(timespec="seconds").replace("+00:00", "Z"),
        utc.strftime("%Y-%m-%d %H:%M:%S UTC"),
        utc.strftime("%Y-%m-%d %H:%M:%S UTC"),
    )
    if relative:
        tag += Markup(' <span class="muted">({})</span>').format(age(moment))
    return tag


def pretty(value: Any) -> str:
    """Return ``value`` as indented JSON (the template escapes it)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def compact(value: Any, limit: int = 120) -> str:
    """Return ``value`` as one line of JSON, cut at ``limit`` characters."""
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cut(text: str | None, limit: int = 120) -> str:
    """Return the first line of ``text``, cut at ``limit`` characters."""
    if not text:
        return ""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def span(seconds: float | None) -> str:
    """Write a span of seconds for people: ``2.5s``, ``3m 12s`` ('' for ``None``)."""
    return "" if seconds is None else duration_text(seconds)


def templates() -> Jinja2Templates:
    """Return the dashboard's templates, autoescaped, with their helpers."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("pgqueue.web", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(when=when, ago=age, span=span)
    env.filters.update(pretty=pretty, compact=compact, cut=cut)
    return Jinja2Templates(env=env)
