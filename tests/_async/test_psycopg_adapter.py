"""psycopg-specific behaviour of the adapter (the shared contract is in test_conformance.py)."""

from __future__ import annotations

import pytest
from psycopg import AsyncConnection
from psycopg.rows import dict_row

import pgqueue
from pgqueue_adapters.psycopg import AsyncPsycopgDriver

pytestmark = pytest.mark.timeout(60)


async def test_single_connection_inside_a_transaction_is_refused(database_url: str, db) -> None:
    conn = await AsyncConnection.connect(database_url)
    try:
        driver = AsyncPsycopgDriver(conn)
        await conn.execute("SELECT 1")  # the caller opened a transaction and left it open
        with pytest.raises(pgqueue.ConfigurationError, match="idle connection"):
            await driver.exec("SELECT 1")
        with pytest.raises(pgqueue.ConfigurationError, match="idle connection"):
            async with driver.with_tx():
                pass
        await conn.rollback()
        assert await driver.query("SELECT 1") == [(1,)]
        assert conn.info.transaction_status.name == "IDLE"  # our statement committed
    finally:
        await conn.close()


async def test_callers_row_factory_does_not_leak_in(database_url: str) -> None:
    conn = await AsyncConnection.connect(database_url, autocommit=True, row_factory=dict_row)
    try:
        driver = AsyncPsycopgDriver(conn)
        assert await driver.query("SELECT 1 AS one") == [(1,)]
        async with conn.transaction():
            tx = pgqueue.AsyncClient(driver)._tx_driver(conn)
            assert await tx.query("SELECT 2 AS two") == [(2,)]
    finally:
        await conn.close()


def test_dedicated_sessions_get_the_password_back() -> None:
    # conn.info.dsn leaves the password out; dedicated sessions (listener, advisory lock) must
    # log in with it. (The test server trusts everyone, so check the conninfo itself.)
    from psycopg.conninfo import conninfo_to_dict

    from pgqueue_adapters.psycopg._async import _dedicated_conninfo

    rebuilt = _dedicated_conninfo("host=h user=u dbname=d", "s3cr3t")
    assert conninfo_to_dict(rebuilt) == {
        "host": "h",
        "user": "u",
        "dbname": "d",
        "password": "s3cr3t",
    }
    assert _dedicated_conninfo("host=h user=u", None) == "host=h user=u"
