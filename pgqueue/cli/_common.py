"""What every ``pgqueue`` command shares: where the database is and which client talks to it.

The one place that declares ``--dsn``, ``--driver``, ``--schema`` and ``--prefix`` (with their
environment variables) and turns their values into a :class:`Target`: the database URL, the
driver asked for, and the :class:`~pgqueue.Settings` of pgqueue's tables. A target connects the
right client: :class:`~pgqueue.AsyncClient` when the driver runs only under asyncio (the adapter
registry says which), else the sync :class:`~pgqueue.Client`. Commands never read these
environment variables or pick a client themselves.

The admin commands (``jobs``, ``queues``, ``workers``, ``stats``, ``cron``) run on a
:class:`Session`: one client connected for the whole command, which runs ``fn(client)`` and
awaits the result when the client is the asyncio one, so each command is written once for both.
The exit statuses they share (:data:`BAD_INPUT`, :data:`NOTHING_MATCHED`, :data:`REFUSED`) are
named here too.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, NoReturn, TypeVar, cast

import rich_click as click
from click.exceptions import Exit

from .. import AsyncClient, Client, Settings, WorkerRegistry
from ..adapter_registry import DRIVER_ENV_VAR, asyncio_only, describe_driver, driver_names

__all__ = [
    "BAD_INPUT",
    "DEFAULT_SETTINGS",
    "ERROR",
    "NOTHING_MATCHED",
    "REFUSED",
    "AdminCommand",
    "AnyClient",
    "OrderedGroup",
    "PassThrough",
    "Session",
    "Target",
    "driver_option",
    "dsn_option",
    "fail",
    "help_panels",
    "prefix_option",
    "schema_option",
    "target_options",
]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_SETTINGS = Settings()
"""Where the tables are when neither an option nor the environment says: for the defaults."""

DATABASE_PANEL = "Database"

ERROR = 1
"""Exit status: the database or pgqueue failed (``pgqueue: error: ...``)."""
BAD_INPUT = 2
"""Exit status: bad input (a usage error, or a value the API refused); nothing changed."""
NOTHING_MATCHED = 3
"""Exit status: nothing matched (no such job; an action that found no job; nothing to pause)."""
REFUSED = 4
"""Exit status: the action left some jobs alone (retry of a running job, ...)."""

AnyClient = Client | AsyncClient
"""The client a :class:`Session` holds: sync, or asyncio for an asyncio-only driver."""

# Named from the registry, not by hand: a new asyncio-only driver shows up here by itself.
_ASYNCIO_ONLY = [name for name in driver_names() if asyncio_only(None, name)]

dsn_option = click.option(
    "--dsn",
    metavar="URL",
    envvar=["PGQUEUE_DSN", "DATABASE_URL"],
    show_envvar=True,
    help="database URL, e.g. postgresql://user@localhost/app",
    panel=DATABASE_PANEL,
)
"""``--dsn``: the database URL; default ``$PGQUEUE_DSN``, then ``$DATABASE_URL``."""

driver_option = click.option(
    "--driver",
    metavar="NAME",
    # No envvar=: $PGQUEUE_DRIVER comes after the URL's scheme (resolve_driver_name reads it
    # then), so the command follows the same rule as connect().
    help=(
        f"database driver: {', '.join(driver_names())}; an asyncio-only one "
        f"({', '.join(_ASYNCIO_ONLY)}) runs the command on the asyncio client (default: the "
        f"driver a postgresql+<driver>:// URL names, else ${DRIVER_ENV_VAR}, else psycopg)"
    ),
    panel=DATABASE_PANEL,
)
"""``--driver``: the driver by name; precedence as in :func:`pgqueue.Client.connect`."""

schema_option = click.option(
    "--schema",
    metavar="NAME",
    default=DEFAULT_SETTINGS.schema,
    show_default=True,
    envvar="PGQUEUE_SCHEMA",
    show_envvar=True,
    help="schema of pgqueue's tables",
    panel=DATABASE_PANEL,
)
"""``--schema``: the schema of pgqueue's tables (``$PGQUEUE_SCHEMA``)."""

prefix_option = click.option(
    "--prefix",
    metavar="PREFIX",
    default=DEFAULT_SETTINGS.prefix,
    show_default=True,
    envvar="PGQUEUE_PREFIX",
    show_envvar=True,
    help="prefix of pgqueue's table names",
    panel=DATABASE_PANEL,
)
"""``--prefix``: the prefix of pgqueue's table names (``$PGQUEUE_PREFIX``)."""


def help_panels(
    *extra: str, first: tuple[str, ...] = (), panel_help: dict[str, str] | None = None
) -> Callable[[F], F]:
    """Order the panels of a ``--help``: arguments, ``first``, options, database, ``extra``.

    rich-click would put the panels without a name of ours (arguments, options) last.
    ``panel_help`` gives a panel a line of help under its title.
    """
    helps = panel_help or {}

    def decorate(command: F) -> F:
        for name in reversed(("Arguments", *first, "Options", DATABASE_PANEL, *extra)):
            command = click.option_panel(name, help=helps.get(name))(command)
        return command

    return decorate


def target_options(command: F) -> F:
    """Add ``--dsn``, ``--driver``, ``--schema`` and ``--prefix`` to a command, in that order.

    The command takes them as the keyword arguments ``dsn``, ``driver``, ``schema`` and
    ``prefix``, the arguments of :meth:`Target.from_options`.
    """
    for option in (prefix_option, schema_option, driver_option, dsn_option):
        command = option(command)
    return command


class AdminCommand(click.RichCommand):
    """An operator command: a bad option value is one line, ``pgqueue: error: ...``, status 2.

    click would print the usage and the error in a frame; a value the admin API refuses (a
    queue name, a cursor) is one line, and so are the values click checks (a status, a limit,
    a duration, the JSON of ``--args``), so that every bad value reads the same. Other usage
    errors (an unknown option, a missing argument) keep click's usage.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Parse the arguments; a bad value ends the command with one line and status 2."""
        try:
            return super().parse_args(ctx, args)
        except click.BadParameter as exc:
            fail(f"{exc.format_message()} (see '{ctx.command_path} --help')", BAD_INPUT)


class OrderedGroup(click.RichGroup):
    """A group of operator commands, listed in the order they were added.

    click would sort them alphabetically; the order of a first read is more useful. Its
    commands are :class:`AdminCommand`.
    """

    command_class = AdminCommand

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Return the names of the commands, in the order they were added."""
        return list(self.commands)


class PassThrough(BaseException):
    """Carries a ``KeyboardInterrupt`` or ``SystemExit`` past click to :func:`pgqueue.cli.main`.

    ``main`` raises ``error`` again, so that it ends the process as it would without the CLI
    library: click would turn a ``KeyboardInterrupt`` (a job's, re-raised by the worker) into
    "Aborted!" and exit status 1 (and :func:`pgqueue.cli.main` an interrupted command into
    130), where the process must die of SIGINT as after an uncaught one.
    """

    def __init__(self, error: KeyboardInterrupt | SystemExit) -> None:
        super().__init__(error)
        self.error = error


@dataclass(frozen=True)
class Target:
    """The database a command works on, the driver asked for, and where pgqueue's tables are.

    ``url`` is ``None`` when neither ``--dsn`` nor the environment gave one: connecting then
    fails with a message that says what to set.
    """

    url: str | None
    driver: str | None
    settings: Settings
    # None: Client.connect reads $PGQUEUE_PGBOUNCER / $PGQUEUE_LISTEN_DSN (every command)
    pgbouncer: bool | None = None
    listen_dsn: str | None = None
    poll_only: bool | None = None

    @classmethod
    def from_options(
        cls,
        dsn: str | None,
        driver: str | None,
        schema: str = DEFAULT_SETTINGS.schema,
        prefix: str = DEFAULT_SETTINGS.prefix,
    ) -> Target:
        """Build a target from the options' values (a bad schema or prefix raises here)."""
        return cls(url=dsn or None, driver=driver, settings=Settings(schema=schema, prefix=prefix))

    @property
    def asyncio_only(self) -> bool:
        """Whether the selected driver runs only under asyncio, so only ``AsyncClient`` can."""
        return asyncio_only(self.url, self.driver)

    def describe_driver(self) -> str:
        """Name the selected driver for a log line, e.g. ``"sqlalchemy (asyncpg)"``."""
        return describe_driver(self.url, self.driver)

    def connect(self, registry: WorkerRegistry | None = None) -> Client:
        """Connect a sync client (the caller closes it)."""
        return Client.connect(self.url, registry=registry, **self._connect_options())

    async def connect_async(self, registry: WorkerRegistry | None = None) -> AsyncClient:
        """Connect an asyncio client (the caller closes it)."""
        return await AsyncClient.connect(self.url, registry=registry, **self._connect_options())

    def _connect_options(self) -> dict[str, Any]:
        return {
            "driver": self.driver,
            "settings": self.settings,
            "pgbouncer": self.pgbouncer,
            "listen_dsn": self.listen_dsn,
            "poll_only": self.poll_only,
        }

    def run(
        self,
        on_sync: Callable[[Client], T],
        on_asyncio: Callable[[AsyncClient], Awaitable[T]],
    ) -> T:
        """Run one of two versions of a command on the right client, connected and then closed.

        ``on_asyncio`` runs on an event loop of its own when the driver is asyncio-only;
        otherwise ``on_sync`` runs on a sync client.
        """
        if not self.asyncio_only:
            with self.connect() as client:
                return on_sync(client)

        async def run_async() -> T:
            async with await self.connect_async() as client:
                return await on_asyncio(client)

        return asyncio.run(run_async())


def fail(message: str, status: int) -> NoReturn:
    """Print ``pgqueue: error: <message>`` (one line, on stderr) and end with ``status``."""
    print(f"pgqueue: error: {message}", file=sys.stderr)
    raise Exit(status)


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


class Session:
    """One client connected for a whole command; :meth:`run` calls the API on it.

    A context manager: entering connects the sync :class:`~pgqueue.Client`, or, for an
    asyncio-only driver, the :class:`~pgqueue.AsyncClient` on an :class:`asyncio.Runner` that
    lives as long as the session (so ``stats --watch`` and a bulk action's batches reuse one
    connection pool and one event loop); leaving closes both.
    """

    def __init__(self, target: Target) -> None:
        self.target = target
        self._runner: asyncio.Runner | None = None
        self._client: AnyClient | None = None

    @classmethod
    def from_options(cls, dsn: str | None, driver: str | None, schema: str, prefix: str) -> Session:
        """Build a session from the target options; a bad schema or prefix is bad input."""
        try:
            return cls(Target.from_options(dsn, driver, schema, prefix))
        except ValueError as exc:  # InvalidName
            fail(str(exc), BAD_INPUT)

    @property
    def client(self) -> AnyClient:
        """The connected client (inside the ``with`` block only)."""
        if self._client is None:
            raise RuntimeError("the session is not open: use it in a with block")
        return self._client

    def __enter__(self) -> Session:
        if self.target.asyncio_only:
            self._runner = asyncio.Runner()
            try:
                self._client = self._runner.run(self.target.connect_async())
            except BaseException:
                self._runner.close()
                raise
        else:
            self._client = self.target.connect()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        client, self._client = self._client, None
        try:
            if isinstance(client, AsyncClient):
                assert self._runner is not None
                self._runner.run(client.close())
            elif client is not None:
                client.close()
        finally:
            if self._runner is not None:
                self._runner.close()

    def run(self, fn: Callable[[AnyClient], Awaitable[T] | T]) -> T:
        """Return ``fn(client)``, awaited on the session's loop when it is a coroutine.

        A ``ValueError`` of the API (:class:`~pgqueue.InvalidFilter`,
        :class:`~pgqueue.InvalidName`) is bad input: it is printed on one line and the command
        ends with status 2, as the API changed nothing.
        """
        try:
            result = fn(self.client)
            if inspect.isawaitable(result):
                assert self._runner is not None
                return self._runner.run(_awaited(cast(Awaitable[T], result)))
            return result
        except ValueError as exc:
            fail(str(exc), BAD_INPUT)
