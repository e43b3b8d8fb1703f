"""``pgqueue worker``: run the jobs of a registry until SIGTERM or SIGINT.

The sync runtime runs on :class:`~pgqueue.Client`; the asyncio runtime (``--asyncio``, and always
with an asyncio-only driver) on :class:`~pgqueue.AsyncClient`, on an event loop of its own. Both
stop gracefully on the first signal and at once on the second, and neither lets a job that
ignores its cancellation hold up the exit. With ``--until-empty`` they also stop, gracefully,
once no job of their queues is due and none runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import logging
import os
import signal
import sys
from collections.abc import Coroutine
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol

import rich_click as click

from .. import ConfigurationError, RuntimeConfig, WorkerRegistry
from ..logs import TEXT_FORMAT, LogFormat, configure_logging
from ._common import PassThrough, Target, help_panels, target_options
from ._observe import OBSERVABILITY_PANEL, Observability, observability_options, observability_start

__all__ = ["WorkerOptions", "load_registry", "parse_queues", "run_worker", "worker"]

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
RUNTIME_PANEL = "Runtime (seconds)"

_DEFAULTS = RuntimeConfig()


def _seconds(ctx: click.Context, param: click.Parameter, value: str | float) -> float:
    # The message of the argparse command this replaced, which scripts and tests may match.
    try:
        return float(value)
    except ValueError:
        raise click.BadParameter(f"invalid float value: {value!r}") from None


def _log_level(ctx: click.Context, param: click.Parameter, value: str) -> str:
    level = value.upper()
    if level not in LOG_LEVELS:
        raise click.BadParameter(f"invalid choice: {value!r} (choose from {', '.join(LOG_LEVELS)})")
    return level


def _complete_log_level(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    return [level for level in LOG_LEVELS if level.startswith(incomplete.upper())]


# The RuntimeConfig settings the command takes (the others keep their defaults), and their help.
_RUNTIME_HELP = {
    "poll_interval": "how often an idle queue checks for due jobs without a notification",
    "heartbeat_interval": "how often this process proves it is alive",
    "rescue_after": "a process silent this long is presumed dead; its jobs are rescued",
    "leader_interval": "how often the leader runs its duties",
    "shutdown_timeout": "how long running jobs may finish after the first signal",
    "listener_reconnect_max": "cap of the backoff between LISTEN reconnect attempts",
    "claim_retry_max": "cap of the backoff between attempts to claim jobs while the database fails",
    "outcome_retry_max": (
        "cap of the backoff between attempts to record how jobs ended while the database fails"
    ),
}


def _runtime_options(command: Any) -> Any:
    # One option per setting, declared from the table above: --poll-interval,
    # $PGQUEUE_POLL_INTERVAL, RuntimeConfig's default, ... (listed in the table's order).
    for name in reversed(_RUNTIME_HELP):
        command = click.option(
            "--" + name.replace("_", "-"),
            name,
            type=str,  # not float: _seconds converts, with its own message
            callback=_seconds,
            default=getattr(_DEFAULTS, name),
            show_default=True,
            envvar="PGQUEUE_" + name.upper(),
            show_envvar=True,
            metavar="SECONDS",
            help=f"{_RUNTIME_HELP[name]} (RuntimeConfig.{name})",
            panel=RUNTIME_PANEL,
        )(command)
    return command


@dataclass(frozen=True)
class WorkerOptions:
    """What ``pgqueue worker`` was asked to run, as parsed from its options and environment."""

    target: Target
    registry: str
    queues: str
    migrate: bool
    use_asyncio: bool
    log_level: str
    config: RuntimeConfig
    log_format: LogFormat = "text"
    observe: Observability = dataclasses.field(default_factory=Observability)
    until_empty: bool = False


@click.command("worker", short_help="run jobs until SIGTERM/SIGINT (or until none is due)")
@help_panels(OBSERVABILITY_PANEL, RUNTIME_PANEL)
@click.argument(
    "registry",
    metavar="MODULE:REGISTRY",
    required=True,
    help="import path of a WorkerRegistry, e.g. myapp.jobs:registry",
)
@click.option(
    "--queues",
    metavar="QUEUES",
    default="default=10",
    show_default=True,
    envvar="PGQUEUE_QUEUES",
    show_envvar=True,
    help="queues and their concurrency, e.g. default=10,emails=2",
)
@click.option(
    "--migrate",
    is_flag=True,
    envvar="PGQUEUE_MIGRATE",
    show_envvar=True,
    help="apply pending migrations before starting",
)
@click.option(
    "--asyncio",
    "use_asyncio",
    is_flag=True,
    envvar="PGQUEUE_ASYNCIO",
    show_envvar=True,
    help="run the asyncio runtime (async jobs on the event loop, sync ones on threads); "
    "always on with an asyncio-only driver",
)
@click.option(
    "--until-empty",
    is_flag=True,
    envvar="PGQUEUE_UNTIL_EMPTY",
    show_envvar=True,
    help="exit (status 0) once no job of the queues is due and none runs here, every outcome "
    "written; jobs scheduled for later (retries in their backoff too) are not waited for",
)
@click.option(
    "--periodic/--no-periodic",
    default=_DEFAULTS.periodic,
    show_default=True,
    envvar="PGQUEUE_PERIODIC",
    show_envvar=True,
    help="evaluate the registry's periodic entries (RuntimeConfig.periodic); any number of "
    "workers may, each tick is still one job",
)
@click.option(
    "--log-level",
    metavar="LEVEL",
    callback=_log_level,
    shell_complete=_complete_log_level,
    default="INFO",
    show_default=True,
    envvar="PGQUEUE_LOG_LEVEL",
    show_envvar=True,
    help=f"logging level: {', '.join(LOG_LEVELS)}",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"], case_sensitive=False),
    default="text",
    show_default=True,
    envvar="PGQUEUE_LOG_FORMAT",
    show_envvar=True,
    help="log lines as text, or one JSON object per line with the job's fields (job_id, "
    "job_kind, job_queue, job_attempt, duration, outcome, error, traceback...)",
)
@click.option(
    "--pgbouncer",
    is_flag=True,
    default=None,
    envvar="PGQUEUE_PGBOUNCER",
    show_envvar=True,
    help="the URL leads to a transaction pooler (PgBouncer pool_mode=transaction): prepare no "
    "statements; without --listen-dsn, also --poll-only",
)
@click.option(
    "--listen-dsn",
    metavar="URL",
    envvar="PGQUEUE_LISTEN_DSN",
    show_envvar=True,
    help="a URL straight to PostgreSQL for the LISTEN session and the leader's lock (around "
    "a transaction pooler)",
)
@click.option(
    "--poll-only",
    is_flag=True,
    default=None,
    envvar="PGQUEUE_POLL_ONLY",
    show_envvar=True,
    help="never LISTEN (poll every --poll-interval) and elect the leader by a lease in the "
    "instances table, not a session lock",
)
@observability_options
@target_options
@_runtime_options
@click.pass_context
def worker(
    ctx: click.Context,
    /,
    registry: str,
    queues: str,
    migrate: bool,
    use_asyncio: bool,
    until_empty: bool,
    periodic: bool,
    log_level: str,
    log_format: str,
    metrics_port: int | None,
    health_port: int | None,
    http_host: str,
    otel: bool,
    pgbouncer: bool | None,
    listen_dsn: str | None,
    poll_only: bool | None,
    dsn: str | None,
    driver: str | None,
    schema: str,
    prefix: str,
    **seconds: Any,
) -> None:
    """Run the jobs of a registry until SIGTERM or SIGINT.

    The first signal stops gracefully: running jobs get --shutdown-timeout seconds.

    A second signal stops at once, handing running jobs back without charging an attempt.

    With --until-empty it also stops, and exits with 0, as soon as no job of its queues is due
    and none runs here (a batch run, a test).
    """
    options = WorkerOptions(
        target=dataclasses.replace(
            Target.from_options(dsn, driver, schema, prefix),
            pgbouncer=pgbouncer,
            listen_dsn=listen_dsn or None,
            poll_only=poll_only,
        ),
        registry=registry,
        queues=queues,
        migrate=migrate,
        use_asyncio=use_asyncio,
        log_level=log_level,
        log_format="json" if log_format.lower() == "json" else "text",
        observe=Observability(metrics_port, health_port, http_host, otel),
        until_empty=until_empty,
        # seconds: one value per _RUNTIME_HELP entry
        config=dataclasses.replace(_DEFAULTS, periodic=periodic, **seconds),
    )
    try:
        code = run_worker(options)
    except (KeyboardInterrupt, SystemExit) as exc:
        # a job's, or Ctrl-C before the handlers are in: it ends the process, uncaught
        raise PassThrough(exc) from None
    if code:
        ctx.exit(code)


def parse_queues(text: str) -> dict[str, int]:
    """Parse ``default=10,emails=2`` into ``{"default": 10, "emails": 2}``."""
    queues: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, count = part.partition("=")
        try:
            queues[name.strip()] = int(count) if sep else 1
        except ValueError:
            raise ConfigurationError(
                f"bad --queues entry {part!r}: write name=concurrency, e.g. default=10"
            ) from None
    if not queues:
        raise ConfigurationError("--queues is empty: give at least one, e.g. default=10")
    return queues


def load_registry(path: str) -> WorkerRegistry:
    """Import ``module:attribute`` and return it if it is a WorkerRegistry."""
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError(f"registry {path!r}: write it as module:attribute")
    # Like other runners, look in the current directory first.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import {module_name!r}: {exc}") from exc
    found = sorted(k for k, v in vars(module).items() if isinstance(v, WorkerRegistry))
    hint = f" (its WorkerRegistry objects: {', '.join(found)})" if found else ""
    if not hasattr(module, attribute):
        raise ConfigurationError(
            f"module {module_name!r} has no attribute {attribute!r}{hint}: "
            "write the registry as module:attribute"
        )
    registry = getattr(module, attribute)
    if not isinstance(registry, WorkerRegistry):
        raise ConfigurationError(
            f"{path} is a {type(registry).__name__}, not a pgqueue.WorkerRegistry{hint}"
        )
    return registry


def run_worker(options: WorkerOptions) -> int:
    """Run the worker ``options`` describe until it is stopped; return the exit status."""
    if options.log_format == "json":
        configure_logging(options.log_level, "json")
    else:
        logging.basicConfig(level=options.log_level, format=TEXT_FORMAT)
    registry = load_registry(options.registry)
    queues = parse_queues(options.queues)
    if options.use_asyncio or options.target.asyncio_only:
        return _run_asyncio(_run_worker_async(options, registry, queues))
    # The handlers go in first: a signal while connecting or starting is kept for the runtime.
    stopper = _Stopper()
    signal.signal(signal.SIGTERM, stopper.on_signal)
    signal.signal(signal.SIGINT, stopper.on_signal)
    with options.target.connect(registry) as c:
        if options.migrate:
            c.migrate()
        close_observability = observability_start(c, options.observe)
        try:
            c.start(queues, config=options.config, until_empty=options.until_empty)
            _log_started(options, queues, registry, "sync", c.poll_only)
            runtime = c.runtime
            assert runtime is not None
            stopper.attach(runtime)
            while not runtime.wait_stopping(0.5):
                pass
            c.stop(0.0 if stopper.signals > 1 or runtime.fatal else None)
        finally:
            close_observability()
    if runtime.fatal is not None:
        raise runtime.fatal  # a job's SystemExit or KeyboardInterrupt ends the command
    _log_ran(options, runtime.runs_recorded, stopper.signals)
    if stopper.signals > 1 or runtime.stuck_jobs:
        # Job threads still running (stuck, or cut off by the second signal) must not hold up
        # the exit: a thread of a job's own (asyncio.to_thread, a pool) would be joined.
        _exit_now(0, runtime.stuck_jobs)
    return 0


def _log_started(
    options: WorkerOptions,
    queues: dict[str, int],
    registry: WorkerRegistry,
    runtime: str,
    poll_only: bool,
) -> None:
    settings = options.target.settings
    logging.getLogger("pgqueue").info(
        "worker started (pid %d): driver %s, %s runtime, schema %r, prefix %r, queues %s; "
        "registry %s with %d kind(s)",
        os.getpid(),
        options.target.describe_driver(),
        runtime,
        settings.schema,
        settings.prefix,
        ",".join(f"{name}={count}" for name, count in queues.items()),
        options.registry,
        len(registry.kinds()),
        extra={
            "pid": os.getpid(),
            "driver": options.target.describe_driver(),
            "runtime": runtime,
            "schema": settings.schema,
            "prefix": settings.prefix,
            "queues": queues,
            "registry": options.registry,
        },
    )
    if poll_only:  # new jobs then start up to --poll-interval later: say why
        logging.getLogger("pgqueue").info(
            "polling only: no LISTEN (queues checked every %gs), the leader elected by a lease "
            "(--pgbouncer without --listen-dsn, or --poll-only)",
            options.config.poll_interval,
        )
    # which process runs the schedules is what an operator asks first when a tick is missing
    names = ", ".join(entry.name for entry in registry.periodic)
    if names and options.config.periodic:
        logging.getLogger("pgqueue").info("periodic entries evaluated here: %s", names)
    elif names:
        logging.getLogger("pgqueue").info(
            "periodic entries not evaluated here (--no-periodic): %s", names
        )


def _log_ran(options: WorkerOptions, runs: int, signals: int) -> None:
    if options.until_empty and not signals:
        logging.getLogger("pgqueue").info(
            "worker done (--until-empty): %d job run(s) recorded", runs, extra={"runs": runs}
        )


class _Stoppable(Protocol):
    """What the stopper needs of a runtime, sync or asyncio: to be told to stop."""

    def request_stop(self, *, immediate: bool = False) -> None: ...


class _Stopper:
    """First SIGTERM/SIGINT: stop gracefully; a second one: stop now.

    Installed before the runtime starts: a signal that comes first is passed on at ``attach``.
    """

    def __init__(self) -> None:
        self.runtime: _Stoppable | None = None
        self.signals = 0

    def attach(self, runtime: _Stoppable) -> None:
        self.runtime = runtime
        if self.signals:
            runtime.request_stop(immediate=self.signals > 1)

    def on_signal(self, signum: int, frame: FrameType | None = None) -> None:
        self.signals += 1
        name = signal.Signals(signum).name
        if self.signals == 1:
            logging.getLogger("pgqueue").info("%s: stopping gracefully", name)
        else:
            logging.getLogger("pgqueue").warning("%s again: stopping now", name)
        if self.runtime is not None:
            self.runtime.request_stop(immediate=self.signals > 1)


async def _run_worker_async(
    options: WorkerOptions, registry: WorkerRegistry, queues: dict[str, int]
) -> tuple[int, bool]:
    # The handlers go in first: a signal while connecting or starting is kept for the runtime.
    stopper = _Stopper()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopper.on_signal, sig)
    client = await options.target.connect_async(registry)
    async with client as c:
        if options.migrate:
            await c.migrate()
        close_observability = observability_start(c, options.observe)
        try:
            await c.start(queues, config=options.config, until_empty=options.until_empty)
            _log_started(options, queues, registry, "asyncio", c.poll_only)
            runtime = c.runtime
            assert runtime is not None
            stopper.attach(runtime)
            while not await runtime.wait_stopping(0.5):
                pass
            await c.stop(0.0 if stopper.signals > 1 or runtime.fatal else None)
        finally:
            close_observability()
    if runtime.fatal is not None:
        raise runtime.fatal  # a job's SystemExit or KeyboardInterrupt ends the command
    _log_ran(options, runtime.runs_recorded, stopper.signals)
    return 0, stopper.signals > 1


# After an asyncio worker stopped, how long job tasks still there (a coroutine that swallows
# its cancellation) get to end before the command exits without them.
_EXIT_GRACE = 1.0


def _run_asyncio(main: Coroutine[Any, Any, tuple[int, bool]]) -> int:
    """``asyncio.run(main)``, except that job tasks left after a stop cannot hold up the exit.

    ``main`` returns the exit status and whether the stop was immediate (a second signal).
    ``asyncio.run`` cancels the tasks left at the end and waits for them, for ever if a
    coroutine job swallows its cancellation: then not even a second SIGTERM would end the
    process. Here leftover tasks get ``_EXIT_GRACE``, then the process exits without them;
    after an immediate stop it exits at once, whatever job threads still run.
    """
    loop = asyncio.new_event_loop()
    try:
        code, immediate = loop.run_until_complete(main)
        leftover = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in leftover:
            task.cancel()
        if leftover:
            loop.run_until_complete(asyncio.wait(leftover, timeout=_EXIT_GRACE))
        stuck = sum(not task.done() for task in leftover)
        if stuck or immediate:
            _exit_now(code, stuck)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()
    return code


def _exit_now(code: int, stuck: int) -> None:
    """Exit the process now, without waiting for job threads or tasks that are still there."""
    if stuck:
        logging.getLogger("pgqueue").warning(
            "exiting with %d job run(s) still going (they ignore cancellation); their jobs "
            "were recorded or handed back",
            stuck,
        )
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
