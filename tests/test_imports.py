"""The core imports no database library, and drivers are resolved by name (no database)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pgqueue
from pgqueue.adapter_registry import (
    _ADAPTERS,
    DRIVER_ENV_VAR,
    Adapter,
    asyncio_only,
    describe_driver,
    driver_names,
    load_adapter,
    resolve_driver_name,
)

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
# a Django models module can only be imported once Django's settings are configured
NEEDS_DJANGO_SETTINGS = {"pgqueue.contrib.django.models"}
for info in pkgutil.walk_packages(pgqueue.__path__, "pgqueue."):
    if info.name in NEEDS_DJANGO_SETTINGS:
        continue
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


def test_reading_adapters_imports_no_database_library() -> None:
    # The registry reads every adapter's capabilities to resolve a URL or log a driver's name;
    # only an entry point may import the library (and load_adapter says what to install).
    result = run_python(
        BLOCK_DRIVERS
        + """
import pgqueue
from pgqueue.adapter_registry import asyncio_only, describe_driver, load_adapter
from pgqueue.adapter_registry import resolve_driver_name

assert resolve_driver_name("postgresql+asyncpg://x/y", None) == ("asyncpg", "postgresql://x/y")
assert asyncio_only("postgresql+asyncpg://x/y", "sqlalchemy")
assert not asyncio_only("postgresql://x/y", "sqlalchemy")
assert describe_driver("postgresql+asyncpg://x/y", "sqlalchemy") == "sqlalchemy (asyncpg)"
try:
    load_adapter("asyncpg")
except pgqueue.DriverNotInstalled as exc:
    assert "pip install 'pgqueue[asyncpg]'" in str(exc), str(exc)
else:
    raise AssertionError("load_adapter did not raise DriverNotInstalled")
assert not [m for m in sys.modules if m.split(".")[0] in BLOCKED], "a blocked module loaded"
print("READ-OK")
"""
    )
    assert "READ-OK" in result.stdout.splitlines()


# -- the adapters ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", driver_names())
def test_every_adapter_implements_the_protocol(name: str) -> None:
    adapter = load_adapter(name)
    assert isinstance(adapter, Adapter)
    package = importlib.import_module(_ADAPTERS[name].module)
    assert package.ADAPTER is adapter
    # every name the package exports resolves (the driver classes are imported on first use)
    for exported in package.__all__:
        assert getattr(package, exported) is not None, exported
    assert all(scheme == scheme.lower() and "+" in scheme for scheme in adapter.url_schemes)
    assert adapter.native_modules
    for url in (None, "postgresql://u@h/db", *(f"{s}://u@h/db" for s in adapter.url_schemes)):
        reading = adapter.read_url(url)
        assert reading.description.startswith(name), reading
        # an adapter without a sync side is asyncio-only whatever the URL
        assert asyncio_only(url, name) is (not adapter.has_sync or reading.asyncio_only)
        assert describe_driver(url, name) == reading.description


def test_url_schemes_name_one_adapter_each() -> None:
    schemes = [s for name in driver_names() for s in load_adapter(name).url_schemes]
    assert len(schemes) == len(set(schemes)), schemes


def _string_constants(tree: ast.AST, skip: ast.AST | None) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if node is skip:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append((node.lineno, node.value))
        stack.extend(ast.iter_child_nodes(node))
    return found


def test_the_core_names_no_driver_outside_the_registry_table() -> None:
    # The core asks adapters what they can do; only the registry's table names them. A
    # string that is a driver's name, URL scheme or package is a driver fact leaking out.
    # ("psycopg" stays allowed: Django's backend runs on it, see pgqueue/frameworks.py.)
    forbidden = {name for name in driver_names() if name != "psycopg"}
    for name in driver_names():
        forbidden.update(load_adapter(name).url_schemes)
        forbidden.add(_ADAPTERS[name].module)
    offenders = []
    for path in sorted((REPO / "pgqueue").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        table = None
        if path.name == "adapter_registry.py":
            table = next(
                node
                for node in tree.body
                if isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.target.id == "_ADAPTERS"
            )
        for line, value in _string_constants(tree, table):
            if value.lower() in forbidden:
                offenders.append(f"{path.relative_to(REPO)}:{line}: {value!r}")
    assert not offenders, offenders


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
