"""``pgqueue worker``'s observability options: --metrics-port, --health-port, --otel.

Everything here is set up before the worker starts, so that no job's end goes uncounted, and
torn down after it stopped. The optional libraries are imported only when asked for; a missing
one is a clear error naming the extra to install.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import rich_click as click

from ..errors import ConfigurationError
from ..probes import MetricsRenderer, ProbeServer, client_health

__all__ = ["Observability", "observability_options", "observability_start"]

OBSERVABILITY_PANEL = "Observability"


@dataclass(frozen=True)
class Observability:
    """What ``pgqueue worker`` was asked to expose."""

    metrics_port: int | None = None
    health_port: int | None = None
    http_host: str = "0.0.0.0"
    otel: bool = False


def observability_options(command: Any) -> Any:
    """Add the observability options to ``command`` (they arrive as keyword arguments)."""
    options = [
        click.option(
            "--metrics-port",
            type=click.IntRange(0, 65535),
            envvar="PGQUEUE_METRICS_PORT",
            show_envvar=True,
            metavar="PORT",
            help="serve Prometheus metrics at /metrics on this port, and the health probes "
            '(needs pip install "pgqueue[prometheus]")',
            panel=OBSERVABILITY_PANEL,
        ),
        click.option(
            "--health-port",
            type=click.IntRange(0, 65535),
            envvar="PGQUEUE_HEALTH_PORT",
            show_envvar=True,
            metavar="PORT",
            help="serve the health probes on this port: /livez (the worker is alive) and "
            "/readyz (connected to the database, not stopping)",
            panel=OBSERVABILITY_PANEL,
        ),
        click.option(
            "--http-host",
            default="0.0.0.0",
            show_default=True,
            envvar="PGQUEUE_HTTP_HOST",
            show_envvar=True,
            metavar="HOST",
            help="the address the metrics and health server listens on",
            panel=OBSERVABILITY_PANEL,
        ),
        click.option(
            "--otel",
            is_flag=True,
            envvar="PGQUEUE_OTEL",
            show_envvar=True,
            help="trace jobs and record metrics through OpenTelemetry's global providers (set "
            "up by your registry module or opentelemetry-instrument; needs "
            'pip install "pgqueue[otel]")',
            panel=OBSERVABILITY_PANEL,
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def observability_start(client: Any, wanted: Observability) -> Callable[[], None]:
    """Instrument ``client`` and start the servers ``wanted`` asks for; return their closer.

    Call it before ``client.start()`` (an AsyncClient's: on its event loop).
    """
    closers: list[Callable[[], None]] = []
    if wanted.otel:
        try:
            from ..otel import instrument
        except ImportError as exc:
            raise ConfigurationError(
                f'--otel needs OpenTelemetry: pip install "pgqueue[otel]" ({exc})'
            ) from None
        closers.append(instrument(client).uninstrument)
    renderer: MetricsRenderer | None = None
    if wanted.metrics_port is not None:
        renderer, close_metrics = _metrics(client)
        closers.append(close_metrics)
    health = client_health(client)
    try:
        if wanted.metrics_port is not None:
            server = ProbeServer(
                wanted.metrics_port, host=wanted.http_host, health=health, metrics=renderer
            )
            closers.append(server.close)
            _announce("metrics and health probes", server)
        if wanted.health_port is not None and wanted.health_port != wanted.metrics_port:
            server = ProbeServer(wanted.health_port, host=wanted.http_host, health=health)
            closers.append(server.close)
            _announce("health probes", server)
    except OSError as exc:
        _close_all(closers)
        raise ConfigurationError(f"{exc}: choose another port") from None
    return lambda: _close_all(closers)


def _metrics(client: Any) -> tuple[MetricsRenderer, Callable[[], None]]:
    try:
        from prometheus_client import REGISTRY
        from prometheus_client.exposition import choose_encoder

        from ..prometheus import collector
    except ImportError:
        raise ConfigurationError(
            '--metrics-port needs prometheus_client: pip install "pgqueue[prometheus]"'
        ) from None
    # the default registry: the process's own metrics and any the application's jobs define
    # are served with pgqueue's
    built = collector(client, registry=REGISTRY)

    def render(accept: str) -> tuple[bytes, str]:
        encoder, content_type = choose_encoder(accept)
        return encoder(REGISTRY), content_type

    def close() -> None:
        built.close()
        REGISTRY.unregister(built)

    return render, close


def _announce(what: str, server: ProbeServer) -> None:
    logging.getLogger("pgqueue").info(
        "serving %s on http://%s:%d",
        what,
        server.host,
        server.port,
        extra={"http_host": server.host, "http_port": server.port},
    )


def _close_all(closers: list[Callable[[], None]]) -> None:
    for close in reversed(closers):
        close()
