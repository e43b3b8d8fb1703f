"""The tasks framework the backend plugs into: ``django.tasks``, else the backport.

Django's own ``django.tasks`` (Django 6 and later), else the ``django-tasks`` backport (module
``django_tasks``), which has the same API.

Everything is re-exported as ``Any``: Django ships no types that mypy reads here, and the two
modules differ in a few names (``InvalidTask`` in Django, ``InvalidTaskError`` in the
backport; ``normalize_json`` in ``django.utils.json`` or in the backport's ``utils``).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

__all__ = [
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "package",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]


def _load() -> ModuleType:
    try:
        return importlib.import_module("django.tasks")
    except ImportError:
        pass
    try:
        return importlib.import_module("django_tasks")
    except ImportError:
        raise ImportError(
            "pgqueue.contrib.django needs django.tasks (Django 6 or later) or the django-tasks "
            "backport: pip install 'pgqueue[django]'"
        ) from None


_package = _load()
package: str = _package.__name__
"""``"django.tasks"`` or ``"django_tasks"``: the module the backend was loaded against."""

_base = importlib.import_module(f"{package}.base")
_backends = importlib.import_module(f"{package}.backends.base")
_exceptions = importlib.import_module(f"{package}.exceptions")
_signals = importlib.import_module(f"{package}.signals")

BaseTaskBackend: Any = _backends.BaseTaskBackend
Task: Any = _base.Task
TaskContext: Any = _base.TaskContext
TaskError: Any = _base.TaskError
TaskResult: Any = _base.TaskResult
TaskResultStatus: Any = _base.TaskResultStatus
TaskResultDoesNotExist: Any = _exceptions.TaskResultDoesNotExist
InvalidTask: Any = getattr(_exceptions, "InvalidTask", None) or _exceptions.InvalidTaskError
task_backends: Any = _package.task_backends
task_enqueued: Any = _signals.task_enqueued
task_started: Any = _signals.task_started
task_finished: Any = _signals.task_finished


def _normalizer() -> Any:
    try:
        return importlib.import_module("django.utils.json").normalize_json
    except (ImportError, AttributeError):
        return importlib.import_module(f"{package}.utils").normalize_json


normalize_json: Any = _normalizer()
"""Turn a value into JSON types (tuples into lists...); raise ``TypeError`` for other types."""
