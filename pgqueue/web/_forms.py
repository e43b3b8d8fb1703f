"""What the dashboard reads from query strings and forms, checked before anything runs.

:class:`JobQuery` is the jobs page's filter (status, queue, kind, arguments, sort, page size),
read from the page's query string or from an action's form, which carries it along as hidden
fields, so that "every job matching" means what the page showed. The admin API checks names and
values again (:class:`~pgqueue.InvalidFilter`, :class:`~pgqueue.InvalidName`); values only ever
reach PostgreSQL as bound parameters.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import FormData, ImmutableMultiDict, QueryParams

from ..job_filter import MAX_LIMIT, SORTS, STATUSES

__all__ = ["PAGE_SIZES", "JobQuery", "job_ids", "names"]

PAGE_SIZES = (20, 50, 100, 200)
"""The page sizes the jobs page offers (any from 1 to 1000 is accepted)."""
DEFAULT_PAGE = 50

Params = QueryParams | FormData | ImmutableMultiDict[str, Any]


def names(text: str) -> list[str]:
    """Split a field of queue or kind names: by commas or spaces (names contain neither)."""
    return [part for part in re.split(r"[\s,]+", text.strip()) if part]


def job_ids(values: list[str]) -> list[int]:
    """Read job ids (``ids`` fields); raise ``ValueError`` for one that is not a number."""
    out = []
    for value in values:
        for part in names(value):
            if not part.isdigit() or not 0 < int(part) < 2**63:
                raise ValueError(f"{part!r} is not a job id: job ids are positive whole numbers")
            out.append(int(part))
    return out


@dataclass
class JobQuery:
    """The jobs page's filter, as typed (to show it back) and as the admin API takes it.

    ``error``: what is wrong with it (the page shows it, and lists nothing).
    """

    status: list[str] = field(default_factory=list)
    queue: str = ""
    kind: str = ""
    args: str = ""
    sort: str = "-id"
    limit: int = DEFAULT_PAGE
    error: str | None = None

    @classmethod
    def read(cls, params: Params, *, hide_args: bool = False) -> JobQuery:
        """Read the filter's fields from a query string or a form."""
        query = cls(
            status=[s for s in params.getlist("status") if isinstance(s, str) and s],
            queue=form_value(params, "queue"),
            kind=form_value(params, "kind"),
            args=form_value(params, "args"),
            sort=form_value(params, "sort") or "-id",
        )
        unknown = [s for s in query.status if s not in STATUSES]
        if unknown:
            query.error = f"unknown status {unknown[0]!r}: the statuses are {', '.join(STATUSES)}"
            query.status = [s for s in query.status if s in STATUSES]
        if query.sort not in SORTS:
            query.error = f"unknown sort {query.sort!r}: use one of {', '.join(SORTS)}"
            query.sort = "-id"
        limit = form_value(params, "limit") or str(DEFAULT_PAGE)
        if not limit.isdigit() or not 1 <= int(limit) <= MAX_LIMIT:
            query.error = f"the page size must be a whole number from 1 to {MAX_LIMIT}"
        else:
            query.limit = int(limit)
        if query.args:
            if hide_args:
                query.error = "this dashboard hides arguments: it cannot filter by them"
            else:
                try:
                    loaded = json.loads(query.args)
                except ValueError as exc:
                    query.error = f"arguments: not valid JSON ({exc})"
                else:
                    if not isinstance(loaded, dict):
                        query.error = 'arguments: give a JSON object, such as {"user_id": 42}'
        return query

    @property
    def empty(self) -> bool:
        """Whether the filter matches every job."""
        return not (self.status or self.queue or self.kind or self.args)

    def kwargs(self) -> dict[str, Any]:
        """Return the filter as the admin API's keywords (``status=``, ``queue=``...)."""
        out: dict[str, Any] = {}
        if self.status:
            out["status"] = list(self.status)
        if self.queue:
            out["queue"] = names(self.queue)
        if self.kind:
            out["kind"] = names(self.kind)
        if self.args:
            out["args"] = json.loads(self.args)
        return out

    def describe(self) -> str:
        """Say what the filter matches, as the CLI does: ``status=failed, queue=emails``."""
        parts = []
        if self.status:
            parts.append(f"status={','.join(self.status)}")
        if self.queue:
            parts.append(f"queue={','.join(names(self.queue))}")
        if self.kind:
            parts.append(f"kind={','.join(names(self.kind))}")
        if self.args:
            parts.append(f"args={self.args}")
        return ", ".join(parts) or "every job"

    def fields(self) -> list[tuple[str, str]]:
        """Return the filter as (name, value) pairs: hidden fields, or a query string."""
        pairs = [("status", s) for s in self.status]
        pairs += [(n, v) for n, v in (("queue", self.queue), ("kind", self.kind)) if v]
        if self.args:
            pairs.append(("args", self.args))
        if self.sort != "-id":
            pairs.append(("sort", self.sort))
        if self.limit != DEFAULT_PAGE:
            pairs.append(("limit", str(self.limit)))
        return pairs

    def query_string(self, **extra: str | None) -> str:
        """Return ``?...`` for the jobs page with this filter (and ``extra``, e.g. a cursor)."""
        pairs = self.fields() + [(k, v) for k, v in extra.items() if v is not None]
        return "?" + urlencode(pairs) if pairs else ""


def form_value(form: Mapping[str, Any], name: str) -> str:
    """Return a form field as stripped text ('' when absent)."""
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""
