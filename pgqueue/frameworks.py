"""Connections of web frameworks that stand for a database library's connection.

``add_job_with_tx`` takes the object a framework hands its views; :func:`native_transaction`
returns the library connection under it, which the adapter registry can then place. Django
is recognised without being imported.
"""

from __future__ import annotations

from .errors import ConfigurationError

__all__ = ["native_transaction"]


def native_transaction(obj: object) -> object:
    """Return the database library's connection behind a framework's connection object.

    A Django database connection (``django.db.connection``, or ``django.db.connections[alias]``)
    becomes the psycopg 3 connection it wraps, connected first if it was not yet. Django is not
    imported: it is recognised by its module and by ``vendor`` and ``ensure_connection``. Any
    other object is returned as it is.
    """
    module = type(obj).__module__ or ""
    if module.split(".")[0] != "django":
        return obj
    vendor = getattr(obj, "vendor", None)
    ensure_connection = getattr(obj, "ensure_connection", None)
    if not isinstance(vendor, str) or not callable(ensure_connection):
        return obj
    if vendor != "postgresql":
        raise ConfigurationError(
            f"this Django database connection is {vendor!r}: pgqueue needs PostgreSQL; pass "
            "the connection of a database with ENGINE 'django.db.backends.postgresql'"
        )
    try:
        ensure_connection()
    except Exception as exc:
        if type(exc).__name__ != "SynchronousOnlyOperation":
            raise
        raise ConfigurationError(
            "Django's database connection is sync, and Django refuses it inside a running "
            "event loop: enqueue with pgqueue.Client from sync code (in an async view, wrap "
            "the call in asgiref's sync_to_async)"
        ) from exc
    native: object = getattr(obj, "connection", None)
    library = (type(native).__module__ or "").split(".")[0]
    if library != "psycopg":
        raise ConfigurationError(
            f"this Django database connection runs on {library or 'an unknown library'}, not "
            "psycopg 3: pip install 'psycopg[binary]' (Django 4.2 and later use psycopg 3 when "
            "it is installed), or pass a connection of pgqueue's own"
        )
    return native
