"""OpenTelemetry (issue 16): send and process spans, the stored trace context, the OTel metrics.

The SDK's in-memory exporter and metric reader on providers passed to ``instrument`` (the
global providers are never set in this process); real workers on a real database, in-process
(sync and asyncio) and as a second process (``pgqueue worker tests.otel_worker:registry
--otel``) for the trace that crosses processes.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from psycopg import Connection

import pgqueue
from pgqueue.otel import OtelInstrumentation, instrument
from tests import jobs, otel_worker
from tests._sync.helpers import wait_until
from tests.otel_worker import ATraced, Traced, span_record
from tests.test_cli_runtime import ROOT, clean_env

pytestmark = pytest.mark.timeout(120)

FAST = pgqueue.RuntimeConfig(poll_interval=0.2, retry_backoff=0.05, retry_backoff_max=0.1)
PROCESS_COMMON = {
    "messaging.system": "pgqueue",
    "messaging.operation.type": "process",
    "messaging.operation.name": "process",
    "messaging.destination.name": "otel",
}


class Telemetry:
    """A TracerProvider with an in-memory exporter and a MeterProvider with an in-memory reader."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def instrument(self, client: pgqueue.Client | pgqueue.AsyncClient, **kw: Any) -> Any:
        return instrument(
            client,
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
            **kw,
        )

    def spans(self, name: str | None = None, **attributes: Any) -> list[ReadableSpan]:
        found = self.exporter.get_finished_spans()
        return [
            s
            for s in found
            if (name is None or s.name == name)
            and all((s.attributes or {}).get(k) == v for k, v in attributes.items())
        ]

    def process_spans(self, job_id: int, count: int = 1) -> list[ReadableSpan]:
        """Wait for ``count`` attempt spans of a job; return them, first attempt first."""

        def enough() -> list[ReadableSpan] | None:
            got = self.spans("process otel", **{"messaging.message.id": str(job_id)})
            return got if len(got) >= count else None

        found = wait_until(enough, 20, what=f"{count} process span(s) of job {job_id}")
        return sorted(found, key=lambda s: (s.attributes or {})["pgqueue.job.attempt"])

    def send_span(self, job_id: int) -> ReadableSpan:
        (span,) = self.spans(
            **{"messaging.message.id": str(job_id), "messaging.operation.type": "send"}
        )
        return span

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            if scope.scope.name == "pgqueue"
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    t = Telemetry()
    otel_worker.PROVIDER = t.tracer_provider
    yield t
    otel_worker.PROVIDER = None
    t.shutdown()


def context_of(span: ReadableSpan) -> tuple[int, int]:
    ctx = span.get_span_context()
    assert ctx is not None
    return ctx.trace_id, ctx.span_id


def links_of(span: ReadableSpan) -> list[tuple[int, int]]:
    return [(link.context.trace_id, link.context.span_id) for link in span.links]


def stored_trace(db: Any, schema: str, job_id: int) -> Any:
    return db.value(f'SELECT options FROM "{schema}".pgqueue_jobs WHERE id = $1', (job_id,))[
        "trace"
    ]


def inner_of(t: Telemetry, process: ReadableSpan) -> ReadableSpan:
    """The span the job's own code opened during the attempt ``process``."""
    (inner,) = [
        s for s in t.spans("inside") if s.parent and s.parent.span_id == context_of(process)[1]
    ]
    return inner


# -- the sync client, in-process ----------------------------------------------------------------


def test_sync_client_send_and_process_spans_and_metrics(
    database_url: str, schema: str, db: Any, telemetry: Telemetry
) -> None:
    t = telemetry
    settings = pgqueue.Settings(schema=schema)
    client = pgqueue.Client.connect(database_url, registry=otel_worker.registry, settings=settings)
    plain = pgqueue.Client.connect(database_url, settings=settings)  # enqueues with no tracer
    try:
        client.migrate()
        client.start({"otel": 4}, config=FAST)
        inst = t.instrument(client)  # after start(): the running runtime picks the tracer up
        with pytest.raises(pgqueue.ConfigurationError, match="already has a tracer"):
            t.instrument(client)

        # a job that succeeds: linked (its own trace), its own span a child of the attempt's
        ok = client.add_job(Traced(token=uuid.uuid4().hex), queue="otel")
        (run,) = t.process_spans(ok.id)
        send = t.send_span(ok.id)
        assert send.name == "send otel"
        assert send.kind is SpanKind.PRODUCER
        assert dict(send.attributes or {}) == {
            "messaging.system": "pgqueue",
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
            "messaging.destination.name": "otel",
            "messaging.message.id": str(ok.id),
            "pgqueue.job.kind": "traced",
        }
        assert send.status.status_code is StatusCode.UNSET
        trace_id, span_id = context_of(send)
        assert (
            stored_trace(db, schema, ok.id)["traceparent"]
            == f"00-{trace_id:032x}-{span_id:016x}-{send.context.trace_flags:02x}"
        )
        assert run.kind is SpanKind.CONSUMER
        assert dict(run.attributes or {}) == {
            **PROCESS_COMMON,
            "messaging.message.id": str(ok.id),
            "pgqueue.job.kind": "traced",
            "pgqueue.job.attempt": 1,
            "pgqueue.job.max_attempts": 25,
        }
        assert run.parent is None  # a new trace...
        assert context_of(run)[0] != trace_id
        assert links_of(run) == [(trace_id, span_id)]  # ...linked to the enqueue
        assert run.status.status_code is StatusCode.UNSET
        assert context_of(inner_of(t, run))[0] == context_of(run)[0]
        # an async process() under the sync runtime (its own event loop) is wrapped alike
        aok = client.add_job(ATraced(token=uuid.uuid4().hex), queue="otel")
        (arun,) = t.process_spans(aok.id)
        assert links_of(arun) == [context_of(t.send_span(aok.id))]
        assert context_of(inner_of(t, arun))[0] == context_of(arun)[0]

        # a failing attempt, then a retry that succeeds: both link to the same enqueue
        flaky = client.add_job(Traced(token=uuid.uuid4().hex, failures=1), queue="otel")
        first, second = t.process_spans(flaky.id, 2)
        sent_ctx = context_of(t.send_span(flaky.id))
        for attempt in (first, second):
            assert links_of(attempt) == [sent_ctx]
        assert first.status.status_code is StatusCode.ERROR
        assert first.status.description == "ValueError: attempt 1 failed"
        assert (first.attributes or {})["error.type"] == "ValueError"
        (event,) = first.events
        assert event.name == "exception"
        assert (event.attributes or {})["exception.type"] == "ValueError"
        assert second.status.status_code is StatusCode.UNSET
        assert "error.type" not in (second.attributes or {})
        assert (second.attributes or {})["pgqueue.job.attempt"] == 2

        # pgqueue's own ways to end an attempt: a snooze and a cancel are not errors, a
        # discard is
        steered = {
            what: client.add_job(jobs.Steer(token=uuid.uuid4().hex, what=what), queue="otel")
            for what in ("retry", "cancel", "discard")
        }
        snoozed, after_snooze = t.process_spans(steered["retry"].id, 2)
        assert (snoozed.attributes or {})["pgqueue.job.outcome"] == "snoozed"
        assert snoozed.status.status_code is StatusCode.UNSET
        assert not snoozed.events
        assert (
            links_of(after_snooze)
            == links_of(snoozed)
            == [context_of(t.send_span(steered["retry"].id))]
        )
        (cancelled,) = t.process_spans(steered["cancel"].id)
        assert (cancelled.attributes or {})["pgqueue.job.outcome"] == "cancelled"
        assert cancelled.status.status_code is StatusCode.UNSET
        (discarded,) = t.process_spans(steered["discard"].id)
        assert discarded.status.status_code is StatusCode.ERROR
        assert (discarded.attributes or {})["error.type"] == "Discard"

        # inside the caller's transaction: the send span says so
        with Connection.connect(database_url) as conn:
            in_tx = client.add_job_with_tx(conn, Traced(token=uuid.uuid4().hex), queue="otel")
        assert (t.send_span(in_tx.id).attributes or {})["pgqueue.in_transaction"] is True
        t.process_spans(in_tx.id)

        # a job enqueued without a tracer: no link, its parent the worker's current context
        untraced = plain.add_job(Traced(token=uuid.uuid4().hex), queue="otel")
        (bare,) = t.process_spans(untraced.id)
        assert bare.parent is None
        assert not bare.links

        # link=False: the attempt is the enqueue span's child, in its trace
        inst.uninstrument()
        inst.uninstrument()  # idempotent
        assert client.events.tracer is None
        child_inst = t.instrument(client, link=False)
        app = t.tracer_provider.get_tracer("app")
        with app.start_as_current_span("request") as request:  # the enqueue's parent
            child = client.add_job(Traced(token=uuid.uuid4().hex), queue="otel")
        (child_run,) = t.process_spans(child.id)
        child_send = t.send_span(child.id)
        assert child_send.parent is not None
        assert child_send.parent.span_id == request.get_span_context().span_id
        assert child_run.parent is not None
        assert (child_run.parent.trace_id, child_run.parent.span_id) == context_of(child_send)
        assert not child_run.links
        assert context_of(inner_of(t, child_run))[0] == context_of(child_send)[0]
        child_inst.uninstrument()
        # after uninstrument: no more spans
        before = len(t.spans())
        quiet = client.add_job(jobs.Steer(token=uuid.uuid4().hex, what="cancel"), queue="otel")
        wait_until(
            lambda: client.get_job(quiet.id).status == "cancelled", 20, what="the quiet job ran"
        )
        assert len(t.spans()) == before
    finally:
        client.close()
        plain.close()

    # metrics: attributes by queue, kind and outcome; never a job id
    durations = {
        (
            p.attributes["pgqueue.job.kind"],
            p.attributes["pgqueue.job.outcome"],
            p.attributes.get("error.type"),
        ): p
        for p in t.points("messaging.process.duration")
    }
    completed = durations[("traced", "completed", None)]
    assert dict(completed.attributes) == {
        "messaging.system": "pgqueue",
        "messaging.operation.name": "process",
        "messaging.destination.name": "otel",
        "pgqueue.job.kind": "traced",
        "pgqueue.job.outcome": "completed",
    }
    assert completed.count == 5  # ok, flaky's 2nd attempt, in_tx, untraced, child
    assert durations[("traced", "retry", "ValueError")].count == 1
    assert durations[("steer", "failed", "_OTHER")].count == 1  # the discard
    assert {k[1] for k in durations if k[0] == "steer"} == {
        "snoozed",
        "completed",
        "cancelled",
        "failed",
    }
    consumed = {
        (p.attributes["pgqueue.job.kind"], p.attributes["pgqueue.job.outcome"]): p.value
        for p in t.points("messaging.client.consumed.messages")
    }
    assert consumed[("traced", "completed")] == 5
    assert consumed[("traced", "retry")] == 1
    sent = {p.attributes["pgqueue.job.kind"]: p for p in t.points("messaging.client.sent.messages")}
    assert dict(sent["traced"].attributes) == {
        "messaging.system": "pgqueue",
        "messaging.operation.name": "send",
        "messaging.destination.name": "otel",
        "pgqueue.job.kind": "traced",
    }
    assert sent["traced"].value == 4  # the untraced job came from another client
    waits = {p.attributes["pgqueue.job.kind"]: p for p in t.points("pgqueue.job.queue_wait")}
    assert waits["traced"].count == 6
    assert waits["traced"].min >= 0
    for name in (
        "messaging.process.duration",
        "messaging.client.consumed.messages",
        "messaging.client.sent.messages",
        "pgqueue.job.queue_wait",
    ):
        for point in t.points(name):
            assert "messaging.message.id" not in point.attributes, name


# -- the asyncio client, in-process -------------------------------------------------------------


async def test_async_client_spans_batches_and_a_failed_insert(
    database_url: str, schema: str, telemetry: Telemetry
) -> None:
    from tests._async.helpers import wait_until as async_wait

    t = telemetry
    client = await pgqueue.AsyncClient.connect(
        database_url.replace("postgresql://", "postgresql+asyncpg://", 1),
        registry=otel_worker.registry,
        settings=pgqueue.Settings(schema=schema),
    )
    try:
        await client.migrate()
        inst: OtelInstrumentation = t.instrument(client)
        # a batch over two queues: one span "send" with no destination, a context per job
        handles = await client.add_jobs(
            [
                (ATraced(token="a"), pgqueue.JobOptions(queue="otel")),
                (ATraced(token="b", failures=-1), pgqueue.JobOptions(queue="otel", max_attempts=1)),
                (Traced(token="c"), pgqueue.JobOptions(queue="other")),
            ]
        )
        (batch,) = t.spans("send")
        assert dict(batch.attributes or {}) == {
            "messaging.system": "pgqueue",
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
            "messaging.batch.message_count": 3,
        }
        # a duplicate job_id: the insert raises through the span
        await client.add_job(ATraced(token="d"), queue="otel", job_id="only-once")
        with pytest.raises(pgqueue.JobIdConflict):
            await client.add_job(ATraced(token="d"), queue="otel", job_id="only-once")
        failed_send = t.spans("send otel")[-1]
        assert failed_send.status.status_code is StatusCode.ERROR
        assert (failed_send.attributes or {})["error.type"] == "JobIdConflict"
        assert [e.name for e in failed_send.events] == ["exception"]

        await client.start({"otel": 4}, config=FAST)

        def run_of(job_id: int) -> list[ReadableSpan]:
            return t.spans("process otel", **{"messaging.message.id": str(job_id)})

        ok_run, failed_run = [
            (await async_wait(lambda h=h: run_of(h.id), 20, what=f"job {h.id} ran"))[0]
            for h in handles[:2]
        ]
        for run in (ok_run, failed_run):
            assert links_of(run) == [context_of(batch)]
        assert dict(ok_run.attributes or {}) == {
            **PROCESS_COMMON,
            "messaging.message.id": str(handles[0].id),
            "pgqueue.job.kind": "a_traced",
            "pgqueue.job.attempt": 1,
            "pgqueue.job.max_attempts": 25,
        }
        assert ok_run.status.status_code is StatusCode.UNSET
        assert context_of(inner_of(t, ok_run))[0] == context_of(ok_run)[0]
        assert failed_run.status.status_code is StatusCode.ERROR
        assert (failed_run.attributes or {})["error.type"] == "ValueError"
        # a duplicate refused with on_conflict="ignore": the span names the job that exists
        again = await client.add_job(
            ATraced(token="d"), queue="otel", job_id="only-once", on_conflict="ignore"
        )
        ignored = t.spans("send otel")[-1]
        assert (ignored.attributes or {})["messaging.message.id"] == str(again.id)
        assert (ignored.attributes or {})["pgqueue.job.conflict"] == "job_id"
        assert ignored.status.status_code is StatusCode.UNSET

        # a timeout cuts the coroutine off: an error of type "timeout" (the job's stored
        # options keep its timeout next to the trace context)
        slow = await client.add_job(
            jobs.ABlock(token=uuid.uuid4().hex, seconds=30),
            queue="otel",
            timeout=timedelta(seconds=0.2),
            max_attempts=1,
        )
        (timed_out,) = await async_wait(lambda: run_of(slow.id), 20, what="the timeout")
        assert timed_out.status.status_code is StatusCode.ERROR
        assert timed_out.status.description == "timed out after 0.2s"
        assert (timed_out.attributes or {})["error.type"] == "timeout"
        assert links_of(timed_out) == [context_of(t.send_span(slow.id))]
        inst.uninstrument()
    finally:
        await client.close()


# -- two processes ------------------------------------------------------------------------------


def test_a_trace_across_two_processes(
    database_url: str, schema: str, db: Any, tmp_path: Path, telemetry: Telemetry
) -> None:
    t = telemetry
    settings = pgqueue.Settings(schema=schema)
    client = pgqueue.Client.connect(database_url, settings=settings)
    client.migrate()
    t.instrument(client)
    ok = client.add_job(Traced(token="ok"), queue="otel")
    failing = client.add_job(Traced(token="fail", failures=-1), queue="otel", max_attempts=1)
    client.close()
    spans_file = tmp_path / "spans.jsonl"
    spans_file.touch()
    env = {
        **clean_env(),
        "PGQUEUE_DSN": database_url,
        "PGQUEUE_SCHEMA": schema,
        "PGQUEUE_TEST_SPANS": str(spans_file),
    }
    # the worker as users run it: `pgqueue worker --otel`, the SDK set up by the registry module
    worker = ["worker", "tests.otel_worker:registry", "--otel", "--queues", "otel=4"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgqueue", *worker, "--poll-interval", "0.2"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def written() -> list[dict[str, Any]]:
            return [json.loads(line) for line in spans_file.read_text().splitlines()]

        def runs() -> dict[str, dict[str, Any]]:
            return {
                s["attributes"]["messaging.message.id"]: s
                for s in written()
                if s["name"] == "process otel"
            }

        wait_until(lambda: len(runs()) == 2, 60, what="both jobs ran in the worker process")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    by_id = runs()
    for handle in (ok, failing):
        send = span_record(t.send_span(handle.id))
        run = by_id[str(handle.id)]
        assert run["kind"] == "CONSUMER"
        assert run["parent_id"] is None
        assert run["trace_id"] != send["trace_id"]
        assert run["links"] == [[send["trace_id"], send["span_id"]]]
        assert run["attributes"] == {
            **PROCESS_COMMON,
            "messaging.message.id": str(handle.id),
            "pgqueue.job.kind": "traced",
            "pgqueue.job.attempt": 1,
            "pgqueue.job.max_attempts": 25 if handle is ok else 1,
            **({"error.type": "ValueError"} if handle is failing else {}),
        }
        # the job's own span, in the worker process, under the attempt's span
        (inner,) = [
            s for s in written() if s["name"] == "inside" and s["parent_id"] == run["span_id"]
        ]
        assert inner["trace_id"] == run["trace_id"]
    assert by_id[str(ok.id)]["status"] == "UNSET"
    assert by_id[str(ok.id)]["events"] == []
    assert by_id[str(failing.id)]["status"] == "ERROR"
    assert by_id[str(failing.id)]["events"] == ["exception"]
    assert (
        stored_trace(db, schema, failing.id)["traceparent"].split("-")[1]
        == span_record(t.send_span(failing.id))["trace_id"]
    )


# -- the core stays free of opentelemetry -------------------------------------------------------


def test_the_core_never_imports_opentelemetry() -> None:
    script = """
import importlib, pkgutil, sys
import pgqueue
for info in pkgutil.walk_packages(pgqueue.__path__, "pgqueue."):
    # (a Django models module needs configured settings: tests/test_imports.py)
    if info.name not in ("pgqueue.__main__", "pgqueue.otel", "pgqueue.contrib.django.models"):
        importlib.import_module(info.name)
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
assert not loaded, loaded
import pgqueue.otel
assert "opentelemetry.trace" in sys.modules
print("OK")
"""
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.stdout.strip() == "OK", result.stderr
