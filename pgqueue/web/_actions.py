"""The dashboard's actions (POST only): on jobs, queues and periodic entries.

Every action first passes :meth:`~pgqueue.web._app.Dashboard.guard` (allowed for this request,
not read-only, same site, a good CSRF token), then calls the admin API on the app's client (which
emits its ``AdminAction`` event), logs who did what, and redirects (303) to the page it came
from with a one-time message. An action on many jobs, or a purge, is counted first (the API's
``dry_run``, in a reading transaction) and shown for confirmation; only a form that says
``confirm=yes`` acts.
"""

from __future__ import annotations

from typing import Any

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..cli._output import parse_duration
from ..errors import JobNotFound
from ..records import BulkResult
from ._app import Dashboard
from ._forms import JobQuery, form_value, job_ids, names
from ._security import Grant

__all__ = ["Actions"]

PAST = {
    "retry": "retried",
    "cancel": "cancelled",
    "delete": "deleted",
    "purge": "purged",
}
FINISHED = ("completed", "failed", "cancelled")


def _jobs(n: int) -> str:
    return f"{n:,} job" + ("" if n == 1 else "s")


def _outcome(result: BulkResult) -> tuple[str, str]:
    """Return the one-time message after a bulk action: what it did, what it left alone."""
    past = PAST[result.action]
    if not result.changed and not result.refused and not result.missing:
        return ("error", f"no job to {result.action}: nothing matched")
    text = f"{past} {_jobs(result.changed)}"
    if result.refused:
        first = next(iter(result.refused.items()))
        text += f"; {len(result.refused)} refused (job {first[0]}: {first[1]})"
    if result.missing:
        text += f"; not found: {', '.join(map(str, result.missing[:20]))}"
    return ("error" if result.refused or result.missing else "ok", text)


class Actions:
    """The POST endpoints of one dashboard."""

    def __init__(self, dash: Dashboard) -> None:
        self.dash = dash

    # -- jobs ---------------------------------------------------------------------------------

    async def retry(self, request: Request) -> Response:
        """Retry the selected jobs, or every job matching the filter (after confirmation)."""
        return await self._jobs(request, "retry")

    async def cancel(self, request: Request) -> Response:
        """Cancel the selected jobs, or every job matching the filter (after confirmation)."""
        return await self._jobs(request, "cancel")

    async def delete(self, request: Request) -> Response:
        """Delete the selected jobs, or every job matching the filter (after confirmation)."""
        return await self._jobs(request, "delete")

    async def _jobs(self, request: Request, action: str) -> Response:
        grant, form = await self.dash.guard(request, action)
        query = JobQuery.read(form, hide_args=self.dash.hide_args)
        jobs_url = self.dash.url(request, "jobs") + query.query_string()
        back = self.dash.back(request, form, jobs_url)
        scope = form_value(form, "scope")
        kwargs: dict[str, Any]
        if scope == "selected":
            try:
                ids = job_ids([v for v in form.getlist("ids") if isinstance(v, str)])
            except ValueError as exc:
                raise HTTPException(400, str(exc)) from None
            if not ids:
                return self.dash.redirect(
                    request, back, ("error", f"select the jobs to {action} first")
                )
            kwargs = {"ids": ids}
            scope_text = _jobs(len(ids)) + " selected: " + ", ".join(map(str, ids[:20]))
            if len(ids) > 20:
                scope_text += ", …"
        elif scope == "matching":
            if query.error is not None:
                raise HTTPException(400, query.error)
            kwargs = {"all_jobs": query.empty, **query.kwargs()}
            scope_text = query.describe()
        else:
            raise HTTPException(400, "say which jobs: scope=selected (with ids) or scope=matching")
        method = getattr(await self.dash.client(), f"{action}_jobs")
        if form_value(form, "confirm") != "yes":
            try:
                async with self.dash.reading() as r:
                    counted: BulkResult = await getattr(r.client, f"{action}_jobs")(
                        dry_run=True, **kwargs
                    )
            except ValueError as exc:  # InvalidFilter (retry of running jobs, ...)
                raise HTTPException(400, str(exc)) from None
            return self._confirm(request, grant, form, action, counted, scope_text, back)
        try:
            result: BulkResult = await method(**kwargs)
        except ValueError as exc:
            return self.dash.redirect(request, back, ("error", f"nothing changed: {exc}"))
        self.dash.log_action(
            grant,
            action,
            f"{_jobs(result.changed)} changed of {_jobs(result.matched)} ({scope_text})",
            changed=result.changed,
            refused=len(result.refused),
        )
        return self.dash.redirect(request, back, _outcome(result))

    def _confirm(
        self,
        request: Request,
        grant: Grant,
        form: FormData,
        action: str,
        counted: BulkResult,
        scope_text: str,
        back: str,
    ) -> Response:
        keep = [
            (k, v)
            for k, v in form.multi_items()
            if isinstance(v, str) and k not in ("confirm", self.dash.csrf.FIELD, "next")
        ]
        context = {
            "nav": "queues" if action == "purge" else "jobs",
            "action": action,
            "counted": counted,
            "scope_text": scope_text,
            "fields": keep,
            "target": request.url.path,
            "back": back,
        }
        return self.dash.render(request, "confirm.html", context, grant=grant)

    # -- queues -------------------------------------------------------------------------------

    async def pause(self, request: Request) -> Response:
        """Pause a queue (``*``: every queue that exists now)."""
        grant, form = await self.dash.guard(request, "pause")
        back = self.dash.back(request, form, self.dash.url(request, "queues"))
        queue = form_value(form, "queue")
        try:
            paused = await (await self.dash.client()).pause_queue(queue)
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        self.dash.log_action(grant, "pause", ", ".join(paused) or "nothing", queues=paused)
        if not paused:
            return self.dash.redirect(request, back, ("error", "no queue to pause"))
        note = "workers finish what they run and claim nothing more from it until it is resumed"
        return self.dash.redirect(request, back, ("ok", f"paused {', '.join(paused)} ({note})"))

    async def resume(self, request: Request) -> Response:
        """Resume a paused queue (``*``: every paused queue)."""
        grant, form = await self.dash.guard(request, "resume")
        back = self.dash.back(request, form, self.dash.url(request, "queues"))
        queue = form_value(form, "queue")
        try:
            resumed = await (await self.dash.client()).resume_queue(queue)
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        self.dash.log_action(grant, "resume", ", ".join(resumed) or "nothing", queues=resumed)
        if not resumed:
            which = "no queue is" if queue == "*" else f"{queue} is not"
            return self.dash.redirect(
                request, back, ("error", f"nothing to resume: {which} paused")
            )
        note = "its workers claim again at once"
        return self.dash.redirect(request, back, ("ok", f"resumed {', '.join(resumed)} ({note})"))

    async def purge(self, request: Request) -> Response:
        """Delete a queue's jobs that finished more than a duration ago (after confirmation)."""
        grant, form = await self.dash.guard(request, "purge")
        back = self.dash.back(request, form, self.dash.url(request, "queues"))
        queue = form_value(form, "queue")
        older_text = form_value(form, "older_than")
        statuses = [s for s in form.getlist("status") if isinstance(s, str) and s]
        try:
            older_than = parse_duration(older_text)
        except ValueError as exc:
            raise HTTPException(400, f"older than: {exc}") from None
        kwargs: dict[str, Any] = {
            "older_than": older_than,
            "queue": None if queue in ("", "*") else names(queue),
            "status": statuses or None,
        }
        scope_text = ", ".join(
            [
                "every queue" if kwargs["queue"] is None else f"queue={queue}",
                f"status={','.join(statuses or FINISHED)}",
                f"finished over {older_text} ago",
            ]
        )
        client = await self.dash.client()
        if form_value(form, "confirm") != "yes":
            try:
                async with self.dash.reading() as r:
                    counted = await r.client.purge_jobs(dry_run=True, **kwargs)
            except ValueError as exc:
                raise HTTPException(400, str(exc)) from None
            return self._confirm(request, grant, form, "purge", counted, scope_text, back)
        try:
            result = await client.purge_jobs(**kwargs)
        except ValueError as exc:
            return self.dash.redirect(request, back, ("error", f"nothing changed: {exc}"))
        self.dash.log_action(grant, "purge", f"{_jobs(result.changed)} ({scope_text})")
        return self.dash.redirect(request, back, _outcome(result))

    # -- periodic entries ---------------------------------------------------------------------

    async def cron_pause(self, request: Request) -> Response:
        """Pause a periodic entry: its ticks enqueue nothing until it is resumed."""
        grant, form = await self.dash.guard(request, "cron_pause")
        back = self.dash.back(request, form, self.dash.url(request, "periodic"))
        name = form_value(form, "name")
        try:
            found = await (await self.dash.client()).cron_pause(name)
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        if not found:
            return self.dash.redirect(request, back, ("error", f"no periodic entry named {name}"))
        self.dash.log_action(grant, "cron_pause", name, entry=name)
        return self.dash.redirect(
            request, back, ("ok", f"paused {name} (its ticks enqueue nothing until resumed)")
        )

    async def cron_resume(self, request: Request) -> Response:
        """Resume a paused periodic entry (the ticks missed meanwhile are not enqueued)."""
        grant, form = await self.dash.guard(request, "cron_resume")
        back = self.dash.back(request, form, self.dash.url(request, "periodic"))
        name = form_value(form, "name")
        try:
            resumed = await (await self.dash.client()).cron_resume(name)
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        if not resumed:
            return self.dash.redirect(
                request, back, ("error", f"nothing to resume: {name} is not paused")
            )
        self.dash.log_action(grant, "cron_resume", name, entry=name)
        return self.dash.redirect(
            request, back, ("ok", f"resumed {name} (its next tick is enqueued)")
        )

    async def cron_trigger(self, request: Request) -> Response:
        """Enqueue a periodic entry's job now."""
        grant, form = await self.dash.guard(request, "cron_trigger")
        back = self.dash.back(request, form, self.dash.url(request, "periodic"))
        name = form_value(form, "name")
        try:
            job_id = await (await self.dash.client()).cron_trigger(name)
        except JobNotFound as exc:
            return self.dash.redirect(request, back, ("error", str(exc)))
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        self.dash.log_action(
            grant, "cron_trigger", f"{name}: job {job_id}", entry=name, job_id=job_id
        )
        return self.dash.redirect(request, back, ("ok", f"triggered {name}: enqueued job {job_id}"))
