"""A sign-up, welcomed by a task."""

from django.db import models


class Signup(models.Model):
    """Someone who signed up; ``welcomed`` is set by the ``welcome`` task."""

    email = models.EmailField()
    welcomed = models.BooleanField(default=False)
