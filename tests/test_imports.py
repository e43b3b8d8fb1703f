"""The core imports no database library, and drivers are resolved by name (no database)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pgqueue
from pgqueue.adapter_registry import DRIVER_ENV_VAR, driver_names, resolve_driver_name

REPO = Path(__file__).resolve().parent.parent
DRIVER_LIBRARIES = ("psycopg", "psycopg_pool", "asyncpg", "sqlalchemy")

# Imports pgqueue and every module under it. ``pgqueue.__main__`` runs the CLI when imported,
# so it is imported as ``python -m pgqueue sql`` would run it (that command needs no driver).
IMPORT_EVERYTHING = """
import contextlib
import importlib
import io
import pkgutil
import sys

import pgqueue

imported = ["pgqueue"]
for info in pkgutil.walk_packages(pgqueue.__path__, "pgqueue."):
    if info.name == "pgqueue.__main__":
        sys.argv = ["pgqueue", "sql"]
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                importlib.import_module(info.name)
        except SystemExit as exc:
            assert exc.code == 0, exc.code
        else:
            raise AssertionError("python -m pgqueue did not exit")
        assert "CREATE TABLE" in out.getvalue()
    else:
        importlib.import_module(info.name)
    imported.append(info.name)
print("\\n".join(imported))
"""

BLOCK_DRIVERS = f"""
import importlib.abc
import sys

BLOCKED = {DRIVER_LIBRARIES!r}


class _Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {{fullname!r}} (blocked by the test)")
        return None


sys.meta_path.insert(0, _Blocker())
"""


def run_python(script: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


def test_importing_every_module_loads_no_database_library() -> None:
    result = run_python(
        IMPORT_EVERYTHING
        + f"""
loaded = sorted(
    name for name in sys.modules if name.split(".")[0] in {DRIVER_LIBRARIES!r}
)
assert not loaded, f"pgqueue imported database libraries: {{loaded}}"
"""
    )
    imported = set(result.stdout.split())
    # the walk really went through the package, including the generated sync side
    expected = {
        "pgqueue",
        "pgqueue.cli",
        "pgqueue.adapter_registry",
        "pgqueue.enqueue",
        "pgqueue.jobs",
        "pgqueue.queries",
        "pgqueue.__main__",
        "pgqueue._async.client",
        "pgqueue._sync.client",
        "pgqueue._sync.schema",
    }
    assert expected <= imported, expected - imported


def test_pgqueue_works_without_driver_libraries() -> None:
    result = run_python(
        BLOCK_DRIVERS
        + """
try:
    import psycopg
except ImportError:
    pass
else:
    raise AssertionError("the blocker did not block psycopg")
"""
        + IMPORT_EVERYTHING
        + """
try:
    pgqueue.Client.connect("postgresql://x/y", driver="psycopg")
except pgqueue.DriverNotInstalled as exc:
    message = str(exc)
    assert "pip install 'pgqueue[psycopg]'" in message, message
    assert isinstance(exc, pgqueue.ConfigurationError)
    print("DRIVER-NOT-INSTALLED-OK")
else:
    raise AssertionError("Client.connect did not raise DriverNotInstalled")

import asyncio

try:
    asyncio.run(pgqueue.AsyncClient.connect("postgresql://x/y", driver="psycopg"))
except pgqueue.DriverNotInstalled as exc:
    assert "pip install 'pgqueue[psycopg]'" in str(exc), str(exc)
    print("ASYNC-DRIVER-NOT-INSTALLED-OK")
else:
    raise AssertionError("AsyncClient.connect did not raise DriverNotInstalled")

assert not [m for m in sys.modules if m.split(".")[0] in BLOCKED], "a blocked module loaded"
"""
    )
    lines = result.stdout.splitlines()
    assert "pgqueue._sync.client" in lines
    assert "DRIVER-NOT-INSTALLED-OK" in lines
    assert "ASYNC-DRIVER-NOT-INSTALLED-OK" in lines


# -- resolve_driver_name -----------------------------------------------------------------------


@pytest.fixture
def no_driver_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv(DRIVER_ENV_VAR, raising=False)
    return monkeypatch


def test_known_drivers() -> None:
    assert driver_names() == ["asyncpg", "psycopg", "sqlalchemy"]


def test_unknown_driver_name_raises_configuration_error(
    no_driver_env: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(pgqueue.ConfigurationError) as info:
        resolve_driver_name("postgresql://x/y", "mysql")
    message = str(info.value)
    assert "'mysql'" in message
    for name in driver_names():
        assert name in message


def test_client_connect_with_unknown_driver_raises_configuration_error(
    no_driver_env: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(pgqueue.ConfigurationError, match=r"unknown driver 'nope'.*psycopg"):
        pgqueue.Client.connect("postgresql://x/y", driver="nope")


def test_default_driver_is_psycopg(no_driver_env: pytest.MonkeyPatch) -> None:
    assert resolve_driver_name("postgresql://u@h/db", None) == ("psycopg", "postgresql://u@h/db")
    assert resolve_driver_name(None, None) == ("psycopg", None)
    assert resolve_driver_name("host=h dbname=db", None) == ("psycopg", "host=h dbname=db")


def test_explicit_driver_beats_environment(no_driver_env: pytest.MonkeyPatch) -> None:
    no_driver_env.setenv(DRIVER_ENV_VAR, "from-env")
    assert resolve_driver_name("postgresql://x/y", "psycopg") == ("psycopg", "postgresql://x/y")
    no_driver_env.setenv(DRIVER_ENV_VAR, "psycopg")
    with pytest.raises(pgqueue.ConfigurationError, match="'explicit'"):
        resolve_driver_name("postgresql://x/y", "explicit")


def test_url_scheme_beats_environment(no_driver_env: pytest.MonkeyPatch) -> None:
    # the URL names its driver explicitly; the environment is only a default
    no_driver_env.setenv(DRIVER_ENV_VAR, "from-env")
    assert resolve_driver_name("postgresql+psycopg://x/y", None) == ("psycopg", "postgresql://x/y")
    with pytest.raises(pgqueue.ConfigurationError, match="'from-env'"):
        resolve_driver_name("postgresql://x/y", None)
    no_driver_env.setenv(DRIVER_ENV_VAR, "psycopg")
    assert resolve_driver_name("postgresql://x/y", None) == ("psycopg", "postgresql://x/y")


def test_empty_environment_variable_is_ignored(no_driver_env: pytest.MonkeyPatch) -> None:
    no_driver_env.setenv(DRIVER_ENV_VAR, "")
    assert resolve_driver_name("postgresql://x/y", None) == ("psycopg", "postgresql://x/y")


def test_explicit_driver_beats_url_scheme(no_driver_env: pytest.MonkeyPatch) -> None:
    with pytest.raises(pgqueue.ConfigurationError, match="'explicit'"):
        resolve_driver_name("postgresql+psycopg://x/y", "explicit")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgresql+psycopg://u:p@h:5432/db?sslmode=disable",
            "postgresql://u:p@h:5432/db?sslmode=disable",
        ),
        ("postgres+psycopg://u@h/db", "postgresql://u@h/db"),
        ("POSTGRESQL+PSYCOPG://u@h/db", "postgresql://u@h/db"),
    ],
)
def test_url_scheme_names_the_driver_and_is_stripped(
    no_driver_env: pytest.MonkeyPatch, url: str, expected: str
) -> None:
    name, cleaned = resolve_driver_name(url, None)
    assert name == "psycopg"
    assert cleaned == expected
    assert "+psycopg" not in (cleaned or "").lower()


def test_unknown_scheme_driver_raises_configuration_error(
    no_driver_env: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(pgqueue.ConfigurationError, match=r"postgresql\+foo") as info:
        resolve_driver_name("postgresql+foo://u@h/db", None)
    assert "psycopg" in str(info.value)
