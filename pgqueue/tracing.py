"""The tracing seam: what a tracer (``pgqueue.otel``) is given around an enqueue and a run.

Events (``pgqueue.events``) report what happened; a tracer must also be *around* the work, so
that the spans a job's code opens nest under the job's span, and so that the enqueue's trace
context is stored with the job. A client's :class:`~pgqueue.events.EventHub` holds at most one
tracer (``client.events.tracer``); with none, an enqueue pays one attribute read and a run the
same.

The core knows no tracing library: :mod:`pgqueue.otel` implements :class:`JobTracer` with
OpenTelemetry. The trace context travels in the job's stored options, under ``"trace"`` (a
``traceparent``/``tracestate`` mapping, W3C Trace Context): it is written once at enqueue and
kept across retries, so every attempt can point back at the enqueue that caused it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .enqueue import PreparedJob
    from .execution import ClaimedJob

__all__ = ["NO_SEND", "JobTracer", "SendSpan", "options_with_trace"]


class SendSpan(Protocol):
    """The span of one enqueue call, used as a context manager around the insert.

    ``__exit__`` ends it (recording an exception that escaped); ``sent`` is told the handles
    of the jobs inserted before that.
    """

    def __enter__(self) -> SendSpan:
        """Start timing the insert (the span itself was opened by :meth:`JobTracer.send`)."""
        ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """End the span; an exception is recorded on it, never swallowed."""
        ...

    def sent(self, handles: Sequence[Any]) -> None:
        """Record the jobs the call inserted (``JobHandle``; duplicates refused are absent)."""
        ...


class JobTracer(Protocol):
    """Wraps enqueues and job runs in spans; ``pgqueue.otel.instrument`` installs one."""

    def send(self, jobs: Sequence[PreparedJob], in_transaction: bool) -> SendSpan:
        """Open the span of an enqueue of ``jobs``, and write its trace context into them.

        Called before the insert; the context goes into each job's ``options`` text (see
        :func:`options_with_trace`).
        """
        ...

    def wrap_process(self, job: ClaimedJob, process: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """Return ``process`` wrapped so that it runs inside the attempt's span.

        The wrapper must be a coroutine function exactly when ``process`` is one: it runs
        where ``process`` would (the job's thread or task), so the span is the current one
        for the job's own code. Return a bound method of a per-attempt object (as
        ``pgqueue.otel`` does), not a new closure per attempt: the runtime remembers per
        function whether it is a coroutine function, keyed by a bound method's function.
        """
        ...


class _NoSend:
    """The enqueue span when no tracer is installed: does nothing."""

    __slots__ = ()

    def __enter__(self) -> _NoSend:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    def sent(self, handles: Sequence[Any]) -> None:
        return None


NO_SEND: SendSpan = _NoSend()
"""The :class:`SendSpan` used when no tracer is installed (one shared object)."""


def options_with_trace(options: str, carrier: dict[str, str]) -> str:
    """Return a job's stored ``options`` text with ``carrier`` (W3C headers) under ``"trace"``."""
    merged = json.loads(options) if options and options != "{}" else {}
    merged["trace"] = carrier
    return json.dumps(merged, separators=(",", ":"))
