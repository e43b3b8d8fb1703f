"""The ``pgqueue`` command line: ``sql``, ``migrate``, ``worker`` and ``demo``.

Every option can also be set from the environment: ``PGQUEUE_DSN`` (or ``DATABASE_URL``),
``PGQUEUE_DRIVER``, ``PGQUEUE_SCHEMA``, ``PGQUEUE_PREFIX``, ``PGQUEUE_QUEUES``,
``PGQUEUE_POLL_INTERVAL`` and the other ``--option`` names in upper case.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import signal
import sys
from collections.abc import Coroutine, Sequence
from types import FrameType
from typing import Any

from ._async.client import AsyncClient
from ._async.runtime import AsyncRuntime
from ._sync.client import Client
from ._sync.runtime import Runtime
from .adapter_registry import asyncio_only, describe_driver
from .errors import ConfigurationError, PgQueueError
from .jobs import WorkerRegistry
from .queries import migrations_script
from .runtime_config import RuntimeConfig
from .settings import Settings

__all__ = ["main"]


def _settings(args: argparse.Namespace) -> Settings:
    return Settings(schema=args.schema, prefix=args.prefix)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pgqueue", description="PostgreSQL-backed background jobs for Python."
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--schema",
        default=os.environ.get("PGQUEUE_SCHEMA", "public"),
        help="schema of pgqueue's tables [$PGQUEUE_SCHEMA, default: public]",
    )
    common.add_argument(
        "--prefix",
        default=os.environ.get("PGQUEUE_PREFIX", "pgqueue_"),
        help="prefix of pgqueue's table names [$PGQUEUE_PREFIX, default: pgqueue_]",
    )
    connect = argparse.ArgumentParser(add_help=False)
    connect.add_argument(
        "--dsn",
        default=os.environ.get("PGQUEUE_DSN") or os.environ.get("DATABASE_URL"),
        help="database URL [$PGQUEUE_DSN or $DATABASE_URL]",
    )
    connect.add_argument(
        "--driver",
        default=None,
        # Not defaulting to $PGQUEUE_DRIVER: resolve_driver_name reads it after the URL
        # scheme, so the command follows the same rule as connect().
        help="database driver: psycopg, asyncpg or sqlalchemy; asyncpg runs the command on "
        "the asyncio client [default: the driver a postgresql+<driver>:// URL names, "
        "else $PGQUEUE_DRIVER, else psycopg]",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sql = sub.add_parser(
        "sql",
        parents=[common],
        help="print the SQL that creates pgqueue's schema, without connecting",
        description="Print the migrations as one SQL script (for Alembic, Flyway or psql).",
    )
    sql.add_argument(
        "--from-version",
        type=int,
        default=0,
        metavar="N",
        help="only the migrations after version N (default: all)",
    )
    sql.add_argument(
        "--no-transaction",
        action="store_true",
        help="leave out BEGIN/COMMIT (for tools that wrap migrations in a transaction)",
    )
    sub.add_parser(
        "migrate",
        parents=[common, connect],
        help="create or upgrade pgqueue's tables",
        description="Apply pending migrations; safe to run from several processes at once.",
    )
    worker = sub.add_parser(
        "worker",
        parents=[common, connect],
        help="run jobs until SIGTERM/SIGINT",
        description=(
            "Run the jobs of a registry. SIGTERM or SIGINT stops gracefully (running jobs get "
            "--shutdown-timeout seconds); a second signal stops at once, handing running jobs "
            "back without charging an attempt."
        ),
    )
    worker.add_argument(
        "registry", metavar="MODULE:REGISTRY", help="import path of a WorkerRegistry"
    )
    worker.add_argument(
        "--queues",
        default=os.environ.get("PGQUEUE_QUEUES", "default=10"),
        help="queues and their concurrency, e.g. default=10,emails=2 "
        "[$PGQUEUE_QUEUES, default: default=10]",
    )
    worker.add_argument(
        "--migrate",
        action="store_true",
        default=_env_flag("PGQUEUE_MIGRATE"),
        help="apply pending migrations before starting [$PGQUEUE_MIGRATE=1]",
    )
    worker.add_argument(
        "--asyncio",
        action="store_true",
        default=_env_flag("PGQUEUE_ASYNCIO"),
        help="run the asyncio runtime (async jobs on the event loop, sync ones on threads); "
        "always on with asyncpg, directly or in a postgresql+asyncpg:// SQLAlchemy URL "
        "[$PGQUEUE_ASYNCIO=1]",
    )
    worker.add_argument(
        "--log-level",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        default=os.environ.get("PGQUEUE_LOG_LEVEL", "INFO"),
        help="logging level [$PGQUEUE_LOG_LEVEL, default: INFO]",
    )
    defaults = RuntimeConfig()
    for name in _RUNTIME_OPTIONS:
        flag = "--" + name.replace("_", "-")
        env = "PGQUEUE_" + name.upper()
        worker.add_argument(
            flag,
            type=float,
            # a string default goes through type= too, so a bad $VAR is a usage error
            default=os.environ.get(env, str(getattr(defaults, name))),
            help=f"seconds [${env}, default: {getattr(defaults, name):g}]",
        )
    demo = sub.add_parser(
        "demo",
        parents=[connect],
        help="run a live demo: real jobs on a real (or throwaway) PostgreSQL",
        description=(
            "Enqueue a few hundred jobs of several kinds and run them, with live progress. "
            "Without --dsn/$PGQUEUE_DSN/$DATABASE_URL it starts a throwaway PostgreSQL "
            "(pip install 'pgqueue[demo]')."
        ),
    )
    demo.add_argument("--jobs", type=int, default=300, help="how many jobs (default: 300)")
    return parser


_RUNTIME_OPTIONS = (
    "poll_interval",
    "heartbeat_interval",
    "rescue_after",
    "leader_interval",
    "shutdown_timeout",
    "listener_reconnect_max",
)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


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


def _run_worker(args: argparse.Namespace, settings: Settings) -> int:
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s",
    )
    registry = load_registry(args.registry)
    queues = parse_queues(args.queues)
    config = RuntimeConfig(**{name: getattr(args, name) for name in _RUNTIME_OPTIONS})
    if args.asyncio or asyncio_only(_url(args), args.driver):
        return _run_asyncio(_run_worker_async(args, settings, registry, queues, config))
    # The handlers go in first: a signal while connecting or starting is kept for the runtime.
    stopper = _Stopper()
    signal.signal(signal.SIGTERM, stopper.on_signal)
    signal.signal(signal.SIGINT, stopper.on_signal)
    with Client.connect(args.dsn, driver=args.driver, registry=registry, settings=settings) as c:
        if args.migrate:
            c.migrate()
        c.start(queues, config=config)
        _log_started(args, settings, queues, registry, "sync")
        runtime = c.runtime
        assert runtime is not None
        stopper.attach(runtime)
        while not runtime.wait_stopping(0.5):
            pass
        c.stop(0.0 if stopper.signals > 1 or runtime.fatal else None)
    if runtime.fatal is not None:
        raise runtime.fatal  # a job's SystemExit or KeyboardInterrupt ends the command
    if stopper.signals > 1 or runtime.stuck_jobs:
        # Job threads still running (stuck, or cut off by the second signal) must not hold up
        # the exit: a thread of a job's own (asyncio.to_thread, a pool) would be joined.
        _exit_now(0, runtime.stuck_jobs)
    return 0


def _url(args: argparse.Namespace) -> str | None:
    # what connect() falls back to without --dsn
    url: str | None = args.dsn or os.environ.get("PGQUEUE_DSN") or os.environ.get("DATABASE_URL")
    return url


def _log_started(
    args: argparse.Namespace,
    settings: Settings,
    queues: dict[str, int],
    registry: WorkerRegistry,
    runtime: str,
) -> None:
    logging.getLogger("pgqueue").info(
        "worker started (pid %d): driver %s, %s runtime, schema %r, prefix %r, queues %s; "
        "registry %s with %d kind(s)",
        os.getpid(),
        describe_driver(_url(args), args.driver),
        runtime,
        settings.schema,
        settings.prefix,
        ",".join(f"{name}={count}" for name, count in queues.items()),
        args.registry,
        len(registry.kinds()),
    )


class _Stopper:
    """First SIGTERM/SIGINT: stop gracefully; a second one: stop now.

    Installed before the runtime starts: a signal that comes first is passed on at ``attach``.
    """

    def __init__(self) -> None:
        self.runtime: Runtime | AsyncRuntime | None = None
        self.signals = 0

    def attach(self, runtime: Runtime | AsyncRuntime) -> None:
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
    args: argparse.Namespace,
    settings: Settings,
    registry: WorkerRegistry,
    queues: dict[str, int],
    config: RuntimeConfig,
) -> tuple[int, bool]:
    # The handlers go in first: a signal while connecting or starting is kept for the runtime.
    stopper = _Stopper()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopper.on_signal, sig)
    client = await AsyncClient.connect(
        args.dsn, driver=args.driver, registry=registry, settings=settings
    )
    async with client as c:
        if args.migrate:
            await c.migrate()
        await c.start(queues, config=config)
        _log_started(args, settings, queues, registry, "asyncio")
        runtime = c.runtime
        assert runtime is not None
        stopper.attach(runtime)
        while not await runtime.wait_stopping(0.5):
            pass
        await c.stop(0.0 if stopper.signals > 1 or runtime.fatal else None)
    if runtime.fatal is not None:
        raise runtime.fatal  # a job's SystemExit or KeyboardInterrupt ends the command
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


async def _migrate_async(
    args: argparse.Namespace, settings: Settings
) -> tuple[list[int], int | None]:
    async with await AsyncClient.connect(args.dsn, driver=args.driver, settings=settings) as c:
        return await c.migrate(), await c.schema_version()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            from .demo import run_demo

            return run_demo(dsn=args.dsn, driver=args.driver, jobs=args.jobs)
        settings = _settings(args)
        if args.command == "sql":
            script = migrations_script(
                settings, from_version=args.from_version, transaction=not args.no_transaction
            )
            sys.stdout.write(script)
            return 0
        if args.command == "migrate":
            if asyncio_only(_url(args), args.driver):
                applied, version = asyncio.run(_migrate_async(args, settings))
            else:
                with Client.connect(args.dsn, driver=args.driver, settings=settings) as client:
                    applied = client.migrate()
                    version = client.schema_version()
            done = f"applied {', '.join(map(str, applied))}" if applied else "nothing to apply"
            print(f"pgqueue schema at version {version} ({done})")
            return 0
        if args.command == "worker":
            return _run_worker(args, settings)

    except PgQueueError as exc:
        print(f"pgqueue: error: {exc}", file=sys.stderr)
        return 1
    raise AssertionError(f"unhandled command {args.command!r}")  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
