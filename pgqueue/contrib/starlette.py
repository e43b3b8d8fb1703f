"""pgqueue in a Starlette or FastAPI app: a lifespan that opens the client, and a dependency.

:func:`pgqueue_lifespan` returns a lifespan (``Starlette(lifespan=...)``,
``FastAPI(lifespan=...)``) that connects an :class:`~pgqueue.AsyncClient` at startup, keeps it
on ``app.state.pgqueue`` and closes it at shutdown; it can also migrate, and run workers in the
app's process. :func:`get_client` returns that client from a request: ``Depends(get_client)``
in FastAPI, ``get_client(request)`` in a Starlette endpoint.

To enqueue in the request's transaction, hand the connection (or SQLAlchemy session) that holds
it to ``client.add_job_with_tx``: the job commits or rolls back with it. See
docs/frameworks.md and examples/fastapi_app.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import HTTPConnection

from .. import AsyncClient, ConfigurationError, RuntimeConfig, Settings, WorkerRegistry

__all__ = ["STATE_ATTRIBUTE", "get_client", "pgqueue_lifespan"]

STATE_ATTRIBUTE = "pgqueue"
"""The attribute of ``app.state`` that holds the client while the app runs."""


def pgqueue_lifespan(
    target: str | object | None = None,
    *,
    driver: str | None = None,
    registry: WorkerRegistry | None = None,
    settings: Settings | None = None,
    migrate: bool = False,
    run_workers: Mapping[str, int] | None = None,
    config: RuntimeConfig | None = None,
) -> Callable[[Starlette], AbstractAsyncContextManager[None]]:
    """Return a lifespan that opens an :class:`~pgqueue.AsyncClient` for the app's lifetime.

    At startup it connects the client (``AsyncClient.connect(target, driver=, registry=,
    settings=)``: ``target`` is a database URL, default ``$PGQUEUE_DSN`` then
    ``$DATABASE_URL``, or an asyncio pool or engine the app owns, which the client uses but
    never closes), applies pending migrations when ``migrate`` is true, starts workers when
    ``run_workers`` maps queues to their concurrency (``{"default": 4}``; ``config`` is their
    :class:`~pgqueue.RuntimeConfig`), and stores the client on ``app.state.pgqueue``. At
    shutdown it stops the workers gracefully (running jobs get ``config.shutdown_timeout``
    seconds, then are handed back to ``pending``) and closes the client.

    Use it as the app's lifespan, or enter it from the app's own lifespan to compose them:
    ``async with pgqueue_lifespan(...)(app): yield``. Each call of the returned function
    opens a client of its own.
    """
    if run_workers is not None and registry is None:
        raise ConfigurationError(
            "run_workers needs a registry: pass registry=WorkerRegistry(...) with the job "
            "classes the app's process should run"
        )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        client = await AsyncClient.connect(
            target, driver=driver, registry=registry, settings=settings
        )
        try:
            if migrate:
                await client.migrate()
            if run_workers is not None:
                await client.start(run_workers, config=config)
            setattr(app.state, STATE_ATTRIBUTE, client)
            try:
                yield
            finally:
                # Requests that still run after shutdown began get a clear error, not a
                # closed pool.
                delattr(app.state, STATE_ATTRIBUTE)
        finally:
            await client.close()  # stops the workers first, if they run

    return lifespan


def get_client(connection: HTTPConnection) -> AsyncClient:
    """Return the client that :func:`pgqueue_lifespan` opened for the request's app.

    A FastAPI dependency (``client: AsyncClient = Depends(get_client)``) that also works called
    directly with a Starlette ``Request`` or ``WebSocket``. Raises ``RuntimeError`` when the
    app's lifespan did not open one (or has already closed it).
    """
    client = getattr(connection.app.state, STATE_ATTRIBUTE, None)
    if not isinstance(client, AsyncClient):
        raise RuntimeError(
            "no pgqueue client on this app: give it lifespan=pgqueue_lifespan(...) (or enter "
            "pgqueue_lifespan(...)(app) from its own lifespan); a sub-application mounted "
            "under another has no lifespan of its own"
        )
    return client
