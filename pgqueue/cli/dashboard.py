"""``pgqueue dashboard``: serve the web dashboard (:mod:`pgqueue.web`) with uvicorn.

The dashboard needs the ``web`` extra (Starlette, Jinja2, uvicorn), imported only when the
command runs, so the rest of the command line works without it. The command checks the database
first (a bad URL or a missing schema is one line and status 1, not a page of errors later), then
serves the app on its own asyncio client until Ctrl-C or SIGTERM, and ends with status 0. It
binds to 127.0.0.1 unless told otherwise, and says on stderr, at start, that it has no
authorization of its own (anyone who reaches the port may act, or read with ``--read-only``)
and when it listens beyond this machine.
"""

from __future__ import annotations

import asyncio
import ipaddress
import signal
import sys
from types import FrameType

import rich_click as click

from ..logs import configure_logging
from ._common import BAD_INPUT, ERROR, Target, fail, help_panels, target_options

__all__ = ["dashboard", "exposure_warnings"]

SERVER_PANEL = "Server"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def exposure_warnings(host: str, port: int, read_only: bool, hide_args: bool) -> list[str]:
    """Return the warnings ``pgqueue dashboard`` prints at start for these options."""
    where = f"http://{host}:{port}/"
    if read_only:
        can = "see every queue, worker and job" + (
            "" if hide_args else ", with its arguments and tracebacks"
        )
    else:
        can = (
            "see every job and retry, cancel or delete it, pause queues and purge them, and "
            "trigger periodic entries"
        )
    warnings = [
        f"no authorization: anyone who can reach {where} can {can}. To require a login, mount "
        "pgqueue.web.create_app(client, authorize=...) in your application (docs/dashboard.md)"
    ]
    if not _loopback(host):
        warnings.append(
            f"listening on {host}, not on this machine only: other machines can reach it, over "
            "plain HTTP (bind to 127.0.0.1 and use an SSH tunnel, or put it behind a proxy "
            "that authenticates and speaks HTTPS)"
        )
    return warnings


class _Stopped(Exception):
    """SIGINT or SIGTERM ended the server (uvicorn raises it again after shutting down)."""


def _stopped(signum: int, frame: FrameType | None) -> None:
    raise _Stopped


async def _check(target: Target) -> int | None:
    async with await target.connect_async() as client:
        return await client.schema_version()


@click.command("dashboard", short_help="serve the web dashboard")
@help_panels(SERVER_PANEL)
@click.option(
    "--host",
    default="127.0.0.1",
    metavar="HOST",
    show_default=True,
    envvar="PGQUEUE_DASHBOARD_HOST",
    show_envvar=True,
    help="address to listen on (0.0.0.0: every interface, reachable from other machines)",
    panel=SERVER_PANEL,
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    metavar="PORT",
    default=8080,
    show_default=True,
    envvar="PGQUEUE_DASHBOARD_PORT",
    show_envvar=True,
    help="port to listen on",
    panel=SERVER_PANEL,
)
@click.option(
    "--read-only",
    is_flag=True,
    help="show everything, change nothing: every action is refused, and none is shown",
)
@click.option("--hide-args", is_flag=True, help="do not show jobs' arguments and tracebacks")
@click.option(
    "--url-prefix",
    metavar="PATH",
    default="",
    help="serve the pages under this path, e.g. /pgqueue (behind a proxy that forwards the "
    "full path)",
    panel=SERVER_PANEL,
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"], case_sensitive=False),
    default="text",
    show_default=True,
    envvar="PGQUEUE_LOG_FORMAT",
    show_envvar=True,
    help="log lines (every action, with who took it) as text, or one JSON object per line",
)
@target_options
def dashboard(
    host: str,
    port: int,
    read_only: bool,
    hide_args: bool,
    url_prefix: str,
    log_format: str,
    dsn: str | None,
    driver: str | None,
    schema: str,
    prefix: str,
) -> None:
    """Serve the web dashboard: queues, jobs, periodic entries, workers, live.

    It has no login of its own: it warns at start, binds to 127.0.0.1 unless --host says
    otherwise, and --read-only refuses every action. To require a login, mount
    pgqueue.web.create_app(client, authorize=...) in your application (docs/dashboard.md).
    Needs the web extra: pip install 'pgqueue[web]'.
    """
    try:
        import uvicorn

        from ..web import create_app
    except ImportError as exc:
        fail(f"the dashboard needs the web extra: pip install 'pgqueue[web]' ({exc})", ERROR)
    try:
        target = Target.from_options(dsn, driver, schema, prefix)
    except ValueError as exc:  # InvalidName
        fail(str(exc), BAD_INPUT)
    if url_prefix and (not url_prefix.startswith("/") or url_prefix.endswith("/")):
        fail(f"--url-prefix must be a path such as /pgqueue, got {url_prefix!r}", BAD_INPUT)
    version = asyncio.run(_check(target))
    if version is None:
        fail(
            f"pgqueue's tables are not in schema {target.settings.schema!r} of this database: "
            "run `pgqueue migrate` first",
            ERROR,
        )
    configure_logging("INFO", "json" if log_format.lower() == "json" else "text")
    for warning in exposure_warnings(host, port, read_only, hide_args):
        print(f"pgqueue dashboard: warning: {warning}", file=sys.stderr)
    app = create_app(
        target.connect_async, read_only=read_only, hide_args=hide_args, prefix=url_prefix
    )
    print(
        f"pgqueue dashboard: serving {target.settings.schema}.{target.settings.prefix}* "
        f"({target.describe_driver()}) on http://{host}:{port}{url_prefix}/ "
        f"{'(read-only) ' if read_only else ''}- Ctrl-C to stop",
        file=sys.stderr,
        flush=True,
    )
    # uvicorn shuts down gracefully on SIGINT or SIGTERM, then raises the signal again: with
    # these handlers the command then ends with status 0, as `pgqueue worker` does.
    previous = {sig: signal.signal(sig, _stopped) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        # log_config=None: uvicorn's loggers go through the handler above; event streams get
        # 3 s to end at shutdown (they never end on their own).
        uvicorn.run(
            app,
            host=host,
            port=port,
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=3,
        )
    except _Stopped:
        pass
    except SystemExit as exc:  # uvicorn's, when the server could not start
        if exc.code:
            fail(
                f"cannot serve on {host}:{port} (uvicorn's error above): is the port taken? "
                "choose another --port",
                ERROR,
            )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
