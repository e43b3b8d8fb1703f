"""Views that enqueue tasks in the request's transaction, and one that reads a result.

The tasks backend inserts each task's job on Django's own connection: inside
``transaction.atomic()`` the job commits with the block, or vanishes with it.
"""

import json

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET, require_POST

try:
    from django.tasks import default_task_backend
    from django.tasks.exceptions import TaskResultDoesNotExist
except ImportError:
    from django_tasks import default_task_backend
    from django_tasks.exceptions import TaskResultDoesNotExist

from . import tasks
from .models import Signup


class _Undo(Exception):
    """Raised to roll the request's work back, after the task was enqueued."""


def health(request: HttpRequest) -> JsonResponse:
    """Answer 200: the server is up."""
    return JsonResponse({"ok": True})


@require_POST
def signup(request: HttpRequest) -> JsonResponse:
    """Create a sign-up and enqueue its welcome, in one transaction."""
    with transaction.atomic():
        row = Signup.objects.create(email=request.GET["email"])
        result = tasks.welcome.enqueue(row.pk)
    return JsonResponse({"signup": row.pk, "task": result.id}, status=201)


@require_POST
def signup_rolled_back(request: HttpRequest) -> JsonResponse:
    """Create a sign-up and enqueue its welcome, then fail: neither survives."""
    try:
        with transaction.atomic():
            row = Signup.objects.create(email=request.GET["email"])
            result = tasks.welcome.enqueue(row.pk)
            raise _Undo
    except _Undo:
        return JsonResponse({"signup": row.pk, "task": result.id}, status=409)


@require_POST
async def add_numbers(request: HttpRequest) -> JsonResponse:
    """An async view: ``aenqueue`` an async task (committed at once: autocommit)."""
    result = await tasks.add.aenqueue(int(request.GET["a"]), int(request.GET["b"]))
    return JsonResponse({"task": result.id}, status=201)


@require_POST
def broken_task(request: HttpRequest) -> JsonResponse:
    """Enqueue a task that always fails."""
    result = tasks.broken.enqueue(request.GET.get("reason", "broken"))
    return JsonResponse({"task": result.id}, status=201)


@require_GET
def task_result(request: HttpRequest, result_id: str) -> JsonResponse:
    """Report a task's result: status, return value, errors and attempts."""
    try:
        result = default_task_backend.get_result(result_id)
    except TaskResultDoesNotExist:
        return JsonResponse({"error": "no such task"}, status=404)
    body = {
        "task": result.task.module_path,
        "status": str(result.status),
        "attempts": result.attempts,
        "args": result.args,
        "errors": [error.exception_class_path for error in result.errors],
        "enqueued_at": result.enqueued_at.isoformat() if result.enqueued_at else None,
        "finished_at": result.finished_at.isoformat() if result.finished_at else None,
    }
    if result.is_finished and str(result.status) == "SUCCESSFUL":
        body["return_value"] = result.return_value
    return JsonResponse(json.loads(json.dumps(body)))
