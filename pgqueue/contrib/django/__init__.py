"""pgqueue for Django: a ``django.tasks`` backend on pgqueue, its worker, and its settings.

Add ``"pgqueue.contrib.django"`` to ``INSTALLED_APPS``, point a ``TASKS`` backend at
``"pgqueue.contrib.django.backend.PgQueueBackend"``, configure ``PGQUEUE`` (see
:mod:`pgqueue.contrib.django.conf`), then run ``manage.py migrate``, ``manage.py pgqueue
migrate`` and ``manage.py pgqueue worker``. Needs ``pip install 'pgqueue[django]'``.

This package imports Django (and ``django.tasks`` or the ``django-tasks`` backport) in its
modules; importing the package itself imports nothing.
"""
