"""The example app's configuration."""

from django.apps import AppConfig


class SignupsConfig(AppConfig):
    """Sign-ups."""

    name = "signups"
    default_auto_field = "django.db.models.BigAutoField"
