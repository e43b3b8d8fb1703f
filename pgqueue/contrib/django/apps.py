"""The Django app ``pgqueue.contrib.django`` (label ``pgqueue``)."""

from __future__ import annotations

from django.apps import AppConfig  # type: ignore[import-untyped]

__all__ = ["PgQueueAppConfig"]


class PgQueueAppConfig(AppConfig):  # type: ignore[misc]
    """pgqueue's Django app: the table of task results, and the ``pgqueue`` command."""

    name = "pgqueue.contrib.django"
    label = "pgqueue"
    verbose_name = "pgqueue"
    default_auto_field = "django.db.models.BigAutoField"
