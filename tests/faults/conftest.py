"""Fixtures of the fault suite: one :class:`~tests.faults.harness.Fleet` per test and mode."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Db
from tests.faults.harness import ALL_MODES, Fleet


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Marked "faults" so that the default run (-m 'not faults') leaves them to make test-faults.
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.faults)
            item.add_marker(pytest.mark.timeout(300))


def _selected_modes() -> tuple[str, ...]:
    chosen = [m.strip() for m in os.environ.get("PGQUEUE_FAULT_MODES", "").split(",") if m.strip()]
    unknown = set(chosen) - set(ALL_MODES)
    if unknown:
        raise pytest.UsageError(
            f"PGQUEUE_FAULT_MODES: unknown mode(s) {sorted(unknown)}; choose from {ALL_MODES}"
        )
    return tuple(chosen) or ALL_MODES


@pytest.fixture(params=_selected_modes())
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def fleet(mode: str, database_url: str, schema: str, tmp_path: Path, db: Db) -> Iterator[Fleet]:
    f = Fleet(mode, database_url, schema, tmp_path, db)
    f.setup()
    try:
        yield f
    finally:
        f.kill_all()
