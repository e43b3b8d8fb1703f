"""The registry ``manage.py pgqueue worker`` runs, built from the ``PGQUEUE`` setting.

It holds the ``django.task`` job (every task of every app), the periodic entries of
``PGQUEUE["PERIODIC"]``, the hourly pruning of stored results (``PGQUEUE["PRUNE_RESULTS"]``),
and the kinds and entries of the ``WorkerRegistry`` objects ``PGQUEUE["REGISTRY"]`` names.

``pgqueue.contrib.django.registry:registry`` is that registry as ``pgqueue worker`` loads it;
read outside a Django process, it sets Django up first (from ``$DJANGO_SETTINGS_MODULE``).

A periodic entry is a dict::

    {"task": "myapp.tasks.send_report",  # the task's module path
     "cron": "0 6 * * 1-5",               # or "every": a timedelta or a number of seconds
     "name": "weekday-report",            # default: the task's path
     "args": [...], "kwargs": {...},      # default: none
     "timezone": "Europe/Paris",          # how the cron expression is read (default UTC)
     "queue": "reports", "priority": 5,   # default: the task's queue_name and priority
     "grace": ..., "backfill": ..., "jitter": ...,  # timedeltas or seconds
     "overlap": "skip", "run_on_start": True}
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured  # type: ignore[import-untyped]

import pgqueue

from . import _tasks
from .conf import PgQueueConfig, get_config, seconds
from .jobs import DjangoTask, PruneResults, load_task

__all__ = ["PRUNE_ENTRY", "build_registry", "periodic_entry"]

PRUNE_ENTRY = "pgqueue.django.prune-results"
"""The name of the periodic entry that deletes stored results whose job is gone."""

_ENTRY_KEYS = {
    "task",
    "name",
    "cron",
    "every",
    "args",
    "kwargs",
    "timezone",
    "queue",
    "priority",
    "grace",
    "backfill",
    "jitter",
    "overlap",
    "run_on_start",
}

_registry: pgqueue.WorkerRegistry | None = None


def periodic_entry(entry: Mapping[str, Any], config: PgQueueConfig) -> pgqueue.Periodic:
    """Turn one dict of ``PGQUEUE["PERIODIC"]`` into a :class:`pgqueue.Periodic`."""
    path = entry.get("task")
    if not isinstance(path, str):
        raise ImproperlyConfigured(
            f"PGQUEUE['PERIODIC'] entry {dict(entry)!r}: 'task' must be a task's module path, "
            "e.g. 'myapp.tasks.send_report'"
        )
    where = f"PGQUEUE['PERIODIC'] entry {entry.get('name', path)!r}"
    unknown = sorted(set(entry) - _ENTRY_KEYS)
    if unknown:
        raise ImproperlyConfigured(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; the keys are "
            f"{', '.join(sorted(_ENTRY_KEYS))}"
        )
    try:
        task = load_task(path)
    except (ImportError, TypeError) as exc:
        raise ImproperlyConfigured(f"{where}: {exc}") from exc
    args = _tasks.normalize_json(list(entry.get("args", ())))
    kwargs = _tasks.normalize_json(dict(entry.get("kwargs", {})))
    durations: dict[str, timedelta] = {
        key: seconds(f"{where} {key}", entry[key])
        for key in ("every", "grace", "backfill", "jitter")
        if entry.get(key) is not None
    }
    options = config.job_options.merged_with(
        pgqueue.JobOptions(
            queue=entry.get("queue", task.queue_name),
            priority=entry.get("priority", task.priority),
        )
    )
    try:
        return pgqueue.Periodic(
            entry.get("name", path),
            DjangoTask(task=path, args=args, kwargs=kwargs, backend=task.backend),
            cron=entry.get("cron"),
            timezone=entry.get("timezone", "UTC"),
            options=options,
            overlap=entry.get("overlap", "allow"),
            run_on_start=bool(entry.get("run_on_start", False)),
            **durations,
        )
    except ValueError as exc:  # InvalidSchedule, InvalidJobOptions
        raise ImproperlyConfigured(f"{where}: {exc}") from exc


def build_registry(config: PgQueueConfig | None = None) -> pgqueue.WorkerRegistry:
    """Build the worker's registry from the ``PGQUEUE`` setting (Django must be set up)."""
    from ...cli.worker import load_registry

    config = config or get_config()
    registry = pgqueue.WorkerRegistry(DjangoTask)
    for path in config.registries:
        other = load_registry(path)
        for kind in other.kinds():
            registry.register(other.get(kind))
        for periodic in other.periodic:
            registry.schedule(periodic)
    for entry in config.periodic:
        registry.schedule(periodic_entry(entry, config))
    if config.prune_results:
        registry.schedule(
            pgqueue.Periodic(
                PRUNE_ENTRY,
                PruneResults(),
                every=timedelta(hours=1),
                options=pgqueue.JobOptions(queue=next(iter(config.queues))),
                overlap="skip",
            )
        )
    return registry


def __getattr__(name: str) -> Any:
    # `pgqueue worker pgqueue.contrib.django.registry:registry` reads this: built on first
    # use, after Django is set up (the management command has; a bare `pgqueue worker` has
    # not).
    global _registry
    if name != "registry":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _registry is None:
        from django.apps import apps  # type: ignore[import-untyped]

        if not apps.ready:
            import django  # type: ignore[import-untyped]

            django.setup()
        _registry = build_registry()
    return _registry
