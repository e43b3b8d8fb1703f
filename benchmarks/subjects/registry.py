"""Subject names -> instances. Peers are imported only when asked for."""

from __future__ import annotations

from .base import Subject

PGQUEUE_MODES = ("asyncpg", "psycopg-async", "psycopg-sync", "sqlalchemy-async", "sqlalchemy-sync")
PEERS = ("pgqueuer", "procrastinate")
ALL = (*PEERS, *(f"pgqueue/{m}" for m in PGQUEUE_MODES))


def make_subject(spec: str, dsn: str) -> Subject:
    """Build the subject named ``spec`` ("pgqueuer", "procrastinate", "pgqueue/<mode>")."""
    if spec.startswith("pgqueue/"):
        from .pgqueue_subject import PgQueueSubject

        return PgQueueSubject(dsn, spec.split("/", 1)[1])
    if spec == "pgqueuer":
        from .pgqueuer_subject import PgQueuerSubject

        return PgQueuerSubject(dsn)
    if spec == "procrastinate":
        from .procrastinate_subject import ProcrastinateSubject

        return ProcrastinateSubject(dsn)
    raise SystemExit(f"unknown subject {spec!r}; known: {', '.join(ALL)}")
