"""OpenTelemetry traces (extra jobq[otel]): a span of each enqueue, and of each run as its child.

An enqueue inside an active span gets a span of its own, ``jobq.enqueue <task>`` (PRODUCER),
whose W3C trace context (``traceparent``, ``tracestate``) the task's row keeps in
``trace_context``. The worker's span of each run, ``jobq.run <task>`` (CONSUMER), is a child
of that context, so a web request, the enqueue it made and the run are one trace; it is the
current span while the task's code runs, so the spans that code makes nest under it. A row
without a trace context gets a run span of its own (a root).

Tracing is on in a process once the application has imported OpenTelemetry's API (that is,
``opentelemetry.trace`` is in sys.modules): jobq itself never imports OpenTelemetry unless
it is on, and where it is off the hooks cost a dict lookup per enqueue and a few attribute
checks per run. The spans go to whatever TracerProvider the application configured.
"""

from __future__ import annotations

import contextvars
import functools
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobq.worker.executor import Outcome
    from jobq.worker.runner import Run

#: The module whose import by the application turns tracing on.
MODULE = "opentelemetry.trace"

#: The instrumentation scope of jobq's spans.
SCOPE = "jobq"

#: Outcomes of runs that did not do their work: their spans' status is ERROR.
ERRORS = frozenset({"failed", "retried", "timed_out", "lost"})


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


class RunTracing:
    """The spans of one worker's runs; made only when tracing is on (see for_worker)."""

    def __init__(self) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        from jobq.worker.executor import RAISED  # the worker's side: the enqueuer's never needs it

        self._raised = RAISED
        self._trace = trace
        self._context = context
        self._tracer = trace.get_tracer(SCOPE)
        self._propagator = TraceContextTextMapPropagator()

    def started(self, run: Run) -> None:
        """Start ``run``'s span, a child of the trace context its row stored (else a root),
        and give the run the contextvars context its code runs in, with that span current."""
        task = run.task
        # Read as stored by enqueue_span; anything else (a row edited by hand) is no parent.
        carrier = task.trace_context if isinstance(task.trace_context, dict) else {}
        # An empty base context: the worker loop's own current span, if any, is no parent.
        parent = self._propagator.extract(carrier, self._context.Context())
        span = self._tracer.start_span(
            f"jobq.run {task.name}", parent, kind=self._trace.SpanKind.CONSUMER,
            attributes={"jobq.task_id": task.id, "jobq.attempt": task.attempt,
                        "jobq.queue": task.queue_id},
        )  # fmt: skip
        run.span = span
        # A context of the run's own: attaching there needs no detach, and no other run
        # (nor the slot thread's next one) sees the span.
        run.context = contextvars.copy_context()
        run.context.run(self._context.attach, self._trace.set_span_in_context(span))
        # The exception its code raises is recorded as it is caught, in its thread.
        run.context.run(self._raised.set, span.record_exception)

    def finished(self, run: Run, outcome: str, ended: Outcome | None = None) -> None:
        """End ``run``'s span with ``outcome`` (a label of jobq.observe.metrics), its status
        ERROR for a failure, described by the last line of ``ended.error``."""
        span, run.span = run.span, None
        if span is None:
            return  # ended already
        span.set_attribute("jobq.outcome", outcome)
        if outcome in ERRORS:
            reason = outcome if ended is None or ended.error is None else _last_line(ended.error)
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, reason))
        span.end(_end_time(run))


def for_worker() -> RunTracing | None:
    """A worker's RunTracing if tracing is on now (the app, imported first, decides), else None."""
    return RunTracing() if tracing_on() else None


def _end_time(run: Run) -> int | None:
    """When ``run``'s code returned, in ns since the epoch (None: now): the worker loop
    ends the span a moment later."""
    if run.returned is None:
        return None
    return time.time_ns() - int((time.monotonic() - run.returned) * 1e9)


def _last_line(error: str) -> str:
    """The line of a stored error that says what it was (a traceback's last)."""
    lines = error.strip().splitlines()
    return lines[-1] if lines else error
