"""A Flask app that enqueues jobs in the request's transaction, with ``pgqueue.contrib.flask``.

The extension gives request code a sync ``pgqueue.Client`` on a psycopg pool, opened in each
server process on first use (so a pre-forking server never shares it between its workers).
``POST /signup?email=...`` inserts a user and enqueues a welcome email in one transaction; with
``&fail=1`` the view fails after enqueueing, the transaction rolls back, and neither the user nor
the job exists. ``GET /jobs/<id>`` answers a job's status. Jobs run in a separate worker::

    export PGQUEUE_DSN=postgresql://localhost/app
    flask --app examples.flask_app pgqueue migrate        # pgqueue's tables
    flask --app examples.flask_app create-tables          # the app's tables
    gunicorn --workers 2 --preload examples.flask_app:app
    flask --app examples.flask_app pgqueue worker         # the registry comes from the config
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import click
import psycopg
from flask import Flask, request
from psycopg import sql

import pgqueue
from pgqueue.contrib.flask import PgQueue

DSN = os.environ.get("PGQUEUE_DSN", "postgresql://postgres@127.0.0.1/postgres")
SCHEMA = os.environ.get("PGQUEUE_SCHEMA", "public")


@dataclass
class SendWelcome(pgqueue.Worker):
    """Pretend to send a welcome email; record it (and the worker's pid) in ``welcome_log``."""

    kind = "example.flask.send_welcome"
    email: str

    def process(self, ctx: pgqueue.JobContext) -> None:
        with psycopg.connect(DSN) as conn:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {}.welcome_log (email, job_id, pid) VALUES (%s, %s, %s)"
                ).format(sql.Identifier(SCHEMA)),
                (self.email, ctx.id, os.getpid()),
            )


registry = pgqueue.WorkerRegistry(SendWelcome)

queue = PgQueue()


def create_app() -> Flask:
    """Build the app: pgqueue's config, the extension, the views and ``flask create-tables``."""
    app = Flask(__name__)
    app.config.from_mapping(
        PGQUEUE_DSN=DSN,
        PGQUEUE_SCHEMA=SCHEMA,
        # A string, so that `flask pgqueue worker` can pass it on to the worker.
        PGQUEUE_REGISTRY="examples.flask_app:registry",
        PGQUEUE_POOL_MAX_SIZE=4,
    )
    queue.init_app(app)

    @app.post("/signup")
    def signup() -> tuple[dict[str, Any], int]:
        email = request.args.get("email", "")
        try:
            # The pooled connection's block is the request's transaction: it commits at the end
            # of the block (before the response), or rolls back if the block raises. The job is
            # inserted on the same connection, so it shares that fate.
            with queue.connection() as conn:
                row = conn.execute(
                    sql.SQL("INSERT INTO {}.users (email) VALUES (%s) RETURNING id").format(
                        sql.Identifier(SCHEMA)
                    ),
                    (email,),
                ).fetchone()
                job = queue.client.add_job_with_tx(conn, SendWelcome(email=email))
                if "fail" in request.args:
                    raise RuntimeError("the handler failed after enqueueing")
        except RuntimeError as exc:
            return {"error": str(exc)}, 500
        return {"user": row[0] if row else None, "job": job.id, "pid": os.getpid()}, 201

    @app.get("/jobs/<int:job_id>")
    def job_status(job_id: int) -> tuple[dict[str, Any], int]:
        info = queue.client.get_job(job_id)
        if info is None:
            return {"error": f"no job {job_id}"}, 404
        return {"id": info.id, "kind": info.kind, "status": info.status}, 200

    @app.get("/health")
    def health() -> dict[str, Any]:
        # Which process answered, and on which database session: each server process has a
        # pool of its own.
        with queue.connection() as conn:
            backend = conn.execute("SELECT pg_backend_pid()").fetchone()
        return {
            "pid": os.getpid(),
            "db_backend_pid": backend[0] if backend else None,
            "schema_version": queue.client.schema_version(),
        }

    @app.cli.command("create-tables")
    def create_tables() -> None:
        """Create the app's tables (run `flask pgqueue migrate` first: it creates the schema)."""
        with queue.connection() as conn:
            schema = sql.Identifier(SCHEMA)
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {}.users (id serial PRIMARY KEY, email text)"
                ).format(schema)
            )
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {}.welcome_log (email text, job_id bigint, "
                    "pid integer, at timestamptz DEFAULT now())"
                ).format(schema)
            )
        click.echo(f"tables users and welcome_log ready in schema {SCHEMA}")

    return app


app = create_app()
