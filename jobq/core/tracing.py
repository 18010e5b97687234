"""OpenTelemetry traces (extra jobq[otel]): a span of each enqueue (of runs: jobq.worker.run_spans).

An enqueue inside an active span gets a span of its own, ``jobq.enqueue <task>`` (PRODUCER),
whose W3C trace context (``traceparent``, ``tracestate``) the task's row keeps in
``trace_context``. The worker's span of each run, ``jobq.run <task>`` (CONSUMER), is a child
of that context (jobq.worker.run_spans), so a web request, the enqueue it made and the run
are one trace.

Tracing is on in a process once the application has imported OpenTelemetry's API (that is,
``opentelemetry.trace`` is in sys.modules): jobq itself never imports OpenTelemetry unless
it is on, and where it is off the hooks cost a dict lookup per enqueue and a few attribute
checks per run. The spans go to whatever TracerProvider the application configured.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: The module whose import by the application turns tracing on.
MODULE = "opentelemetry.trace"

#: The instrumentation scope of jobq's spans.
SCOPE = "jobq"


def tracing_on() -> bool:
    """Whether the application has imported OpenTelemetry, so that jobq traces."""
    return MODULE in sys.modules


class EnqueueSpan:
    """The span of one enqueue (or one enqueue_many), seen from the code that writes the rows."""

    def __init__(self, span: Any, trace_context: dict[str, str] | None) -> None:
        self._span = span
        #: The W3C trace context to store in the rows, or None: they are not traced.
        self.trace_context = trace_context

    def enqueued(self, task_ids: list[int]) -> None:
        """The rows are written, as ``task_ids``: say which on the span."""
        if self._span is None:
            return
        if len(task_ids) == 1:
            self._span.set_attribute("jobq.task_id", task_ids[0])
        else:
            self._span.set_attribute("jobq.task_count", len(task_ids))


#: The span of an enqueue outside any active span: none, and no trace context stored.
UNTRACED = EnqueueSpan(None, None)


@contextmanager
def enqueue_span(name: str, queue: str) -> Iterator[EnqueueSpan]:
    """Within an active span, a current span ``jobq.enqueue <name>`` around the write of
    the rows, ending with it (an exception is recorded); else UNTRACED."""
    trace, tracer, propagator = _producer()
    # A task enqueued by no traced operation (a cron tick, a script) starts no trace:
    # its runs get root spans of their own.
    if not trace.get_current_span().get_span_context().is_valid:
        yield UNTRACED
        return
    with tracer.start_as_current_span(
        f"jobq.enqueue {name}", kind=trace.SpanKind.PRODUCER, attributes={"jobq.queue": queue}
    ) as span:
        carrier: dict[str, str] = {}
        propagator.inject(carrier)
        yield EnqueueSpan(span, carrier or None)


@functools.cache
def _producer() -> tuple[Any, Any, Any]:
    """OpenTelemetry's trace API, jobq's tracer and the W3C TraceContext propagator."""
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    # A ProxyTracer until the application sets its TracerProvider; it follows it then.
    # W3C TraceContext whatever propagator the application set globally: the row's
    # format is jobq's own contract, and the worker reads it back with the same one.
    return trace, trace.get_tracer(SCOPE), TraceContextTextMapPropagator()
