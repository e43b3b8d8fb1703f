"""What the single-purpose benchmark tools share: a database of their own, URLs, provenance.

``copy_threshold``, ``enqueue_profile`` and ``claim_plan`` each measure on a database created
for the run and dropped after it, reach it in each driver mode, and stamp their results with
the commit they ran from; the first two enqueue the same job.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg

import pgqueue

from .report import ROOT
from .subjects.pgqueue_subject import MODES

__all__ = ["ADMIN_DSN", "MODES", "Noop", "commit_stamp", "mode_url", "scratch_database"]

#: An admin connection (any database): each run creates and drops a database of its own.
ADMIN_DSN = os.environ.get("PGQUEUE_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


@dataclass
class Noop(pgqueue.Worker):
    """The tools' job: its one argument is a number (enqueued, never run)."""

    kind = "bench.noop"
    i: int

    def process(self, ctx: pgqueue.JobContext) -> None:
        """Do nothing."""


@contextmanager
def scratch_database(admin_dsn: str) -> Iterator[str]:
    """Create a database for one run; yield its URL; drop it (even if connections remain)."""
    name = f"pgqueue_bench_{uuid.uuid4().hex[:10]}"
    info = psycopg.conninfo.conninfo_to_dict(admin_dsn)
    dsn = "postgresql://{user}@{host}:{port}/{db}".format(
        user=info.get("user", "postgres"),
        host=info.get("host", "127.0.0.1"),
        port=info.get("port", 5432),
        db=name,
    )
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield dsn
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def mode_url(dsn: str, mode: str) -> str:
    """``dsn`` with the URL scheme of driver mode ``mode`` (see ``MODES``)."""
    return MODES[mode][1] + dsn[dsn.index("://") :]


def commit_stamp() -> str:
    """The commit this tree is at, with ``+dirty`` if tracked files changed (``unknown``)."""
    head = os.popen(f"git -C {ROOT} rev-parse --short HEAD 2>/dev/null").read().strip()
    dirty = os.popen(f"git -C {ROOT} status --porcelain --untracked-files=no").read().strip()
    return head + ("+dirty" if dirty else "") if head else "unknown"
