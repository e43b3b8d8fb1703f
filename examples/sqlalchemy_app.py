"""Scenario 2: an SQLAlchemy ORM app that inserts a user and enqueues its welcome email atomically.

``signup`` (with a ``Session``) and ``asignup`` (with an ``AsyncSession``) add the user and
enqueue the job through the session, in the session's transaction: commit and both exist,
roll back and neither does. The job classes run in any pgqueue worker::

    pgqueue worker examples.sqlalchemy_app:registry --driver sqlalchemy
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sqlalchemy import String
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import pgqueue

SCHEMA = os.environ.get("PGQUEUE_SCHEMA", "public")


class Base(DeclarativeBase):
    """The app's declarative base."""


class User(Base):
    """A user of the app."""

    __tablename__ = "users"
    __table_args__ = {"schema": SCHEMA}

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(200), unique=True)


WELCOMED: list[str] = []


@dataclass
class SendWelcome(pgqueue.Worker):
    """Pretend to send a welcome email (records it in ``WELCOMED``)."""

    kind = "example.orm_welcome"
    email: str

    def process(self, ctx: pgqueue.JobContext) -> None:
        WELCOMED.append(self.email)


registry = pgqueue.WorkerRegistry(SendWelcome)


def signup(session: Session, client: pgqueue.Client, email: str) -> tuple[int, int]:
    """Add a user and enqueue its welcome email in ``session``'s transaction (not committed)."""
    user = User(email=email)
    session.add(user)
    session.flush()  # the INSERT runs now, in the session's transaction
    job = client.add_job_with_tx(session, SendWelcome(email=email))
    return user.id, job.id


async def asignup(
    session: AsyncSession, client: pgqueue.AsyncClient, email: str
) -> tuple[int, int]:
    """The same with an ``AsyncSession`` and an ``AsyncClient``."""
    user = User(email=email)
    session.add(user)
    await session.flush()
    job = await client.add_job_with_tx(session, SendWelcome(email=email))
    return user.id, job.id
