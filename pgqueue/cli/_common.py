"""What every ``pgqueue`` command shares: where the database is and which client talks to it.

The one place that declares ``--dsn``, ``--driver``, ``--schema`` and ``--prefix`` (with their
environment variables) and turns their values into a :class:`Target`: the database URL, the
driver asked for, and the :class:`~pgqueue.Settings` of pgqueue's tables. A target connects the
right client: :class:`~pgqueue.AsyncClient` when the driver runs only under asyncio (the adapter
registry says which), else the sync :class:`~pgqueue.Client`. Commands never read these
environment variables or pick a client themselves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import rich_click as click

from .. import AsyncClient, Client, Settings, WorkerRegistry
from ..adapter_registry import DRIVER_ENV_VAR, asyncio_only, describe_driver, driver_names

__all__ = [
    "DEFAULT_SETTINGS",
    "PassThrough",
    "Target",
    "driver_option",
    "dsn_option",
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


def help_panels(*extra: str) -> Callable[[F], F]:
    """Order the panels of a command's ``--help``: arguments, options, database, ``extra``.

    rich-click would put the panels without a name of ours (arguments, options) last.
    """

    def decorate(command: F) -> F:
        for name in reversed(("Arguments", "Options", DATABASE_PANEL, *extra)):
            command = click.option_panel(name)(command)
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
        return Client.connect(
            self.url, driver=self.driver, registry=registry, settings=self.settings
        )

    async def connect_async(self, registry: WorkerRegistry | None = None) -> AsyncClient:
        """Connect an asyncio client (the caller closes it)."""
        return await AsyncClient.connect(
            self.url, driver=self.driver, registry=registry, settings=self.settings
        )

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
