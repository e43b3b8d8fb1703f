"""Settings of the example project: one PostgreSQL database, read from the environment.

``$PGQUEUE_DSN`` (default ``postgresql://postgres@127.0.0.1/postgres``) is the database;
``$PGQUEUE_SCHEMA`` (default ``public``) the schema of every table, Django's and pgqueue's
(it becomes the connection's ``search_path``). ``$EXAMPLE_HEARTBEAT_SECONDS`` (default 300)
is the interval of the ``heartbeat`` periodic entry, and ``$EXAMPLE_RETRY_BACKOFF`` (default 2)
the delay in seconds before a failed task's first retry: the tests make both short.
"""

import os
from datetime import timedelta
from urllib.parse import unquote, urlsplit

_url = urlsplit(os.environ.get("PGQUEUE_DSN", "postgresql://postgres@127.0.0.1/postgres"))
SCHEMA = os.environ.get("PGQUEUE_SCHEMA", "public")

SECRET_KEY = "example-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True
ROOT_URLCONF = "project.urls"
WSGI_APPLICATION = "project.wsgi.application"
MIDDLEWARE: list[str] = []

INSTALLED_APPS = ["pgqueue.contrib.django", "signups"]
try:
    import django.tasks  # noqa: F401  (Django 6 and later)
except ImportError:
    INSTALLED_APPS.insert(0, "django_tasks")  # the backport, before Django 6

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/"),
        "USER": unquote(_url.username or ""),
        "PASSWORD": unquote(_url.password or ""),
        "HOST": _url.hostname or "",
        "PORT": str(_url.port or ""),
        "OPTIONS": {"options": f"-c search_path={SCHEMA}"},
    }
}

# Tasks are pgqueue jobs, enqueued in the transaction of the code that enqueues them.
TASKS = {"default": {"BACKEND": "pgqueue.contrib.django.backend.PgQueueBackend"}}

PGQUEUE = {
    "SCHEMA": SCHEMA,
    "QUEUES": {"default": 4},
    "JOB_OPTIONS": {
        "max_attempts": 2,
        "retry_backoff": float(os.environ.get("EXAMPLE_RETRY_BACKOFF", "2")),
    },
    "PERIODIC": [
        {
            "task": "signups.tasks.heartbeat",
            "every": timedelta(seconds=int(os.environ.get("EXAMPLE_HEARTBEAT_SECONDS", "300"))),
        },
    ],
}
