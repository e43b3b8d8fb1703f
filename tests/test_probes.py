"""Health probes (issue 16): a worker process's /livez and /readyz, while its database is down.

The worker reaches PostgreSQL through a TCP proxy (tests/faults/proxy.py); closing the proxy is
the database going away for that worker (connections cut, new ones refused), opening it again
on the same port brings it back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

import pgqueue
from tests._sync.helpers import wait_until
from tests.faults.proxy import Proxy
from tests.test_cli_runtime import clean_env
from tests.test_prometheus import get, served_port, start_worker, stop

pytestmark = pytest.mark.timeout(180)


def through(url: str, port: int) -> str:
    """``url`` with its host and port replaced by the proxy's."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    user = f"{netloc[0]}@" if len(netloc) == 2 else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{port}"))


def probe(port: int, path: str) -> tuple[int, dict[str, Any]]:
    status, body = get(f"http://127.0.0.1:{port}{path}")
    return status, json.loads(body)


def test_probes_while_the_database_is_down_and_back(
    database_url: str, schema: str, tmp_path: Path
) -> None:
    with pgqueue.Client.connect(database_url, settings=pgqueue.Settings(schema=schema)) as c:
        c.migrate()
    proxy = Proxy()
    env = {
        **clean_env(),
        "PGQUEUE_DSN": through(database_url, proxy.port),
        "PGQUEUE_SCHEMA": schema,
    }
    log = tmp_path / "worker.log"
    fast = ("--heartbeat-interval", "0.5", "--rescue-after", "5", "--http-host", "127.0.0.1")
    proc = start_worker(env, log, "--health-port", "0", *fast, registry="tests.jobs:registry")
    try:
        port = served_port(log, "health probes")
        wait_until(lambda: probe(port, "/readyz")[0] == 200, 30, what="ready")
        status, body = probe(port, "/livez")
        assert status == 200
        assert body["alive"]
        assert body["database_error"] is None

        proxy.close()  # the database is gone for this worker
        status, body = wait_until(
            lambda: (r := probe(port, "/readyz"))[0] == 503 and r, 30, what="not ready"
        )
        assert not body["ready"]
        assert body["database_error"], body
        # still alive: restarting the worker would not bring the database back
        status, body = probe(port, "/livez")
        assert status == 200, body
        status, body = wait_until(
            lambda: (r := probe(port, "/livez"))[1]["database_age"] > 4 and r,
            30,
            what="the database unreachable for a while",
        )
        assert status == 200, body
        assert probe(port, "/readyz")[0] == 503

        proxy = Proxy(port=proxy.port)  # the database is back
        wait_until(lambda: probe(port, "/readyz")[0] == 200, 60, what="ready again")
        assert probe(port, "/livez")[0] == 200
        stop(proc, log)
    finally:
        if proc.poll() is None:
            proc.kill()
        proxy.close()


def test_probes_before_the_worker_runs_and_while_it_stops(
    database_url: str, settings: pgqueue.Settings
) -> None:
    from pgqueue.probes import ProbeServer, client_health
    from tests import jobs

    with pgqueue.Client.connect(database_url, settings=settings, registry=jobs.registry) as c:
        c.migrate()
        server = ProbeServer(0, host="127.0.0.1", health=client_health(c))
        try:
            status, body = probe(server.port, "/livez")
            assert (status, body["error"]) == (503, "not running")
            c.start({"default": 1})
            assert probe(server.port, "/readyz")[0] == 200
            assert probe(server.port, "/healthz")[0] == 200
            runtime = c.runtime
            assert runtime is not None
            runtime.request_stop()
            status, body = probe(server.port, "/readyz")
            assert (status, body["stopping"]) == (503, True)
            assert probe(server.port, "/livez")[0] == 200  # finishing its jobs: alive
            assert get(f"http://127.0.0.1:{server.port}/metrics")[0] == 404  # none given
            c.stop()
            assert probe(server.port, "/livez")[0] == 503
        finally:
            server.close()
