"""The Prometheus collector's counts of ended attempts (issue 16).

The collector counts them in plain numbers and builds the metrics at scrape time, which costs a
worker a quarter of what prometheus_client's Counter and Histograms did per job
(benchmarks/observability.py); the exposition must be what those would give for the same events.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import pgqueue
from pgqueue.events import (
    JobCancelled,
    JobCompleted,
    JobFailed,
    JobFinished,
    JobReleased,
    JobSnoozed,
)
from pgqueue.prometheus import collector

pytestmark = pytest.mark.timeout(60)

FAMILIES = (
    "pgqueue_jobs_finished",
    "pgqueue_job_duration_seconds",
    "pgqueue_job_queue_wait_seconds",
)
BUCKETS = (0.1, 1.0, 10.0)


def events() -> list[JobFinished]:
    """Every outcome, on bucket bounds, between them, past the last, with no duration or wait."""
    instance = uuid.uuid4()
    kinds = [
        (JobCompleted, "completed"),
        (JobFailed, "retry"),
        (JobFailed, "failed"),
        (JobCancelled, "cancelled"),
        (JobSnoozed, "snoozed"),
        (JobReleased, "released"),
    ]
    values: list[float | None] = [None, 0.0, 0.05, 0.1, 0.5, 1.0, 9.99, 10.0, 11.0, 1e6, -0.5]
    out: list[JobFinished] = []
    for i, (cls, outcome) in enumerate(kinds * 3):
        for j, duration in enumerate(values):
            wait = values[(i + j) % len(values)]
            out.append(
                cls(
                    id=i * 100 + j,
                    kind=("a.b", "c")[i % 2],
                    queue=("default", "other", "default")[i % 3],
                    attempt=1,
                    max_attempts=3,
                    instance_id=instance,
                    outcome=outcome,  # type: ignore[arg-type]
                    duration=None if duration is None else abs(duration),
                    queue_wait=wait,
                )
            )
    return out


def families(text: str) -> dict[str, Any]:
    """The three families' type, help and samples (a _created sample's time left out)."""
    return {
        f.name: (
            f.type,
            f.documentation,
            sorted(
                (s.name, sorted(s.labels.items()), None if s.name.endswith("_created") else s.value)
                for s in f.samples
            ),
        )
        for f in text_string_to_metric_families(text)
        if f.name in FAMILIES
    }


def prometheus_clients_own(ended: list[JobFinished], reference: dict[str, Any]) -> str:
    """What prometheus_client's own metrics expose for the same events."""
    registry = CollectorRegistry()
    labels = ["queue", "kind"]
    docs = {name: reference[name][1] for name in FAMILIES}
    finished = Counter(FAMILIES[0], docs[FAMILIES[0]], [*labels, "outcome"], registry=registry)
    duration = Histogram(FAMILIES[1], docs[FAMILIES[1]], labels, registry=registry, buckets=BUCKETS)
    wait = Histogram(FAMILIES[2], docs[FAMILIES[2]], labels, registry=registry, buckets=BUCKETS)
    for e in ended:
        finished.labels(e.queue, e.kind, e.outcome).inc()
        timing = duration.labels(e.queue, e.kind), wait.labels(e.queue, e.kind)
        if e.duration is not None:
            timing[0].observe(e.duration)
        if e.queue_wait is not None and e.outcome != "released":
            timing[1].observe(max(e.queue_wait, 0.0))
    return generate_latest(registry).decode()


def test_the_counts_buckets_and_sums_are_prometheus_clients(
    database_url: str, settings: pgqueue.Settings
) -> None:
    ended = events()
    with pgqueue.Client.connect(database_url, settings=settings) as client:
        registry = CollectorRegistry()
        built = collector(client, registry=registry, database="never", buckets=BUCKETS)
        for event in ended:
            client.events.emit(event)
        ours = families(generate_latest(registry).decode())
        built.close()
    assert set(ours) == set(FAMILIES)
    assert ours == families(prometheus_clients_own(ended, ours))
    # every outcome counted, and the counts add up to the events
    total = sum(v for name, _, v in ours[FAMILIES[0]][2] if name.endswith("_total"))
    assert total == len(ended)
