"""The pytest plugin of :mod:`pgqueue.testing`: fixtures on a real PostgreSQL database.

Registered by the ``pytest11`` entry point, so pytest loads it wherever pgqueue is installed;
``-p no:pgqueue`` leaves it out. Until a test asks for one of its fixtures it does no database
work and imports no database library (only the ``pgqueue`` package, which this module is in).

The database is the one ``--pgqueue-dsn`` names, else ``$PGQUEUE_TEST_DSN``, ``$PGQUEUE_DSN``
or ``$DATABASE_URL``; with none, the tests that use the fixtures are skipped and say why
(override the ``pgqueue_dsn`` fixture to compute it). Fixtures (docs/testing.md):

- ``pgqueue_schema``: a schema of its own for the test, migrated, dropped afterwards.
- ``pgqueue_client`` / ``pgqueue_async_client``: a ``Client`` / ``AsyncClient`` on it, with
  the registry of the ``pgqueue_registry`` fixture (the ini option ``pgqueue_registry =
  module:attribute``, or ``None``; override the fixture to give another).
- ``pgqueue_tx`` / ``pgqueue_async_tx``: a psycopg connection inside a transaction that is
  rolled back after the test, on a schema migrated once per session; ``pgqueue_tx_client`` /
  ``pgqueue_async_tx_client``: a client whose every statement runs in that transaction.
- ``pgqueue_tester`` / ``pgqueue_async_tester``: a ``QueueTester`` / ``AsyncQueueTester`` on
  ``pgqueue_client`` / ``pgqueue_async_client``, in the mode of the ``pgqueue`` marker
  (``@pytest.mark.pgqueue(mode="inline")``), else of the ini option ``pgqueue_mode``
  (``manual`` by default).

The async fixtures need pytest-asyncio.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

import pytest

if TYPE_CHECKING:
    import psycopg

    from pgqueue import AsyncClient, Client, WorkerRegistry
    from pgqueue.testing import AsyncQueueTester, Mode, QueueTester

try:
    import pytest_asyncio
except ImportError:  # the async fixtures then say what they need
    pytest_asyncio = None  # type: ignore[assignment]

__all__ = [
    "pgqueue_async_client",
    "pgqueue_async_tester",
    "pgqueue_async_tx",
    "pgqueue_async_tx_client",
    "pgqueue_client",
    "pgqueue_dsn",
    "pgqueue_registry",
    "pgqueue_schema",
    "pgqueue_tester",
    "pgqueue_tx",
    "pgqueue_tx_client",
]

DSN_VARIABLES = ("PGQUEUE_TEST_DSN", "PGQUEUE_DSN", "DATABASE_URL")
"""Where the database URL is looked for, in order, after ``--pgqueue-dsn``."""


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--pgqueue-dsn`` and the ini options ``pgqueue_registry`` and ``pgqueue_mode``."""
    group = parser.getgroup("pgqueue", "pgqueue's fixtures (pgqueue.testing)")
    group.addoption(
        "--pgqueue-dsn",
        dest="pgqueue_dsn",
        default=None,
        metavar="URL",
        help="the database of pgqueue's fixtures (default: $PGQUEUE_TEST_DSN, $PGQUEUE_DSN, "
        "$DATABASE_URL; with none, their tests are skipped)",
    )
    parser.addini(
        "pgqueue_registry",
        "module:attribute of the pgqueue.WorkerRegistry of the pgqueue fixtures' clients",
        default="",
    )
    parser.addini(
        "pgqueue_mode", "mode of pgqueue_tester: manual (default) or inline", default="manual"
    )


def pytest_configure(config: pytest.Config) -> None:
    """Declare the ``pgqueue`` marker."""
    config.addinivalue_line(
        "markers",
        "pgqueue(mode): pgqueue_tester's mode for this test: 'manual' or 'inline'",
    )


def _async_fixture(fn: Callable[..., Any]) -> Any:
    if pytest_asyncio is not None:
        return pytest_asyncio.fixture(fn)

    def missing(**_: Any) -> None:
        pytest.fail(f"the fixture {fn.__name__} needs pytest-asyncio: pip install pytest-asyncio")

    missing.__name__ = fn.__name__
    missing.__doc__ = fn.__doc__
    return pytest.fixture(name=fn.__name__)(missing)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# -- the database -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def pgqueue_dsn(pytestconfig: pytest.Config) -> str:
    """Return the database URL of pgqueue's fixtures; skip the test when none is configured."""
    dsn = pytestconfig.getoption("pgqueue_dsn", None)
    for variable in DSN_VARIABLES:
        dsn = dsn or os.environ.get(variable)
    if not dsn:
        pytest.skip(
            "pgqueue: no database for the pgqueue fixtures: pass --pgqueue-dsn=URL or set "
            + ", ".join(f"${name}" for name in DSN_VARIABLES)
        )
    return str(dsn)


@pytest.fixture(scope="session")
def pgqueue_registry(pytestconfig: pytest.Config) -> WorkerRegistry | None:
    """Return the clients' ``WorkerRegistry``: the ini option ``pgqueue_registry``, or None."""
    path = str(pytestconfig.getini("pgqueue_registry") or "").strip()
    if not path:
        return None
    from pgqueue.cli.worker import load_registry
    from pgqueue.errors import ConfigurationError

    try:
        return load_registry(path)
    except ConfigurationError as exc:
        raise pytest.UsageError(f"pgqueue_registry = {path}: {exc}") from exc


@pytest.fixture(scope="session")
def _pgqueue_admin(pgqueue_dsn: str) -> Iterator[Client]:
    """Yield a client on the default schema, to create, migrate and drop the test schemas."""
    from pgqueue import Client

    # psycopg whatever driver the URL names: a sync client, which asyncpg has not
    with Client.connect(pgqueue_dsn, driver="psycopg") as admin:
        yield admin


def _schema_create(admin: Client) -> str:
    from pgqueue import Client, Settings

    name = f"pgqueue_test_{uuid.uuid4().hex[:12]}"
    # on the admin client's driver (never closed here): no connection of its own
    Client(admin.driver, settings=Settings(schema=name)).migrate()
    return name


def _schema_drop(admin: Client, name: str) -> None:
    admin.driver.exec(f"DROP SCHEMA IF EXISTS {_quoted(name)} CASCADE")


@pytest.fixture
def pgqueue_schema(_pgqueue_admin: Client) -> Iterator[str]:
    """Yield the name of a schema for this test alone, with pgqueue's tables; drop it after."""
    name = _schema_create(_pgqueue_admin)
    try:
        yield name
    finally:
        _schema_drop(_pgqueue_admin, name)


@pytest.fixture(scope="session")
def _pgqueue_tx_schema(_pgqueue_admin: Client) -> Iterator[str]:
    """Yield the schema of the transaction fixtures, migrated once per session."""
    name = _schema_create(_pgqueue_admin)
    try:
        yield name
    finally:
        _schema_drop(_pgqueue_admin, name)


# -- clients ------------------------------------------------------------------------------------


@pytest.fixture
def pgqueue_client(
    pgqueue_dsn: str, pgqueue_schema: str, pgqueue_registry: WorkerRegistry | None
) -> Iterator[Client]:
    """Yield a ``Client`` on this test's schema (its workers stopped and it closed after)."""
    from pgqueue import Client, Settings

    settings = Settings(schema=pgqueue_schema)
    with Client.connect(pgqueue_dsn, registry=pgqueue_registry, settings=settings) as client:
        yield client


@_async_fixture
async def pgqueue_async_client(
    pgqueue_dsn: str, pgqueue_schema: str, pgqueue_registry: WorkerRegistry | None
) -> AsyncIterator[AsyncClient]:
    """Yield an ``AsyncClient`` on this test's schema (stopped and closed afterwards)."""
    from pgqueue import AsyncClient, Settings

    settings = Settings(schema=pgqueue_schema)
    client = await AsyncClient.connect(pgqueue_dsn, registry=pgqueue_registry, settings=settings)
    async with client:
        yield client


# -- a transaction rolled back after the test ---------------------------------------------------


@pytest.fixture
def pgqueue_tx(pgqueue_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """Yield a psycopg ``Connection`` inside a transaction rolled back after the test."""
    import psycopg

    from pgqueue.adapter_registry import url_without_driver

    with (
        psycopg.connect(str(url_without_driver(pgqueue_dsn))) as conn,
        conn.transaction(force_rollback=True),
    ):
        yield conn


@pytest.fixture
def pgqueue_tx_client(
    pgqueue_tx: psycopg.Connection[Any],
    _pgqueue_tx_schema: str,
    pgqueue_registry: WorkerRegistry | None,
) -> Client:
    """Return a ``Client`` whose statements all run in ``pgqueue_tx``'s transaction."""
    from pgqueue import Client, Settings
    from pgqueue.adapter_registry import adapter_for_native

    driver = adapter_for_native(pgqueue_tx).sync_wrap_transaction(pgqueue_tx)
    settings = Settings(schema=_pgqueue_tx_schema)
    return Client(driver, registry=pgqueue_registry, settings=settings)


@_async_fixture
async def pgqueue_async_tx(pgqueue_dsn: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """Yield a psycopg ``AsyncConnection`` inside a transaction rolled back after the test."""
    import psycopg

    from pgqueue.adapter_registry import url_without_driver

    conn = await psycopg.AsyncConnection.connect(str(url_without_driver(pgqueue_dsn)))
    async with conn, conn.transaction(force_rollback=True):
        yield conn


@pytest.fixture
def pgqueue_async_tx_client(
    pgqueue_async_tx: psycopg.AsyncConnection[Any],
    _pgqueue_tx_schema: str,
    pgqueue_registry: WorkerRegistry | None,
) -> AsyncClient:
    """Return an ``AsyncClient`` whose statements all run in ``pgqueue_async_tx``'s transaction."""
    from pgqueue import AsyncClient, Settings
    from pgqueue.adapter_registry import adapter_for_native

    driver = adapter_for_native(pgqueue_async_tx).async_wrap_transaction(pgqueue_async_tx)
    settings = Settings(schema=_pgqueue_tx_schema)
    return AsyncClient(driver, registry=pgqueue_registry, settings=settings)


# -- testers ------------------------------------------------------------------------------------


def _mode(request: pytest.FixtureRequest) -> Mode:
    marker = request.node.get_closest_marker("pgqueue")
    mode = marker.kwargs.get("mode") if marker is not None else None
    if mode is None:
        mode = str(request.config.getini("pgqueue_mode") or "manual").strip()
    if mode in ("manual", "inline"):
        return cast("Mode", mode)
    raise pytest.UsageError(f"pgqueue mode must be 'manual' or 'inline', got {mode!r}")


@pytest.fixture
def pgqueue_tester(request: pytest.FixtureRequest, pgqueue_client: Client) -> Iterator[QueueTester]:
    """Yield a ``QueueTester`` on ``pgqueue_client``, in the mode of the marker or ini option."""
    from pgqueue.testing import QueueTester

    tester = QueueTester(pgqueue_client, mode=_mode(request))
    try:
        yield tester
    finally:
        tester.close()


@pytest.fixture
def pgqueue_async_tester(
    request: pytest.FixtureRequest, pgqueue_async_client: AsyncClient
) -> Iterator[AsyncQueueTester]:
    """Yield an ``AsyncQueueTester`` on ``pgqueue_async_client``, in the marker's or ini's mode."""
    from pgqueue.testing import AsyncQueueTester

    tester = AsyncQueueTester(pgqueue_async_client, mode=_mode(request))
    try:
        yield tester
    finally:
        tester.close()
