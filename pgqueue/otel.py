"""OpenTelemetry spans and metrics of a client's enqueues and its workers' runs: pgqueue[otel].

:func:`instrument` installs a :class:`~pgqueue.tracing.JobTracer` on ``client.events`` and
subscribes metric handlers to its events. Only the OpenTelemetry *API* is used: the application
brings the SDK and exporters. The core never imports this module, nor opentelemetry.

Spans follow the messaging semantic conventions: a PRODUCER span ``send {queue}`` around each
enqueue call, whose context is stored in the job's options (``"trace"``, W3C Trace Context) and
kept across retries, and a CONSUMER span ``process {queue}`` per attempt, current while the job's
``process`` runs. By default an attempt's span starts a trace of its own with a link to the
enqueue's span; ``link=False`` makes it the enqueue span's child instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextvars import Token
from types import TracebackType
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from . import __version__
from .errors import ConfigurationError
from .events import EventHub, JobFinished, JobsEnqueued
from .execution import ClaimedJob, ProcessTimeout, describe_error, is_coroutine_function
from .outcomes import Cancel, Retry
from .tracing import options_with_trace

if TYPE_CHECKING:
    from ._async.client import AsyncClient
    from ._sync.client import Client
    from .enqueue import PreparedJob

__all__ = ["OtelInstrumentation", "OtelTracer", "instrument"]

logger = logging.getLogger("pgqueue")
_Attrs = dict[str, AttributeValue]

# The W3C propagator itself, not the global one: what is stored with a job must be readable by
# any worker, whatever propagators the enqueuing application configured (B3, Jaeger...).
_W3C = TraceContextTextMapPropagator()
# An empty context: the parent of a process span that starts a trace of its own (link=True).
_ROOT = Context()

_SYSTEM = "pgqueue"
# bucket boundaries (seconds) the semantic conventions advise for messaging durations
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
_WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


def instrument(
    client: Client | AsyncClient,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: otel_metrics.MeterProvider | None = None,
    link: bool = True,
    metrics: bool = True,
) -> OtelInstrumentation:
    """Trace ``client``'s enqueues and its workers' attempts, and record metrics of them.

    Works for :class:`~pgqueue.Client` and :class:`~pgqueue.AsyncClient`, before or after
    ``start()``: the runtime reads the tracer from ``client.events`` for every attempt.
    ``tracer_provider``/``meter_provider`` default to the global ones. ``link=True`` (the
    messaging conventions' choice): an attempt's span starts a new trace, linked to the enqueue's
    span; ``link=False``: it is the enqueue span's child, in the same trace. ``metrics=False``:
    spans only. A client that already has a tracer raises :class:`~pgqueue.ConfigurationError`
    (call :meth:`OtelInstrumentation.uninstrument` first).
    """
    hub = client.events
    if hub.tracer is not None:
        raise ConfigurationError(
            f"this client already has a tracer ({hub.tracer!r}): call uninstrument() on the "
            "OtelInstrumentation that instrument() returned before instrumenting it again"
        )
    tracer = OtelTracer(trace.get_tracer(_SYSTEM, __version__, tracer_provider), link=link)
    unsubscribe: list[Callable[[], None]] = []
    if metrics:
        recorder = _Metrics(otel_metrics.get_meter(_SYSTEM, __version__, meter_provider))
        unsubscribe.append(hub.subscribe(recorder.finished, JobFinished))
        unsubscribe.append(hub.subscribe(recorder.enqueued, JobsEnqueued))
    hub.tracer = tracer
    return OtelInstrumentation(hub, tracer, unsubscribe)


class OtelInstrumentation:
    """What :func:`instrument` installed on a client; :meth:`uninstrument` removes it."""

    def __init__(
        self, hub: EventHub, tracer: OtelTracer, unsubscribe: list[Callable[[], None]]
    ) -> None:
        self._hub = hub
        self.tracer = tracer
        """The :class:`~pgqueue.tracing.JobTracer` installed on ``client.events.tracer``."""
        self._unsubscribe = unsubscribe

    def uninstrument(self) -> None:
        """Remove the tracer and the metric handlers; idempotent.

        Attempts already running keep their spans and end them as usual.
        """
        if self._hub.tracer is self.tracer:
            self._hub.tracer = None
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe = []


# -- spans -------------------------------------------------------------------------------------


class OtelTracer:
    """The :class:`~pgqueue.tracing.JobTracer` that opens OpenTelemetry spans (see the module)."""

    def __init__(self, tracer: trace.Tracer, *, link: bool = True) -> None:
        self._tracer = tracer
        self.link = link
        """True: an attempt's span links to the enqueue's span; False: it is its child."""
        # attributes and names that depend only on the queue and kind, built once each
        self._send_attrs: dict[tuple[str | None, str | None, bool], _Attrs] = {}
        self._process_attrs: dict[tuple[str, str], _Attrs] = {}
        self._names: dict[tuple[str, str], str] = {}

    def _name(self, operation: str, queue: str) -> str:
        name = self._names.get((operation, queue))
        if name is None:
            name = self._names[operation, queue] = f"{operation} {queue}"
        return name

    def send(self, jobs: Sequence[PreparedJob], in_transaction: bool) -> _SendSpan:
        """Open the PRODUCER span of an enqueue and store its context in each job's options."""
        first = jobs[0]
        queue: str | None = first.queue
        kind: str | None = first.kind
        if len(jobs) > 1:
            if any(job.queue != queue for job in jobs):
                queue = None
            if any(job.kind != kind for job in jobs):
                kind = None
        key = (queue, kind, in_transaction)
        attributes = self._send_attrs.get(key)
        if attributes is None:
            attributes = {
                "messaging.system": _SYSTEM,
                "messaging.operation.type": "send",
                "messaging.operation.name": "send",
            }
            if queue is not None:
                attributes["messaging.destination.name"] = queue
            if kind is not None:
                attributes["pgqueue.job.kind"] = kind
            if in_transaction:
                attributes["pgqueue.in_transaction"] = True
            self._send_attrs[key] = attributes
        if len(jobs) > 1:
            attributes = {**attributes, "messaging.batch.message_count": len(jobs)}
        span = self._tracer.start_span(
            "send" if queue is None else self._name("send", queue),
            kind=SpanKind.PRODUCER,
            attributes=attributes,
        )
        if span.get_span_context().is_valid:  # a no-op tracer with no parent: nothing to store
            carrier: dict[str, str] = {}
            _W3C.inject(carrier, trace.set_span_in_context(span))
            written: dict[str, str] = {}  # the jobs of a batch mostly share one options text
            for job in jobs:
                options = written.get(job.options)
                if options is None:
                    options = written[job.options] = options_with_trace(job.options, carrier)
                job.options = options
        return _SendSpan(span)

    def wrap_process(self, job: ClaimedJob, process: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """Return ``process`` wrapped to run in the attempt's CONSUMER span."""
        # A bound method of a per-attempt object, not a closure: is_coroutine_function caches
        # its answer per function, and a fresh closure per job would grow that cache forever.
        if is_coroutine_function(process):
            return _AsyncRun(self, job, process).run
        return _SyncRun(self, job, process).run

    def _start(self, job: ClaimedJob) -> trace.Span:
        key = (job.queue, job.kind)
        base = self._process_attrs.get(key)
        if base is None:
            base = self._process_attrs[key] = {
                "messaging.system": _SYSTEM,
                "messaging.operation.type": "process",
                "messaging.operation.name": "process",
                "messaging.destination.name": job.queue,
                "pgqueue.job.kind": job.kind,
            }
        attributes = {
            **base,
            "messaging.message.id": str(job.id),
            "pgqueue.job.attempt": job.attempt,
            "pgqueue.job.max_attempts": job.max_attempts,
        }
        parent: Context | None = None  # the current context
        links: list[Link] | None = None
        if job.trace:
            stored = _W3C.extract(job.trace)
            sent = trace.get_current_span(stored).get_span_context()
            if sent.is_valid:
                if self.link:
                    parent, links = _ROOT, [Link(sent)]
                else:
                    parent = stored
        return self._tracer.start_span(
            self._name("process", job.queue),
            parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
            record_exception=False,
            set_status_on_exception=False,
        )


def _record_error(span: trace.Span, exc: BaseException) -> None:
    """Mark ``span`` failed by ``exc``: an exception event, status ERROR and ``error.type``."""
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, describe_error(exc)))
    span.set_attribute("error.type", type(exc).__qualname__)


def _attempt_ended(span: trace.Span, job: ClaimedJob, exc: BaseException) -> None:
    """Describe on ``span`` how ``process`` raising ``exc`` ends the attempt.

    In the order the runtime decides the outcome (``pgqueue.execution.outcome_for_error``):
    only an attempt that counts as failed (retried or failed for good) is an error. Never
    raises: the job's own exception is the one that must reach the runtime.
    """
    try:
        _describe_end(span, job, exc)
    except Exception:  # pragma: no cover - the span loses its details, the job nothing
        logger.debug("could not record the end of job %s on its span", job.id, exc_info=True)


def _describe_end(span: trace.Span, job: ClaimedJob, exc: BaseException) -> None:
    if job.stop_reason == "shutdown":
        span.set_attribute("pgqueue.job.outcome", "released")
    elif isinstance(exc, Retry):
        span.set_attribute("pgqueue.job.outcome", "snoozed")
    elif isinstance(exc, Cancel) or job.stop_reason == "cancel":
        span.set_attribute("pgqueue.job.outcome", "cancelled")
    elif job.stop_reason == "timeout":
        span.set_status(Status(StatusCode.ERROR, f"timed out after {job.timeout:g}s"))
        span.set_attribute("error.type", "timeout")
    else:  # Discard included: the job failed for good, by its own decision
        _record_error(span, exc)


class _Run:
    """One attempt of a job: its ``run`` calls ``process`` inside the attempt's span."""

    __slots__ = ("_job", "_owner", "_process")

    def __init__(self, owner: OtelTracer, job: ClaimedJob, process: Callable[[Any], Any]) -> None:
        self._owner = owner
        self._job = job
        self._process = process


class _SyncRun(_Run):
    """An attempt of a plain ``process``."""

    __slots__ = ()

    def run(self, ctx: Any) -> Any:
        """Call ``process(ctx)`` with the attempt's span current."""
        span = self._owner._start(self._job)
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            return self._process(ctx)
        except BaseException as exc:
            _attempt_ended(span, self._job, exc)
            raise
        finally:
            otel_context.detach(token)
            span.end()


class _AsyncRun(_Run):
    """An attempt of an ``async def process``."""

    __slots__ = ()

    async def run(self, ctx: Any) -> Any:
        """Await ``process(ctx)`` with the attempt's span current."""
        span = self._owner._start(self._job)
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            return await self._process(ctx)
        except BaseException as exc:
            _attempt_ended(span, self._job, exc)
            raise
        finally:
            otel_context.detach(token)
            span.end()


class _SendSpan:
    """The PRODUCER span of one enqueue call: current during the insert, ended on exit."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: trace.Span) -> None:
        self._span = span
        self._token: Token[Context] | None = None

    def __enter__(self) -> _SendSpan:
        # current during the insert: a database driver's instrumentation nests its spans here
        self._token = otel_context.attach(trace.set_span_in_context(self._span))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc is not None:
                _record_error(self._span, exc)
        finally:
            if self._token is not None:
                otel_context.detach(self._token)
            self._span.end()

    def sent(self, handles: Sequence[Any]) -> None:
        """Name the job a one-job enqueue inserted (or the duplicate that refused it)."""
        if len(handles) == 1:
            handle = handles[0]
            self._span.set_attribute("messaging.message.id", str(handle.id))
            if not handle.inserted:
                self._span.set_attribute("pgqueue.job.conflict", str(handle.conflict))


# -- metrics -----------------------------------------------------------------------------------


class _Metrics:
    """Records the OTel metrics from the hub's events (attributes built once per combination)."""

    def __init__(self, meter: otel_metrics.Meter) -> None:
        self._duration = meter.create_histogram(
            "messaging.process.duration",
            unit="s",
            description="Seconds a job's process() ran, per attempt",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self._consumed = meter.create_counter(
            "messaging.client.consumed.messages",
            unit="{message}",
            description="Attempts of jobs that ended, by outcome",
        )
        self._sent = meter.create_counter(
            "messaging.client.sent.messages",
            unit="{message}",
            description="Jobs inserted by enqueue calls",
        )
        self._wait = meter.create_histogram(
            "pgqueue.job.queue_wait",
            unit="s",
            description="Seconds from a job's due time to the start of its attempt",
            explicit_bucket_boundaries_advisory=_WAIT_BUCKETS,
        )
        self._finished_attrs: dict[tuple[str, str, str, str | None], _Attrs] = {}
        self._kind_attrs: dict[tuple[str, str, str], _Attrs] = {}

    def _of_kind(self, operation: str, queue: str, kind: str) -> _Attrs:
        key = (operation, queue, kind)
        attributes = self._kind_attrs.get(key)
        if attributes is None:
            attributes = self._kind_attrs[key] = {
                "messaging.system": _SYSTEM,
                "messaging.operation.name": operation,
                "messaging.destination.name": queue,
                "pgqueue.job.kind": kind,
            }
        return attributes

    def finished(self, event: JobFinished) -> None:
        """Record an attempt that ended: its duration, its count and its queue wait."""
        error_type: str | None = None
        if event.outcome in ("retry", "failed"):
            exc = event.exc
            if exc is None:  # Discard, unreadable options, an outcome the database refused
                error_type = "_OTHER"
            elif isinstance(exc, ProcessTimeout):
                error_type = "timeout"
            else:
                error_type = type(exc).__qualname__
        key = (event.queue, event.kind, event.outcome, error_type)
        attributes = self._finished_attrs.get(key)
        if attributes is None:
            attributes = {
                **self._of_kind("process", event.queue, event.kind),
                "pgqueue.job.outcome": event.outcome,
            }
            if error_type is not None:
                attributes["error.type"] = error_type
            self._finished_attrs[key] = attributes
        if event.duration is not None:
            self._duration.record(event.duration, attributes)
        self._consumed.add(1, attributes)
        if event.queue_wait is not None:
            wait = self._of_kind("process", event.queue, event.kind)
            self._wait.record(max(event.queue_wait, 0.0), wait)

    def enqueued(self, event: JobsEnqueued) -> None:
        """Count the jobs an enqueue call inserted, per queue and kind."""
        jobs = event.jobs
        if len(jobs) == 1:
            self._sent.add(1, self._of_kind("send", jobs[0].queue, jobs[0].kind))
            return
        counts: dict[tuple[str, str], int] = {}
        for handle in jobs:
            key = (handle.queue, handle.kind)
            counts[key] = counts.get(key, 0) + 1
        for (queue, kind), count in counts.items():
            self._sent.add(count, self._of_kind("send", queue, kind))
