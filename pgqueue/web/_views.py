"""The dashboard's pages (GET): overview, jobs, a job, queues, periodic entries, workers, events.

Each page authorizes the request, reads what it shows in one reading transaction
(:meth:`~pgqueue.web._app.Dashboard.reading`: read only, with the statement timeout) through the
admin API, and renders its template. Bad input in a query string is shown on the page (status
400), never sent to the database.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..job_filter import STATUSES
from ..names import validate_kind
from ..records import JobInfo, QueueStats, StatusCounts
from ._app import Dashboard
from ._charts import charts
from ._forms import PAGE_SIZES, JobQuery
from ._live import stream

__all__ = ["Pages"]

CHART_MINUTES = 60
"""The overview's charts cover the last hour, a bar a minute."""
HISTORY_PAGE = 50
"""Ticks per page of a periodic entry's history."""
MAX_STREAM = 300.0
"""Seconds an event stream stays open before the browser reconnects (and is authorized again)."""


def _totals(stats: list[QueueStats]) -> StatusCounts:
    return StatusCounts(
        available=sum(q.counts.available for q in stats),
        scheduled=sum(q.counts.scheduled for q in stats),
        processing=sum(q.counts.processing for q in stats),
        failed=sum(q.counts.failed for q in stats),
        cancelled=sum(q.counts.cancelled for q in stats),
    )


def job_actions(job: JobInfo) -> list[str]:
    """Return the actions a job's page offers for its status (the API refuses others)."""
    if job.status == "processing":
        return ["cancel"]
    if job.status == "pending":
        return ["retry", "cancel", "delete"]  # retry: run now
    return ["retry", "delete"]


class Pages:
    """The GET endpoints of one dashboard."""

    def __init__(self, dash: Dashboard) -> None:
        self.dash = dash

    async def overview(self, request: Request) -> Response:
        """Show the overview: totals, the last hour's charts, each queue, the workers."""
        grant = await self.dash.grant(request)
        async with self.dash.reading() as r:
            stats = await r.client.queue_stats()
            workers = await r.client.list_workers()
            minutes = await r.store.job_finished_per_minute(CHART_MINUTES)
        behind = max((q.oldest_available_age or 0.0 for q in stats), default=0.0)
        context = {
            "nav": "overview",
            "seen": r.seen,
            "stats": stats,
            "totals": _totals(stats),
            "behind": behind,
            "workers": workers,
            "leader": next((w for w in workers if w.is_leader), None),
            "charts": charts(minutes),
        }
        return self.dash.render(request, "overview.html", context, grant=grant)

    async def jobs(self, request: Request) -> Response:
        """Show the jobs page: a filter, one page of jobs (by key), and the bulk actions."""
        grant = await self.dash.grant(request)
        params = request.query_params
        wanted = (params.get("id") or "").strip().lstrip("#")
        if wanted:
            if wanted.isdigit() and 0 < int(wanted) < 2**63:
                return self.dash.redirect(
                    request, self.dash.url(request, "job", job_id=int(wanted))
                )
            query = JobQuery.read(params, hide_args=self.dash.hide_args)
            query.error = f"{wanted!r} is not a job id: job ids are positive whole numbers"
        else:
            query = JobQuery.read(params, hide_args=self.dash.hide_args)
        cursor = params.get("cursor") or None
        page, seen = None, None
        if query.error is None:
            try:
                async with self.dash.reading() as r:
                    page = await r.client.list_jobs(
                        sort=query.sort,  # type: ignore[arg-type]  # checked by JobQuery
                        limit=query.limit,
                        cursor=cursor,
                        **query.kwargs(),
                    )
                    seen = r.seen
            except ValueError as exc:  # InvalidFilter, InvalidName: said on the page
                query.error = str(exc)
        context = {
            "nav": "jobs",
            "seen": seen,
            "query": query,
            "cursor": cursor,
            "page": page,
            "statuses": STATUSES,
            "page_sizes": PAGE_SIZES,
        }
        status = 400 if query.error else 200
        return self.dash.render(request, "jobs.html", context, grant=grant, status=status)

    async def job(self, request: Request) -> Response:
        """Show one job: arguments, options, every attempt with its error and traceback."""
        grant = await self.dash.grant(request)
        job_id = request.path_params["job_id"]
        if not 0 < job_id < 2**63:
            raise HTTPException(404, f"no job {job_id}")
        async with self.dash.reading() as r:
            job = await r.client.get_job(job_id)
        if job is None:
            raise HTTPException(
                404,
                f"no job {job_id}: it never existed, or it was deleted (retention removes "
                "finished jobs)",
            )
        context = {"nav": "jobs", "seen": r.seen, "job": job, "actions": job_actions(job)}
        return self.dash.render(request, "job.html", context, grant=grant)

    async def queues(self, request: Request) -> Response:
        """Show the queues: backlog, pause state, workers; pause, resume, purge."""
        grant = await self.dash.grant(request)
        async with self.dash.reading() as r:
            stats = await r.client.queue_stats()
        context = {
            "nav": "queues",
            "seen": r.seen,
            "stats": stats,
            "finished": ("completed", "failed", "cancelled"),
        }
        return self.dash.render(request, "queues.html", context, grant=grant)

    async def periodic(self, request: Request) -> Response:
        """Show the periodic entries: schedule, state, last tick and run, next tick."""
        grant = await self.dash.grant(request)
        async with self.dash.reading() as r:
            entries = await r.client.cron_list()
        context = {"nav": "periodic", "seen": r.seen, "entries": entries}
        return self.dash.render(request, "periodic.html", context, grant=grant)

    async def periodic_entry(self, request: Request) -> Response:
        """Show a periodic entry's history: its ticks, newest first, each with its job now."""
        grant = await self.dash.grant(request)
        name = request.path_params["name"]
        try:
            validate_kind(name)
        except ValueError:
            raise HTTPException(404, f"no periodic entry named {name!r}") from None
        before_text = request.query_params.get("before") or None
        before = None
        if before_text is not None:
            try:
                before = datetime.fromisoformat(before_text)
            except ValueError:
                raise HTTPException(400, f"{before_text!r} is not an ISO 8601 time") from None
        async with self.dash.reading() as r:
            entry = next((e for e in await r.client.cron_list() if e.name == name), None)
            ticks = await r.client.cron_history(name, limit=HISTORY_PAGE, before=before)
        if entry is None and not ticks:
            raise HTTPException(
                404, f"no periodic entry named {name!r}: the periodic page lists the entries"
            )
        older = ticks[-1].tick.astimezone(UTC).isoformat() if len(ticks) == HISTORY_PAGE else None
        context = {
            "nav": "periodic",
            "seen": r.seen,
            "name": name,
            "entry": entry,
            "ticks": ticks,
            "before": before,
            "older": older,
        }
        return self.dash.render(request, "periodic_entry.html", context, grant=grant)

    async def workers(self, request: Request) -> Response:
        """Show the worker processes: host, queues, leader, heartbeat age, running jobs."""
        grant = await self.dash.grant(request)
        async with self.dash.reading() as r:
            workers = await r.client.list_workers()
        context = {"nav": "workers", "seen": r.seen, "workers": workers}
        return self.dash.render(request, "workers.html", context, grant=grant)

    async def events(self, request: Request) -> Response:
        """Stream the live updates: server-sent events (see :mod:`pgqueue.web._live`)."""
        await self.dash.grant(request)
        seen = request.query_params.get("seen")
        if seen is not None and not re.fullmatch(r"[0-9a-f]{16}", seen):
            seen = None
        return StreamingResponse(
            stream(self.dash.live, MAX_STREAM, seen),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
