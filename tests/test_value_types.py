"""Value types are defined once and shared by both sides (issue 12, item 15)."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pgqueue

ROOT = Path(__file__).resolve().parent.parent


def test_sync_and_async_get_job_return_the_public_job_info() -> None:
    sync_hints = typing.get_type_hints(pgqueue.Client.get_job)
    async_hints = typing.get_type_hints(pgqueue.AsyncClient.get_job)
    assert sync_hints["return"] == async_hints["return"] == pgqueue.JobInfo | None
    assert pgqueue.JobInfo.__module__ == "pgqueue"
    assert repr(pgqueue.JobInfo).endswith("pgqueue.JobInfo'>")


def _dataclasses_in(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                name = (
                    target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
                )
                if name == "dataclass":
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    return found


def test_no_value_type_is_defined_in_a_generated_pair() -> None:
    # A dataclass in pgqueue/_async would be generated again into pgqueue/_sync: two classes,
    # isinstance False across them, and mypy rejecting one for the other. They belong in a
    # shared module (pgqueue/records.py, jobs.py, execution.py...).
    sources = sorted((ROOT / "pgqueue" / "_async").glob("*.py"))
    sources += sorted((ROOT / "pgqueue_adapters").glob("*/_async.py"))
    assert sources
    assert [found for path in sources for found in _dataclasses_in(path)] == []
