"""Jobs that open spans of their own, and an instrumented worker process for tests/test_otel.py.

In-process, the tests point ``PROVIDER`` at their own TracerProvider. Run as
``python -m tests.otel_worker`` (with ``PGQUEUE_DSN``, ``PGQUEUE_SCHEMA`` and
``PGQUEUE_TEST_SPANS``), it is the second process of the two-process trace: a sync client with
``pgqueue.otel.instrument`` on an SDK TracerProvider whose exporter appends each ended span to
the ``PGQUEUE_TEST_SPANS`` file as one JSON line; it runs the ``otel`` queue until SIGTERM.
(``pgqueue worker`` builds its client itself and has no hook to instrument it.)
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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


def main() -> None:
    global PROVIDER
    from pgqueue.otel import instrument

    PROVIDER = TracerProvider()
    PROVIDER.add_span_processor(
        SimpleSpanProcessor(JsonLinesExporter(os.environ["PGQUEUE_TEST_SPANS"]))
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    settings = pgqueue.Settings(schema=os.environ["PGQUEUE_SCHEMA"])
    with pgqueue.Client.connect(registry=registry, settings=settings) as client:
        instrument(client, tracer_provider=PROVIDER, metrics=False)
        client.start({"otel": 4}, config=pgqueue.RuntimeConfig(poll_interval=0.2))
        print("ready", flush=True)
        while not stop.wait(0.1):
            pass
        client.stop(5)
    PROVIDER.shutdown()


if __name__ == "__main__":
    main()
