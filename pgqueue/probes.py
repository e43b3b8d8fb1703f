"""A small HTTP server for a worker's health probes and, optionally, its ``/metrics``.

``pgqueue worker --health-port`` and ``--metrics-port`` start one; so can an application that
runs a worker in its own process (``ProbeServer(port, health=client_health(client))``). It runs
in a daemon thread, on the standard library's ``http.server``: probes need no dependency.

- ``GET /livez`` (also ``/healthz``): 200 while the worker is alive, 503 otherwise;
- ``GET /readyz``: 200 while it is ready (connected to the database, not stopping), 503
  otherwise;
- ``GET /metrics``: the Prometheus exposition, when the server was given ``metrics``.

The probes' body is the JSON of :class:`~pgqueue.runtime_state.WorkerHealth` (why a probe
fails). See docs/observability.md for what alive and ready mean.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .runtime_state import WorkerHealth

__all__ = ["MetricsRenderer", "ProbeServer", "client_health"]

logger = logging.getLogger("pgqueue")

MetricsRenderer = Callable[[str], tuple[bytes, str]]
"""Renders the metrics for a request's ``Accept`` header: ``(body, content type)``."""

HealthSource = Callable[[], WorkerHealth | None]


def client_health(client: Any) -> HealthSource:
    """Return a health source for ``client`` (a Client or AsyncClient): its runtime's health.

    Before the worker starts (or after it stopped) there is no runtime: every probe fails.
    """

    def health() -> WorkerHealth | None:
        runtime = client.runtime
        return None if runtime is None else runtime.health()

    return health


class ProbeServer:
    """Serves ``/livez``, ``/readyz`` and (given ``metrics``) ``/metrics`` on ``host:port``.

    ``port`` 0 picks a free port (read it back from :attr:`port`). Starts at once, in a
    daemon thread; :meth:`close` stops it.
    """

    def __init__(
        self,
        port: int,
        *,
        host: str = "0.0.0.0",
        health: HealthSource | None = None,
        metrics: MetricsRenderer | None = None,
    ) -> None:
        handler = _handler_class(health, metrics)
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot listen on {host}:{port} for probes: {exc}") from exc
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self.host = host
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"pgqueue-http-{self.port}", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def _handler_class(
    health: HealthSource | None, metrics: MetricsRenderer | None
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "pgqueue"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path in ("/livez", "/healthz", "/readyz") and health is not None:
                self._probe(path == "/readyz")
            elif path == "/metrics" and metrics is not None:
                try:
                    body, content_type = metrics(self.headers.get("Accept", ""))
                except Exception:
                    logger.exception("metrics: rendering /metrics failed")
                    self._send(500, b"rendering the metrics failed: see the worker's log\n")
                    return
                self._send(200, body, content_type)
            else:
                self._send(404, b"not found: try /livez, /readyz or /metrics\n")

        def _probe(self, readiness: bool) -> None:
            assert health is not None
            try:
                state = health()
            except Exception as exc:  # a probe must answer, whatever went wrong
                self._send(503, json.dumps({"error": str(exc)}).encode(), "application/json")
                return
            if state is None:
                body: dict[str, Any] = {"alive": False, "ready": False, "error": "not running"}
                ok = False
            else:
                body = state.as_dict()
                ok = state.ready if readiness else state.alive
            self._send(200 if ok else 503, json.dumps(body).encode(), "application/json")

        def _send(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            # every probe and scrape would be a line: at DEBUG only
            logger.debug("http %s: " + format, self.address_string(), *args)

    return Handler
