"""The pytest plugin itself, run in inner pytest sessions (pytester): loading, skipping, opt-out.

It also runs docs/testing.md's example, whose code blocks starting with ``# file: <path>`` are
the files of a small project.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs_examples import page_blocks

from .conftest import Db

pytest_plugins = ["pytester"]

DOCS = Path(__file__).resolve().parent.parent / "docs" / "testing.md"
DSN_VARIABLES = ("PGQUEUE_TEST_DSN", "PGQUEUE_DSN", "DATABASE_URL")
# nothing listens there: a connection attempt fails at once
NO_SERVER = "postgresql://nobody@127.0.0.1:1/nothing"
# the inner sessions have no ini of ours: pytest-asyncio would warn about this one
QUIET = ("-p", "no:cacheprovider", "-o", "asyncio_default_fixture_loop_scope=function")

USES_A_CLIENT = """
def test_enqueue(pgqueue_client):
    assert pgqueue_client.list_jobs().jobs == []


def test_plain():
    assert True
"""


@pytest.fixture(autouse=True)
def _no_dsn_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in DSN_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def example_files() -> dict[str, str]:
    # the page's files as a reader saves them (tests/docs_examples.py), but its conftest.py: it
    # overrides the database fixture, which this test gives with --pgqueue-dsn
    blocks = page_blocks(DOCS)
    return {b.file: b.code for b in blocks if b.file and b.file != "tests/conftest.py"}


def test_the_docs_example_runs(pytester: pytest.Pytester, database_url: str, db: Db) -> None:
    files = example_files()
    assert set(files) == {
        "shop/jobs.py",
        "pyproject.toml",
        "tests/test_signup.py",
        "tests/test_more.py",
    }
    for path, text in files.items():
        target = pytester.path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    schemas = "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'pgqueue_test_%'"
    before = db.value(schemas)
    result = pytester.runpytest_inprocess("--pgqueue-dsn", database_url, *QUIET)
    result.assert_outcomes(passed=6)
    assert db.value(schemas) == before  # every schema the fixtures made was dropped


def test_without_a_database_the_fixtures_skip(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(USES_A_CLIENT)
    result = pytester.runpytest_inprocess("-rs", *QUIET)
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*pgqueue: no database for the pgqueue fixtures: pass --pgqueue-dsn=URL or set "
            "$PGQUEUE_TEST_DSN, $PGQUEUE_DSN, $DATABASE_URL*"
        ]
    )


def test_the_database_is_touched_only_by_tests_that_use_a_fixture(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(USES_A_CLIENT)
    result = pytester.runpytest_inprocess("--pgqueue-dsn", NO_SERVER, *QUIET)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*ConnectionLost*"])


def test_opting_out_and_a_bad_registry(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(USES_A_CLIENT)
    result = pytester.runpytest_inprocess("-p", "no:pgqueue", *QUIET)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*fixture 'pgqueue_client' not found*"])

    pytester.makeini("[pytest]\npgqueue_registry = nowhere_to_be_found:registry\n")
    pytester.makepyfile(
        "def test_registry(pgqueue_registry):\n    pass\n",
    )
    result = pytester.runpytest_inprocess(*QUIET)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*pgqueue_registry = nowhere_to_be_found:registry*import*"])
