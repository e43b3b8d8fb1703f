"""A FastAPI app that enqueues jobs in the request's transaction, with pgqueue.contrib.starlette.

The app's lifespan opens a psycopg ``AsyncConnectionPool`` and, inside it, ``pgqueue_lifespan``
on the same pool: an ``AsyncClient`` for the app's lifetime (``Depends(get_client)``), pgqueue's
tables migrated at startup. ``POST /signup?email=...`` inserts a user and enqueues a welcome
email in one transaction; with ``&fail=true`` the endpoint fails after enqueueing, the
transaction rolls back, and neither the user nor the job exists. ``GET /jobs/{id}`` answers a
job's status. Jobs run in a separate worker::

    export PGQUEUE_DSN=postgresql://localhost/app
    uvicorn examples.fastapi_app:app --port 8000
    pgqueue worker examples.fastapi_app:registry

``examples.fastapi_app:app_with_workers`` is the same app running the jobs in its own process
too (``run_workers``), with no separate worker: handy in development.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

import psycopg
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

import pgqueue
from pgqueue.contrib.starlette import get_client, pgqueue_lifespan

DSN = os.environ.get("PGQUEUE_DSN", "postgresql://postgres@127.0.0.1/postgres")
SCHEMA = os.environ.get("PGQUEUE_SCHEMA", "public")
settings = pgqueue.Settings(schema=SCHEMA)


@dataclass
class SendWelcome(pgqueue.Worker):
    """Pretend to send a welcome email; record it (and the worker's pid) in ``welcome_log``."""

    kind = "example.fastapi.send_welcome"
    email: str

    async def process(self, ctx: pgqueue.JobContext) -> None:
        async with await psycopg.AsyncConnection.connect(DSN) as conn:
            await conn.execute(
                sql.SQL(
                    "INSERT INTO {}.welcome_log (email, job_id, pid) VALUES (%s, %s, %s)"
                ).format(sql.Identifier(SCHEMA)),
                (self.email, ctx.id, os.getpid()),
            )


registry = pgqueue.WorkerRegistry(SendWelcome)


def get_pool(request: Request) -> AsyncConnectionPool:
    """The app's connection pool (a dependency)."""
    pool: AsyncConnectionPool = request.app.state.pool
    return pool


Client = Annotated[pgqueue.AsyncClient, Depends(get_client)]
Pool = Annotated[AsyncConnectionPool, Depends(get_pool)]

router = APIRouter()


@router.post("/signup", status_code=201)
async def signup(email: str, client: Client, pool: Pool, fail: bool = False) -> dict[str, Any]:
    """Insert a user and enqueue its welcome email, in one transaction."""
    # The pooled connection's block is the request's transaction: it commits at the end of the
    # block, before the response is sent, or rolls back if the block raises (here the
    # HTTPException). The job is inserted on the same connection, so it shares that fate.
    async with pool.connection() as conn:
        cursor = await conn.execute(
            sql.SQL("INSERT INTO {}.users (email) VALUES (%s) RETURNING id").format(
                sql.Identifier(SCHEMA)
            ),
            (email,),
        )
        row = await cursor.fetchone()
        job = await client.add_job_with_tx(conn, SendWelcome(email=email))
        if fail:
            raise HTTPException(status_code=500, detail="the handler failed after enqueueing")
    return {"user": row[0] if row else None, "job": job.id, "pid": os.getpid()}


@router.get("/jobs/{job_id}")
async def job_status(job_id: int, client: Client) -> dict[str, Any]:
    """A job's kind and status."""
    info = await client.get_job(job_id)
    if info is None:
        raise HTTPException(status_code=404, detail=f"no job {job_id}")
    return {"id": info.id, "kind": info.kind, "status": info.status}


async def create_tables(pool: AsyncConnectionPool) -> None:
    """Create the app's tables (idempotent; the schema exists once pgqueue migrated)."""
    async with pool.connection() as conn:
        schema = sql.Identifier(SCHEMA)
        await conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.users (id serial PRIMARY KEY, email text)"
            ).format(schema)
        )
        await conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.welcome_log (email text, job_id bigint, "
                "pid integer, at timestamptz DEFAULT now())"
            ).format(schema)
        )


def create_app(run_workers: Mapping[str, int] | None = None) -> FastAPI:
    """Build the app; with ``run_workers``, it also runs the jobs in its own process."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The app's own lifespan, composed with pgqueue's: the pool opens first and closes
        # last; the client (and the in-process workers) live inside it, on the same pool.
        async with AsyncConnectionPool(DSN, min_size=1, max_size=4, open=False) as pool:
            queue = pgqueue_lifespan(
                pool,
                registry=registry,
                settings=settings,
                migrate=True,
                run_workers=run_workers,
                config=pgqueue.RuntimeConfig(poll_interval=0.5, shutdown_timeout=5),
            )
            async with queue(app):  # app.state.pgqueue is the client from here
                await create_tables(pool)
                app.state.pool = pool
                yield

    app = FastAPI(lifespan=lifespan)
    app.include_router(router)
    return app


app = create_app()
app_with_workers = create_app(run_workers={"default": 2})
