"""Reference tables of the docs that must list every field of the type they describe."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pgqueue

DOCS = Path(__file__).resolve().parent.parent / "docs"


def table_names(page: str, heading: str) -> list[str]:
    """The backticked names in the first column of the first table under ``heading``."""
    text = (DOCS / page).read_text()
    section = text[text.index(f"\n{heading}\n") :]
    names: list[str] = []
    in_table = False
    for line in section.splitlines()[1:]:
        if line.startswith("|"):
            in_table = True
            first = line.split("|")[1]
            names += re.findall(r"(?:^|,)\s*`(\w+)`", first)  # "`kind`, `queue`": both
        elif in_table:
            break
    return names


def test_the_options_table_lists_every_job_option_and_on_conflict() -> None:
    names = table_names("jobs.md", "## Options")
    fields = [f.name for f in dataclasses.fields(pgqueue.JobOptions)]
    assert names == [*fields, "on_conflict"]


def test_the_handle_table_lists_every_field_of_job_handle() -> None:
    names = table_names("jobs.md", "## The job handle")
    assert names == [f.name for f in dataclasses.fields(pgqueue.JobHandle)]


def test_the_events_table_lists_every_event_type() -> None:
    import pgqueue.events as events

    names = table_names("jobs.md", "## Events")
    types = {
        name
        for name in events.__all__
        if isinstance(getattr(events, name), type)
        and issubclass(getattr(events, name), events.Event)
        and name != "Event"
    }
    assert sorted(names) == sorted(types)
