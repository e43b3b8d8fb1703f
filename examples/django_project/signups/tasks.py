"""The example's tasks, run by ``manage.py pgqueue worker``."""

from django.utils import timezone

try:
    from django.tasks import task  # Django 6 and later
except ImportError:
    from django_tasks import task  # the backport

from .models import Signup


@task()
def welcome(signup_id: int) -> dict[str, object]:
    """Welcome a sign-up (the ORM works in tasks); return what was done."""
    signup = Signup.objects.get(pk=signup_id)
    signup.welcomed = True
    signup.save(update_fields=["welcomed"])
    return {"email": signup.email, "welcomed": True}


@task()
async def add(a: int, b: int) -> int:
    """An async task: the worker awaits it."""
    return a + b


class WelcomeError(Exception):
    """What ``broken`` raises: ``get_result`` reports its class path, per attempt."""


@task(takes_context=True)
def broken(context, reason: str) -> None:  # context: a TaskContext
    """Fail every attempt (the example's settings allow 2)."""
    raise WelcomeError(f"{reason} (attempt {context.attempt})")


@task()
def heartbeat() -> str:
    """The periodic entry of the settings: say when it ran."""
    return timezone.now().isoformat()
