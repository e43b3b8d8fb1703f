"""Jobs that open spans of their own, and an instrumented worker process for tests/test_otel.py.

In-process, the tests point ``PROVIDER`` at their own TracerProvider. As the registry of
``pgqueue worker tests.otel_worker:registry --otel`` with ``PGQUEUE_TEST_SPANS`` set, it is the
second process of the two-process trace: on import it sets the global tracer provider to an SDK
one whose exporter appends each ended span to that file as one JSON line, as an application's
registry module would set up its exporter.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import pgqueue
from tests import jobs

# the provider the jobs' own spans go to (the test's, or this process's when run as the worker)
PROVIDER: TracerProvider | None = None


def inner_span(token: str) -> None:
    """Open and end a span of the job's own, which must nest under the attempt's span."""
    assert PROVIDER is not None, "set tests.otel_worker.PROVIDER first"
    with PROVIDER.get_tracer("tests.otel_worker").start_as_current_span("inside") as span:
        span.set_attribute("test.token", token)


@dataclass
class Traced(pgqueue.Worker):
    """Opens a span inside ``process``; fails its first ``failures`` attempts (-1: every one)."""

    token: str
    failures: int = 0

    def process(self, ctx: pgqueue.JobContext) -> None:
        inner_span(self.token)
        jobs.record(self.token, ctx)
        if self.failures < 0 or ctx.attempt <= self.failures:
            raise ValueError(f"attempt {ctx.attempt} failed")


@dataclass
class ATraced(pgqueue.Worker):
    """The async twin of :class:`Traced`."""

    token: str
    failures: int = 0

    async def process(self, ctx: pgqueue.JobContext) -> None:
        await asyncio.sleep(0)
        inner_span(self.token)
        jobs.record(self.token, ctx)
        if self.failures < 0 or ctx.attempt <= self.failures:
            raise ValueError(f"attempt {ctx.attempt} failed")


registry = pgqueue.WorkerRegistry(Traced, ATraced, jobs.Steer, jobs.ABlock)


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """What the tests compare of a span, as plain JSON values (ids as hex)."""
    ctx = span.get_span_context()
    assert ctx is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "links": [
            [f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}"] for link in span.links
        ],
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "events": [event.name for event in span.events],
    }


class JsonLinesExporter(SpanExporter):
    """Appends each ended span to a file, one JSON object per line."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_record(span)) + "\n" for span in spans)
        with self._lock, open(self._path, "a", encoding="utf-8") as out:
            out.write(lines)
        return SpanExportResult.SUCCESS


def configure_from_environment() -> None:
    """Set up the SDK as a user's registry module would, for ``pgqueue worker --otel``.

    With ``PGQUEUE_TEST_SPANS`` set (the worker process of the two-process test), the global
    tracer provider exports each ended span to that file; ``--otel`` instruments the worker's
    client with the global providers.
    """
    global PROVIDER
    path = os.environ.get("PGQUEUE_TEST_SPANS")
    if path is None:
        return
    PROVIDER = TracerProvider()
    PROVIDER.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(path)))
    trace.set_tracer_provider(PROVIDER)


configure_from_environment()
