"""Scenario 1: a plain WSGI app that enqueues jobs in the request's own transaction.

The app keeps a ``psycopg_pool.ConnectionPool``, opened lazily on the first request, so that
under a pre-forking server (gunicorn, uWSGI) every worker process opens its own pool *after*
the fork. ``POST /signup?email=...`` inserts a user and enqueues a welcome email in one
transaction; with ``&fail=1`` the handler fails after enqueueing, the transaction rolls back,
and neither the user nor the job exists. Jobs run in a separate worker process::

    PGQUEUE_DSN=postgresql://localhost/app python -m examples.wsgi_app --port 8000
    PGQUEUE_DSN=postgresql://localhost/app pgqueue worker examples.wsgi_app:registry
"""

from __future__ import annotations

import argparse
import json
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

import pgqueue

DSN = os.environ.get("PGQUEUE_DSN", "postgresql://postgres@127.0.0.1/postgres")
SCHEMA = os.environ.get("PGQUEUE_SCHEMA", "public")
settings = pgqueue.Settings(schema=SCHEMA)


@dataclass
class SendWelcome(pgqueue.Worker):
    """Pretend to send a welcome email; record it in ``welcome_log``."""

    kind = "example.send_welcome"
    email: str

    def process(self, ctx: pgqueue.JobContext) -> None:
        with psycopg.connect(DSN) as conn:
            conn.execute(
                sql.SQL("INSERT INTO {}.welcome_log (email, job_id) VALUES (%s, %s)").format(
                    sql.Identifier(SCHEMA)
                ),
                (self.email, ctx.id),
            )


registry = pgqueue.WorkerRegistry(SendWelcome)

_lock = threading.Lock()
_state: dict[str, Any] = {}


def _pool_and_client() -> tuple[ConnectionPool, pgqueue.Client]:
    # Opened on first use, in the process that serves requests (after any fork).
    with _lock:
        if not _state:
            pool = ConnectionPool(DSN, min_size=1, max_size=4, open=True)
            _state["pool"] = pool
            _state["client"] = pgqueue.Client.connect(pool, registry=registry, settings=settings)
        return _state["pool"], _state["client"]


StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    """The WSGI application."""
    query = parse_qs(environ.get("QUERY_STRING", ""))
    if environ["PATH_INFO"] != "/signup" or environ["REQUEST_METHOD"] != "POST":
        return _reply(start_response, "404 Not Found", {"error": "POST /signup?email=..."})
    email = query.get("email", [""])[0]
    pool, client = _pool_and_client()
    try:
        # The pool's connection block is the request's transaction: it commits at the end,
        # or rolls back if the handler raises. The job shares its fate.
        with pool.connection() as conn:
            user_id = conn.execute(
                sql.SQL("INSERT INTO {}.users (email) VALUES (%s) RETURNING id").format(
                    sql.Identifier(SCHEMA)
                ),
                (email,),
            ).fetchone()
            job = client.add_job_with_tx(conn, SendWelcome(email=email))
            if "fail" in query:
                raise RuntimeError("the handler failed after enqueueing")
    except RuntimeError as exc:
        return _reply(start_response, "500 Internal Server Error", {"error": str(exc)})
    return _reply(
        start_response, "201 Created", {"user": user_id[0] if user_id else None, "job": job.id}
    )


def _reply(start_response: StartResponse, status: str, body: dict[str, Any]) -> list[bytes]:
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json")])
    return [data]


def setup() -> None:
    """Create the app's tables and pgqueue's (idempotent)."""
    with psycopg.connect(DSN, autocommit=True) as conn:
        schema = sql.Identifier(SCHEMA)
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.users (id serial PRIMARY KEY, email text)"
            ).format(schema)
        )
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.welcome_log (email text, job_id bigint, "
                "at timestamptz DEFAULT now())"
            ).format(schema)
        )
    with pgqueue.Client.connect(DSN, settings=settings) as client:
        client.migrate()


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    """Set up the tables and serve the app."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    args = parser.parse_args()
    setup()
    server = make_server("127.0.0.1", args.port, app, _Server, _QuietHandler)
    print(f"listening on http://127.0.0.1:{server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
