"""``AsyncClient``: enqueue jobs and manage the schema.

This module (the asyncio client) is the single source of truth; ``pgqueue/_sync/client.py``
(the sync client) is generated from it by ``tools/async_to_sync.py``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from types import TracebackType

from typing_extensions import Unpack

from ..drivers import adapter_for_native, load_adapter, resolve_driver_name
from ..enqueue import (
    PreparedJob,
    call_options,
    handles_from_rows,
    insert_many_params,
    prepare,
)
from ..errors import ConfigurationError, DatabaseError, JobIdConflict, SchemaNotMigrated
from ..jobs import JobHandle, Worker, WorkerRegistry
from ..options import JobOptionKwargs, JobOptions
from ..queries import Queries, queries_for
from ..settings import Settings
from .driver import AsyncDriver
from .schema import schema_migrate, schema_version

__all__ = ["AsyncClient"]

# Rows per job_insert_many statement: large enough to amortise the round trip, small enough to
# keep the arrays of one statement to a few MB.
INSERT_CHUNK = 5000

JobSpec = Worker | tuple[Worker, JobOptions | None]
"""An item of ``add_jobs``: a job, or a job with options for that job alone."""


class AsyncClient:
    """Enqueues jobs (and, with the runtime, runs workers) through an :class:`AsyncDriver`.

    Build one with :meth:`connect` from a URL or a driver-native pool/connection, or pass a
    driver to the constructor. ``registry``, when given, restricts enqueueing to known kinds.
    Use it as an async context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        driver: AsyncDriver,
        *,
        registry: WorkerRegistry | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.driver = driver
        self.registry = registry
        self.settings = settings or Settings()
        self._queries: Queries = queries_for(self.settings)

    @classmethod
    async def connect(
        cls,
        target: str | object | None = None,
        *,
        driver: str | None = None,
        registry: WorkerRegistry | None = None,
        settings: Settings | None = None,
    ) -> AsyncClient:
        """Create a client from a database URL or a driver-native pool or connection.

        ``target`` is a ``postgresql://`` URL (default: ``$PGQUEUE_DSN``, then
        ``$DATABASE_URL``), or an object of the driver library such as a psycopg
        ``AsyncConnectionPool`` (of the same sync or asyncio flavour as the client), which the
        client uses but never closes. ``driver`` names the
        driver (default: ``$PGQUEUE_DRIVER``, then the URL scheme, then ``"psycopg"``).
        """
        if target is None or isinstance(target, str):
            url = target or os.environ.get("PGQUEUE_DSN") or os.environ.get("DATABASE_URL")
            if not url:
                raise ConfigurationError(
                    "no database to connect to: pass a URL such as "
                    "postgresql://user@localhost/app, or set PGQUEUE_DSN"
                )
            name, url = resolve_driver_name(url, driver)
            drv: AsyncDriver = await load_adapter(name).async_connect(url)
        else:
            drv = adapter_for_native(target).async_from_native(target)
        return cls(drv, registry=registry, settings=settings)

    async def close(self) -> None:
        """Close what the client's driver opened; pools or connections handed in stay open."""
        await self.driver.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- schema -----------------------------------------------------------------------------

    async def migrate(self) -> list[int]:
        """Create or upgrade pgqueue's tables; return the versions applied now.

        Idempotent and safe to run from several processes at once.
        """
        return await schema_migrate(self.driver, self.settings)

    async def schema_version(self) -> int | None:
        """Return the installed schema version, or ``None`` when pgqueue is not installed."""
        return await schema_version(self.driver, self.settings)

    # -- enqueue ----------------------------------------------------------------------------

    def _prepare(self, job: Worker, options: JobOptions | None) -> PreparedJob:
        return prepare(job, options, settings=self.settings, registry=self.registry)

    async def add_job(
        self,
        job: Worker,
        *,
        options: JobOptions | None = None,
        **option_kwargs: Unpack[JobOptionKwargs],
    ) -> JobHandle:
        """Enqueue one job in its own transaction and return its handle.

        Keyword options override ``options``, which overrides the job class's ``job_options``
        and the client's defaults; see :class:`JobOptions` for each option.
        """
        call = call_options(options, option_kwargs)
        return (await self._insert(self.driver, [self._prepare(job, call)]))[0]

    async def add_job_with_tx(
        self,
        tx: object,
        job: Worker,
        *,
        options: JobOptions | None = None,
        **option_kwargs: Unpack[JobOptionKwargs],
    ) -> JobHandle:
        """Enqueue one job inside the caller's transaction ``tx``.

        ``tx`` is the driver library's connection (or session) with the transaction open. The
        job is visible to workers only once the caller commits; a rollback leaves nothing.
        pgqueue never commits or rolls back ``tx``.
        """
        call = call_options(options, option_kwargs)
        prepared = [self._prepare(job, call)]
        return (await self._insert(self._tx_driver(tx), prepared))[0]

    async def add_jobs(
        self, jobs: Iterable[JobSpec], *, options: JobOptions | None = None
    ) -> list[JobHandle]:
        """Enqueue many jobs in one transaction (all or none); return handles in input order.

        Each item is a job or a ``(job, JobOptions)`` pair; ``options`` applies to every item
        under its own options. Any number of jobs: they are sent in chunks of array parameters,
        so PostgreSQL's bind-parameter limit never applies.
        """
        return await self._insert(self.driver, self._prepare_many(jobs, options))

    async def add_jobs_with_tx(
        self, tx: object, jobs: Iterable[JobSpec], *, options: JobOptions | None = None
    ) -> list[JobHandle]:
        """Enqueue many jobs inside the caller's transaction ``tx`` (like add_job_with_tx)."""
        prepared = self._prepare_many(jobs, options)
        return await self._insert(self._tx_driver(tx), prepared)

    def _prepare_many(
        self, jobs: Iterable[JobSpec], options: JobOptions | None
    ) -> list[PreparedJob]:
        prepared = []
        for item in jobs:
            job, own = item if isinstance(item, tuple) else (item, None)
            merged = options.merged_with(own) if options is not None else own
            prepared.append(self._prepare(job, merged))
        return prepared

    def _tx_driver(self, tx: object) -> AsyncDriver:
        driver: AsyncDriver = adapter_for_native(tx).async_wrap_transaction(tx)
        return driver

    async def _insert(self, driver: AsyncDriver, jobs: Sequence[PreparedJob]) -> list[JobHandle]:
        q = self._queries
        try:
            if len(jobs) == 1:
                rows = await driver.query(q.job_insert, jobs[0].params())
            elif len(jobs) <= INSERT_CHUNK:
                rows = await driver.query(q.job_insert_many, insert_many_params(jobs))
            else:
                # Several statements: one transaction (or savepoint, inside a caller's
                # transaction) keeps the batch all-or-nothing.
                rows = []
                async with driver.with_tx() as tx:
                    for start in range(0, len(jobs), INSERT_CHUNK):
                        chunk = jobs[start : start + INSERT_CHUNK]
                        rows.extend(await tx.query(q.job_insert_many, insert_many_params(chunk)))
        except DatabaseError as exc:
            raise self._translate(exc) from exc
        return handles_from_rows(jobs, rows)

    def _translate(self, exc: DatabaseError) -> Exception:
        if exc.sqlstate == "42P01":  # undefined_table
            return SchemaNotMigrated(
                f"pgqueue's tables are missing in schema {self.settings.schema!r} "
                f"(prefix {self.settings.prefix!r}): run client.migrate() or `pgqueue migrate`",
                exc.sqlstate,
            )
        if exc.sqlstate == "23505" and exc.constraint_name == self.settings.prefix + "jobs_key_idx":
            return JobIdConflict(
                "a job with this job_id already exists (it keeps the id until retention removes "
                "it): choose another job_id, or look the existing job up"
            )
        return exc
