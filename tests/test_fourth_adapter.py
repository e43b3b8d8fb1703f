"""A fourth driver is one new package plus one registry line (docs/drivers.md, "Adding an adapter").

The package here, written into a temporary folder, is a toy: its drivers hand every call to the
psycopg adapter. What matters is what it takes: a package that exports ``ADAPTER`` (a
``ModuleAdapter`` with its capabilities) and the six entry functions, and one line in the
registry table. Nothing else in pgqueue changes, and the clients, the URL scheme, the
native-object lookup and the command line all find it.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import pgqueue
from pgqueue import adapter_registry
from pgqueue.adapter_registry import _AdapterInfo

PACKAGE = {
    "__init__.py": '''
        """A toy adapter: pgqueue through psycopg, under the name "relay"."""
        from ._adapter import ADAPTER

        __all__ = ["ADAPTER"]
    ''',
    "_adapter.py": """
        from pgqueue.adapter_registry import Adapter, AdapterUrl, ModuleAdapter, url_without_driver


        class RelayAdapter(ModuleAdapter):
            async_module = __package__ + "._drivers"
            sync_module = __package__ + "._drivers"
            has_sync = True
            url_schemes = ("postgresql+relay",)
            reads_url_dialect = False
            native_modules = ("relay_native",)

            def read_url(self, url):
                return AdapterUrl(url_without_driver(url), asyncio_only=False, description="relay")


        ADAPTER: Adapter = RelayAdapter()
    """,
    "_drivers.py": """
        from pgqueue_adapters import psycopg as _psycopg


        async def async_connect(url):
            return await _psycopg.async_connect(url, max_size=4)


        def async_from_native(obj):
            return _psycopg.async_from_native(obj.pool)


        def async_wrap_transaction(obj):
            return _psycopg.async_wrap_transaction(obj.conn)


        def sync_connect(url):
            return _psycopg.sync_connect(url, max_size=4)


        def sync_from_native(obj):
            return _psycopg.sync_from_native(obj.pool)


        def sync_wrap_transaction(obj):
            return _psycopg.sync_wrap_transaction(obj.conn)
    """,
}

NATIVE = '''
    class Holder:
        """A native object of the toy library: it holds a psycopg pool or connection."""

        def __init__(self, pool=None, conn=None):
            self.pool = pool
            self.conn = conn
'''


@pytest.fixture
def relay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    package = tmp_path / "relay_adapter"
    package.mkdir()
    for name, text in PACKAGE.items():
        (package / name).write_text(textwrap.dedent(text))
    (tmp_path / "relay_native.py").write_text(textwrap.dedent(NATIVE))
    monkeypatch.syspath_prepend(str(tmp_path))
    # the one registry line
    monkeypatch.setitem(
        adapter_registry._ADAPTERS, "relay", _AdapterInfo("relay_adapter", ("psycopg",), "relay")
    )
    yield
    for name in [m for m in sys.modules if m.startswith(("relay_adapter", "relay_native"))]:
        del sys.modules[name]


def relay_url(database_url: str) -> str:
    return "postgresql+relay" + database_url[database_url.index("://") :]


@dataclass
class Echo(pgqueue.Worker):
    kind = "relay.echo"
    text: str

    def process(self, ctx: pgqueue.JobContext) -> None:
        pass


def wait_completed(client: pgqueue.Client, job_id: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        info = client.get_job(job_id)
        if info is not None and info.status == "completed":
            return
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not complete: {client.get_job(job_id)}")


@pytest.mark.usefixtures("relay")
def test_the_registry_finds_it_by_name_scheme_and_native_object(database_url: str) -> None:
    import relay_native

    url = relay_url(database_url)
    assert "relay" in adapter_registry.driver_names()
    assert adapter_registry.resolve_driver_name(url, None) == ("relay", database_url)
    assert adapter_registry.describe_driver(url, None) == "relay"
    assert not adapter_registry.asyncio_only(url, None)
    assert (
        adapter_registry.adapter_for_native(relay_native.Holder())
        is sys.modules["relay_adapter"].ADAPTER
    )


@pytest.mark.usefixtures("relay")
def test_the_sync_client_runs_jobs_through_it(
    database_url: str, settings: pgqueue.Settings
) -> None:
    import psycopg
    import relay_native
    from psycopg_pool import ConnectionPool

    registry = pgqueue.WorkerRegistry(Echo)
    with pgqueue.Client.connect(
        relay_url(database_url), registry=registry, settings=settings
    ) as client:
        client.migrate()
        handle = client.add_job(Echo(text="by url"))
        with psycopg.connect(database_url) as conn:
            in_tx = client.add_job_with_tx(
                relay_native.Holder(conn=conn), Echo(text="in my transaction")
            )
            conn.commit()
        client.start({"default": 2})
        wait_completed(client, handle.id)
        wait_completed(client, in_tx.id)
        assert client.job_counts() == {"completed": 2}
    with ConnectionPool(database_url, min_size=1, max_size=2) as pool:
        native = pgqueue.Client.connect(relay_native.Holder(pool=pool), settings=settings)
        assert native.get_job(handle.id) is not None


@pytest.mark.usefixtures("relay")
def test_the_asyncio_client_enqueues_through_it(
    database_url: str, settings: pgqueue.Settings
) -> None:
    async def run() -> int:
        async with await pgqueue.AsyncClient.connect(
            relay_url(database_url), settings=settings
        ) as client:
            await client.migrate()
            handle = await client.add_job(Echo(text="async"))
            info = await client.get_job(handle.id)
            assert info is not None
            return info.id

    assert asyncio.run(run()) > 0


@pytest.mark.usefixtures("relay")
def test_the_command_line_takes_it(database_url: str, settings: pgqueue.Settings) -> None:
    from pgqueue.cli import main

    code = main(["migrate", "--dsn", relay_url(database_url), "--schema", settings.schema])
    assert code == 0
    code = main(
        ["migrate", "--dsn", database_url, "--driver", "relay", "--schema", settings.schema]
    )
    assert code == 0
