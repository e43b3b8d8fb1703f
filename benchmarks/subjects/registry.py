"""Subject names -> instances. Peers are imported only when asked for."""

from __future__ import annotations

import os
import sys

from .base import Subject

PGQUEUE_MODES = ("asyncpg", "psycopg-async", "psycopg-sync", "sqlalchemy-async", "sqlalchemy-sync")
PEERS = ("pgqueuer", "pgqueuer-pool", "procrastinate")
ALL = (*PEERS, *(f"pgqueue/{m}" for m in PGQUEUE_MODES))


BASE_ENV = "PGQUEUE_BENCH_BASE"


def make_subject(spec: str, dsn: str) -> Subject:
    """Build the subject named ``spec`` ("pgqueuer", "pgqueuer-pool", "procrastinate",
    "pgqueue/<mode>").

    Variants of pgqueue, for before/after comparisons in one interleaved run:

    - ``pgqueue-base/<mode>``: the pgqueue of another source tree, ``$PGQUEUE_BENCH_BASE``
      (e.g. ``git worktree add ../base <commit>``), imported ahead of this one;
    - ``pgqueue/<mode>+events``: this pgqueue with a subscriber to every event of
      ``pgqueue.events`` (the cost of the events seam in use; plain ``pgqueue/<mode>`` has
      only the default log subscriber);
    - ``pgqueue/<mode>+quiet``: no subscriber at all, not even the log subscriber (what the
      events seam costs when nobody listens).
    """
    family, _, mode = spec.partition("/")
    if family == "pgqueue-base":
        base = os.environ.get(BASE_ENV)
        if not base:
            raise SystemExit(
                f"{spec} needs ${BASE_ENV}: the path of a pgqueue source tree to compare with "
                "(git worktree add ../base <commit>)"
            )
        if "pgqueue" not in sys.modules:
            sys.path.insert(0, base)
    if family in ("pgqueue", "pgqueue-base"):
        from .pgqueue_subject import PgQueueSubject

        mode, plus, extra = mode.partition("+")
        if plus and extra not in ("events", "quiet"):
            raise SystemExit(f"unknown variant {extra!r} of {spec!r}: use +events or +quiet")
        subject = PgQueueSubject(dsn, mode, variant=extra)
        subject.name = spec
        return subject
    if spec in ("pgqueuer", "pgqueuer-pool"):
        from .pgqueuer_subject import PgQueuerSubject

        return PgQueuerSubject(dsn, pool=spec == "pgqueuer-pool")
    if spec == "procrastinate":
        from .procrastinate_subject import ProcrastinateSubject

        return ProcrastinateSubject(dsn)
    raise SystemExit(f"unknown subject {spec!r}; known: {', '.join(ALL)}")
