"""pgqueue in Flask: a sync client on a psycopg pool, safe after a fork; ``flask pgqueue``.

``PgQueue(app)`` (or ``PgQueue()`` then ``init_app(app)``) reads the app's config:

- ``PGQUEUE_DSN``: the database URL (default ``$PGQUEUE_DSN``, then ``$DATABASE_URL``);
- ``PGQUEUE_SCHEMA``, ``PGQUEUE_PREFIX``: where pgqueue's tables are (default
  ``$PGQUEUE_SCHEMA``/``$PGQUEUE_PREFIX``, then ``public`` and ``pgqueue_``);
- ``PGQUEUE_REGISTRY``: the :class:`~pgqueue.WorkerRegistry`, as ``"module:attribute"`` (what
  ``flask pgqueue worker`` runs) or the object itself (optional: without it the client
  enqueues any job);
- ``PGQUEUE_POOL_MIN_SIZE`` (1), ``PGQUEUE_POOL_MAX_SIZE`` (10), ``PGQUEUE_POOL_KWARGS`` (more
  arguments of ``psycopg_pool.ConnectionPool``).

Request code gets ``ext.client`` (a :class:`~pgqueue.Client`) and ``ext.connection()`` (a
pooled connection whose block is a transaction: enqueue in it with ``add_job_with_tx``). The
pool and the client are opened on first use in each process, so that a pre-forking server
(gunicorn, uWSGI) never shares them between worker processes: a process that finds the ones its
parent opened before the fork leaves them alone and opens its own. They are closed at exit.

``flask pgqueue`` runs pgqueue's own commands (``migrate``, ``worker``, ``jobs``, ``queues``,
``workers``, ``stats``, ``cron``, ``sql``) on the app's database, schema, prefix and registry.
"""

from __future__ import annotations

import atexit
import copy
import importlib
import logging
import os
import threading
import weakref
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click
from flask import Flask, current_app, has_app_context

from .. import (
    Client,
    ConfigurationError,
    DriverNotInstalled,
    PgQueueError,
    Settings,
    WorkerRegistry,
)
from ..adapter_registry import resolve_driver_name

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg_pool import ConnectionPool

__all__ = ["EXTENSION_KEY", "FORWARDED_COMMANDS", "PgQueue", "PgQueueState"]

EXTENSION_KEY = "pgqueue"
"""The key of ``app.extensions`` that holds the app's :class:`PgQueueState`."""

FORWARDED_COMMANDS = ("migrate", "worker", "jobs", "queues", "workers", "stats", "cron", "sql")
"""The ``pgqueue`` commands that ``flask pgqueue`` runs, with the app's configuration."""

# The library's own default is 4 connections kept open; a web process usually needs fewer.
_POOL_MIN_SIZE = 1
_POOL_MAX_SIZE = 10

# The parent's pool and client found after a fork: kept referenced so that their finalizers
# never run in the child (the pool's would talk to threads that did not survive the fork).
_INHERITED: list[_Resources] = []
_STATES: weakref.WeakSet[PgQueueState] = weakref.WeakSet()


@dataclass(frozen=True)
class _Config:
    """The extension's settings, read from an app's config then the environment."""

    dsn: str | None
    schema: str
    prefix: str
    registry: str | WorkerRegistry | None
    pool_min_size: int
    pool_max_size: int
    pool_kwargs: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def read(cls, config: Mapping[str, Any]) -> _Config:
        """Read ``PGQUEUE_*`` from ``config``, then pgqueue's environment variables."""
        defaults = Settings()
        registry = config.get("PGQUEUE_REGISTRY")
        if registry is not None and not isinstance(registry, str | WorkerRegistry):
            raise ConfigurationError(
                f"PGQUEUE_REGISTRY is a {type(registry).__name__}: give 'module:attribute' or "
                "a pgqueue.WorkerRegistry"
            )
        return cls(
            dsn=config.get("PGQUEUE_DSN")
            or os.environ.get("PGQUEUE_DSN")
            or os.environ.get("DATABASE_URL"),
            schema=config.get("PGQUEUE_SCHEMA")
            or os.environ.get("PGQUEUE_SCHEMA")
            or defaults.schema,
            prefix=config.get("PGQUEUE_PREFIX")
            or os.environ.get("PGQUEUE_PREFIX")
            or defaults.prefix,
            registry=registry,
            pool_min_size=int(config.get("PGQUEUE_POOL_MIN_SIZE", _POOL_MIN_SIZE)),
            pool_max_size=int(config.get("PGQUEUE_POOL_MAX_SIZE", _POOL_MAX_SIZE)),
            pool_kwargs=dict(config.get("PGQUEUE_POOL_KWARGS") or {}),
        )

    def command_defaults(self) -> dict[str, str]:
        """Return the values ``flask pgqueue`` gives pgqueue's commands, by parameter name."""
        values = {"schema": self.schema, "prefix": self.prefix}
        if self.dsn:
            values["dsn"] = self.dsn
        if isinstance(self.registry, str):
            values["registry"] = self.registry
        return values


@dataclass(frozen=True)
class _Resources:
    """The pool and client one process opened."""

    pid: int
    pool: ConnectionPool[Any]
    client: Client


def _load_registry(value: str | WorkerRegistry | None) -> WorkerRegistry | None:
    if not isinstance(value, str):
        return value
    module_name, sep, attribute = value.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError(f"PGQUEUE_REGISTRY {value!r}: write it as module:attribute")
    registry = getattr(importlib.import_module(module_name), attribute, None)
    if not isinstance(registry, WorkerRegistry):
        raise ConfigurationError(
            f"PGQUEUE_REGISTRY {value!r} is a {type(registry).__name__}, not a "
            "pgqueue.WorkerRegistry"
        )
    return registry


def _open(config: _Config) -> _Resources:
    try:
        from psycopg_pool import ConnectionPool
    except ImportError as exc:
        raise DriverNotInstalled(
            f"pgqueue.contrib.flask needs psycopg_pool ({exc}): pip install 'pgqueue[flask]'"
        ) from exc
    if not config.dsn:
        raise ConfigurationError(
            "no database for pgqueue: set PGQUEUE_DSN in the app's config (or $PGQUEUE_DSN, "
            "$DATABASE_URL), e.g. postgresql://user@localhost/app"
        )
    settings = Settings(schema=config.schema, prefix=config.prefix)
    registry = _load_registry(config.registry)
    # The URL as psycopg reads it: without a +driver in its scheme.
    conninfo = resolve_driver_name(config.dsn, "psycopg")[1] or config.dsn
    pool: ConnectionPool[Any] = ConnectionPool(
        conninfo,
        min_size=config.pool_min_size,
        max_size=config.pool_max_size,
        open=False,
        name="pgqueue-flask",
        **config.pool_kwargs,
    )
    pool.open()
    try:
        client = Client.connect(pool, registry=registry, settings=settings)
    except BaseException:
        pool.close()
        raise
    return _Resources(os.getpid(), pool, client)


class PgQueueState:
    """pgqueue's pool and client for one Flask app: ``app.extensions["pgqueue"]``.

    The pool and client belong to the process that opened them; each process opens its own on
    first use.
    """

    def __init__(self, app: Flask) -> None:
        self.config = app.config
        self._lock = threading.Lock()
        self._resources: _Resources | None = None
        _STATES.add(self)

    def _settings(self) -> _Config:
        # Read now, not at init_app: the config may still change until the first use.
        return _Config.read(self.config)

    def _here(self) -> _Resources:
        # This process's pool and client, opened now if it has none yet. Those another process
        # opened (the parent, before a fork) are never used nor closed here: their sockets are
        # the parent's database sessions, and closing them would end those.
        current, pid = self._resources, os.getpid()
        if current is not None and current.pid == pid:
            return current
        with self._lock:
            current = self._resources
            if current is not None and current.pid == pid:
                return current
            if current is not None:
                _INHERITED.append(current)
            self._resources = current = _open(self._settings())
            return current

    @property
    def client(self) -> Client:
        """The app's :class:`~pgqueue.Client` in this process, on :attr:`pool`."""
        return self._here().client

    @property
    def pool(self) -> ConnectionPool[Any]:
        """The app's ``psycopg_pool.ConnectionPool`` in this process."""
        return self._here().pool

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[Connection[Any]]:
        """Lend a connection of :attr:`pool` for a block that is one transaction.

        The transaction commits when the block ends, or rolls back if it raises (psycopg_pool's
        ``connection()``); jobs enqueued in it with ``client.add_job_with_tx(conn, job)``
        share its fate. ``timeout``: how long to wait for a free connection.
        """
        with self._here().pool.connection(timeout) as conn:
            yield conn

    def close(self) -> None:
        """Close this process's client and pool, if it opened them; the next use reopens."""
        with self._lock:
            current = self._resources
            if current is None or current.pid != os.getpid():
                return
            self._resources = None
        try:
            current.client.close()
        finally:
            current.pool.close()


class PgQueue:
    """The Flask extension: ``PgQueue(app)``, or ``ext = PgQueue()`` then ``ext.init_app(app)``.

    :attr:`client`, :attr:`pool`, :meth:`connection` and :meth:`close` are those of the
    current app's :class:`PgQueueState` (``current_app.extensions["pgqueue"]``), or, outside
    an app context, of the app given to the constructor.
    """

    def __init__(self, app: Flask | None = None) -> None:
        self.app = app
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Attach pgqueue to ``app``: its state in ``app.extensions``, and ``flask pgqueue``.

        Nothing connects here: the config is read, and the pool opened, on first use.
        """
        if EXTENSION_KEY in app.extensions:
            raise RuntimeError("pgqueue is already set up on this app: call init_app once")
        state = PgQueueState(app)
        app.extensions[EXTENSION_KEY] = state
        app.cli.add_command(_CommandGroup(state))

    def state(self) -> PgQueueState:
        """Return the :class:`PgQueueState` of the current app (or of the constructor's app)."""
        app = current_app if has_app_context() else self.app
        if app is None:
            raise RuntimeError(
                "no Flask app: use pgqueue in an app context (a request, a flask command, "
                "with app.app_context():), or create the extension with PgQueue(app)"
            )
        state = app.extensions.get(EXTENSION_KEY)
        if not isinstance(state, PgQueueState):
            raise RuntimeError("pgqueue is not set up on this app: call PgQueue.init_app(app)")
        return state

    @property
    def client(self) -> Client:
        """The app's :class:`~pgqueue.Client` in this process (opened on first use)."""
        return self.state().client

    @property
    def pool(self) -> ConnectionPool[Any]:
        """The app's ``psycopg_pool.ConnectionPool`` in this process (opened on first use)."""
        return self.state().pool

    def connection(self, timeout: float | None = None) -> AbstractContextManager[Connection[Any]]:
        """Lend a pooled connection for a block that is one transaction (see PgQueueState)."""
        return self.state().connection(timeout)

    def close(self) -> None:
        """Close the app's client and pool in this process (also done at exit)."""
        self.state().close()


# -- flask pgqueue ----------------------------------------------------------------------------


class _CommandGroup(click.Group):
    """``flask pgqueue``: pgqueue's commands, with defaults from the app's configuration.

    Each command is a copy of pgqueue's own whose ``--dsn``, ``--schema``, ``--prefix`` (and
    ``worker``'s registry) default to the app's values instead of the environment's: the command
    line wins, then the app's config, then the environment.
    """

    def __init__(self, state: PgQueueState) -> None:
        super().__init__(
            EXTENSION_KEY,
            help="pgqueue's commands on the app's database, schema, prefix and registry "
            "(PGQUEUE_* in the app's config; options given here win).",
        )
        self._state = state

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(FORWARDED_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in FORWARDED_COMMANDS:
            return None
        from ..cli import app as pgqueue_cli  # only the CLI needs click's rich help

        command = pgqueue_cli.commands.get(cmd_name)
        if command is None:
            return None
        return _with_defaults(command, self._state._settings().command_defaults())

    def invoke(self, ctx: click.Context) -> Any:
        # What pgqueue.cli.main does around the same commands.
        from ..cli._common import PassThrough

        try:
            return super().invoke(ctx)
        except PgQueueError as exc:
            click.echo(f"pgqueue: error: {exc}", err=True)
            ctx.exit(1)
        except PassThrough as carried:
            raise carried.error from None
        except KeyboardInterrupt:
            ctx.exit(130)


def _with_defaults(command: click.Command, values: Mapping[str, str]) -> click.Command:
    """Copy ``command`` (and its subcommands), its parameters defaulting to ``values``."""
    clone = copy.copy(command)
    clone.params = [_param_with_default(param, values) for param in command.params]
    if isinstance(command, click.Group) and isinstance(clone, click.Group):
        clone.commands = {
            name: _with_defaults(sub, values) for name, sub in command.commands.items()
        }
    return clone


def _param_with_default(param: click.Parameter, values: Mapping[str, str]) -> click.Parameter:
    if param.name not in values:
        return param
    value = values[param.name]
    clone = copy.copy(param)
    clone.default = value
    clone.required = False
    # The app's value, not the environment's (nor one of the FLASK_* variables Flask's CLI
    # would read for an option without a variable of its own).
    clone.envvar = None
    if isinstance(clone, click.Option):
        clone.show_envvar = False
        clone.allow_from_autoenv = False
        # A URL may hold a password: --help names where it comes from instead.
        clone.show_default = "the app's PGQUEUE_DSN" if param.name == "dsn" else True
    elif isinstance(clone, click.Argument):
        clone.metavar = f"[{param.metavar or param.name}]"
        described: Any = clone  # rich-click's arguments have a help text; click's have none
        if isinstance(getattr(described, "help", None), str):
            described.help = f"{described.help} (default: {value})"
    return clone


def _after_fork_in_child() -> None:
    # A lock held by another thread at the fork would stay held for ever in the child.
    for state in list(_STATES):
        state._lock = threading.Lock()


def _close_at_exit() -> None:
    for state in list(_STATES):
        try:
            state.close()
        except Exception:
            logging.getLogger("pgqueue").warning(
                "closing pgqueue's pool at exit failed", exc_info=True
            )


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_at_exit)
