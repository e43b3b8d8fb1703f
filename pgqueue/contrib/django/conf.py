"""The ``PGQUEUE`` Django setting, read and checked in one place.

```python
PGQUEUE = {
    "DATABASE": "default",          # the alias: enqueue in its transactions, results, worker
    "DSN": None,                    # the worker's URL; default: built from DATABASES[DATABASE]
    "SCHEMA": "public",             # where pgqueue's tables are (pgqueue.Settings.schema)
    "PREFIX": "pgqueue_",           # their prefix (pgqueue.Settings.prefix)
    "QUEUES": {"default": 10},      # what `manage.py pgqueue worker` runs, and concurrency
    "JOB_OPTIONS": {"max_attempts": 25},  # every task's job: max_attempts, timeout, backoffs
    "PERIODIC": [],                 # periodic entries: {"task": "app.tasks.f", "cron": "..."}
    "REGISTRY": None,               # "module:attribute" of WorkerRegistry objects to run too
    "PRUNE_RESULTS": True,          # hourly: delete stored results whose job is gone
}
```

Every key is optional. An unknown key, or a value of the wrong type, raises Django's
``ImproperlyConfigured`` naming the key.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import quote, urlencode

from django.conf import settings as django_settings  # type: ignore[import-untyped]
from django.core.exceptions import ImproperlyConfigured  # type: ignore[import-untyped]

import pgqueue

__all__ = ["JOB_OPTION_KEYS", "PgQueueConfig", "database_url", "get_config", "seconds"]

JOB_OPTION_KEYS = ("max_attempts", "timeout", "retry_backoff", "retry_backoff_max")
"""The options ``JOB_OPTIONS`` may set; queue, priority and due time come from each task."""

_KEYS = (
    "DATABASE",
    "DSN",
    "SCHEMA",
    "PREFIX",
    "QUEUES",
    "JOB_OPTIONS",
    "PERIODIC",
    "REGISTRY",
    "PRUNE_RESULTS",
)

# Connection parameters Django computes for psycopg that are not libpq's (or not text).
_NOT_LIBPQ = {"cursor_factory", "context", "prepare_threshold", "client_encoding"}


@dataclass(frozen=True)
class PgQueueConfig:
    """The ``PGQUEUE`` setting, checked, with its defaults filled in.

    ``settings`` is the :class:`pgqueue.Settings` every client of the app uses (schema and
    prefix); ``job_options`` the options every task's job gets; ``periodic`` the raw entries
    (turned into :class:`pgqueue.Periodic` by :mod:`pgqueue.contrib.django.registry`).
    """

    database: str
    dsn: str | None
    settings: pgqueue.Settings
    queues: dict[str, int]
    job_options: pgqueue.JobOptions
    periodic: tuple[Mapping[str, Any], ...]
    registries: tuple[str, ...]
    prune_results: bool

    @property
    def queues_text(self) -> str:
        """The queues as ``pgqueue worker --queues`` reads them: ``default=10,emails=2``."""
        return ",".join(f"{name}={count}" for name, count in self.queues.items())


def seconds(key: str, value: object) -> timedelta:
    """Read a duration of the setting: a ``timedelta``, or a number of seconds."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return timedelta(seconds=float(value))
    raise ImproperlyConfigured(
        f"PGQUEUE {key}: give a timedelta or a number of seconds, got {value!r}"
    )


def _job_options(value: object) -> pgqueue.JobOptions:
    if value is None:
        return pgqueue.JobOptions()
    if isinstance(value, pgqueue.JobOptions):
        value = {k: getattr(value, k) for k in JOB_OPTION_KEYS if getattr(value, k) is not None}
    if not isinstance(value, Mapping):
        raise ImproperlyConfigured(
            f"PGQUEUE['JOB_OPTIONS'] must be a dict (or a pgqueue.JobOptions), got {value!r}"
        )
    unknown = sorted(set(value) - set(JOB_OPTION_KEYS))
    if unknown:
        raise ImproperlyConfigured(
            f"PGQUEUE['JOB_OPTIONS'] cannot set {', '.join(map(repr, unknown))}: it takes "
            f"{', '.join(JOB_OPTION_KEYS)} (a task's queue_name, priority and run_after give "
            "the rest)"
        )
    options: dict[str, Any] = {}
    for key, item in value.items():
        if key == "max_attempts":
            options[key] = item
        else:
            options[key] = seconds(f"JOB_OPTIONS['{key}']", item)
    try:
        return pgqueue.JobOptions(**options)
    except ValueError as exc:
        raise ImproperlyConfigured(f"PGQUEUE['JOB_OPTIONS']: {exc}") from exc


def _queues(value: object) -> dict[str, int]:
    if not isinstance(value, Mapping) or not value:
        raise ImproperlyConfigured(
            f"PGQUEUE['QUEUES'] must map queue names to concurrency, e.g. {{'default': 10}}, "
            f"got {value!r}"
        )
    queues: dict[str, int] = {}
    for name, count in value.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ImproperlyConfigured(
                f"PGQUEUE['QUEUES'][{name!r}]: the concurrency must be an int >= 1, got {count!r}"
            )
        queues[str(name)] = count
    return queues


def _paths(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ImproperlyConfigured(
        f"PGQUEUE['REGISTRY'] must be 'module:attribute' or a list of them, got {value!r}"
    )


def get_config() -> PgQueueConfig:
    """Read and check ``settings.PGQUEUE`` (an absent setting means every default)."""
    raw = getattr(django_settings, "PGQUEUE", None) or {}
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured(f"PGQUEUE must be a dict, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise ImproperlyConfigured(
            f"PGQUEUE has unknown key(s) {', '.join(map(repr, unknown))}: the keys are "
            f"{', '.join(_KEYS)}"
        )
    database = raw.get("DATABASE", "default")
    if database not in django_settings.DATABASES:
        raise ImproperlyConfigured(
            f"PGQUEUE['DATABASE'] is {database!r}, which is not in DATABASES "
            f"({', '.join(django_settings.DATABASES)})"
        )
    periodic = raw.get("PERIODIC") or ()
    if not isinstance(periodic, Sequence) or not all(isinstance(e, Mapping) for e in periodic):
        raise ImproperlyConfigured(
            "PGQUEUE['PERIODIC'] must be a list of dicts, e.g. "
            "[{'task': 'myapp.tasks.report', 'cron': '0 6 * * *'}]"
        )
    defaults = pgqueue.Settings()
    try:
        settings = pgqueue.Settings(
            schema=raw.get("SCHEMA") or defaults.schema,
            prefix=raw.get("PREFIX") or defaults.prefix,
        )
    except ValueError as exc:
        raise ImproperlyConfigured(f"PGQUEUE: {exc}") from exc
    return PgQueueConfig(
        database=database,
        dsn=raw.get("DSN") or None,
        settings=settings,
        queues=_queues(raw.get("QUEUES", {"default": 10})),
        job_options=_job_options(raw.get("JOB_OPTIONS")),
        periodic=tuple(periodic),
        registries=_paths(raw.get("REGISTRY")),
        prune_results=bool(raw.get("PRUNE_RESULTS", True)),
    )


def database_url(alias: str) -> str:
    """Return a ``postgresql://`` URL for the Django database ``alias``.

    Built from the parameters Django itself connects with (``NAME``, ``USER``, ``PASSWORD``,
    ``HOST``, ``PORT`` and the libpq ones of ``OPTIONS``, such as ``sslmode``, ``service`` or
    ``options``): the worker connects where the web process does.
    """
    from django.db import connections  # type: ignore[import-untyped]

    connection = connections[alias]
    if connection.vendor != "postgresql":
        raise ImproperlyConfigured(
            f"DATABASES[{alias!r}] is {connection.vendor!r}: pgqueue needs PostgreSQL "
            "(ENGINE 'django.db.backends.postgresql')"
        )
    params = {
        key: value
        for key, value in connection.get_connection_params().items()
        if key not in _NOT_LIBPQ and isinstance(value, str | int) and not isinstance(value, bool)
    }
    user = params.pop("user", None)
    password = params.pop("password", None)
    host = params.pop("host", None)
    port = params.pop("port", None)
    dbname = params.pop("dbname", None)
    netloc = ""
    if user is not None:
        netloc = quote(str(user), safe="")
        if password is not None:
            netloc += ":" + quote(str(password), safe="")
        netloc += "@"
    if host is not None and "/" not in str(host) and "," not in str(host):
        # a host name or an IPv4/IPv6 address
        netloc += f"[{host}]" if ":" in str(host) else str(host)
        if port is not None:
            netloc += f":{port}"
    else:
        # a Unix socket directory, or several hosts: libpq reads them from the query
        if host is not None:
            params["host"] = host
        if port is not None:
            params["port"] = port
    path = "/" + quote(str(dbname), safe="") if dbname is not None else "/"
    query = f"?{urlencode(params, quote_via=quote)}" if params else ""
    return f"postgresql://{netloc}{path}{query}"
