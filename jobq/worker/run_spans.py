"""OpenTelemetry spans of a worker's runs (extra jobq[otel]), each a child of its enqueue's.

The worker's span of each run, ``jobq.run <task>`` (CONSUMER), is a child of the W3C trace
context the task's row keeps (``trace_context``, written by the enqueue's span: see
jobq.core.tracing), so a web request, the enqueue it made and the run are one trace; it
is the current span while the task's code runs, so the spans that code makes nest under it.
A row without a trace context gets a run span of its own (a root).

Tracing is on in a worker once the application has imported OpenTelemetry's API (that is,
``opentelemetry.trace`` is in sys.modules); otherwise nothing here imports OpenTelemetry,
and the hooks cost a few attribute checks per run.
"""

from __future__ import annotations

import contextvars
import sys
import time
from typing import TYPE_CHECKING

from jobq.core.tracing import MODULE, SCOPE

if TYPE_CHECKING:
    from jobq.worker.executor import Outcome
    from jobq.worker.runner import Run

#: Outcomes of runs that did not do their work: their spans' status is ERROR.
ERRORS = frozenset({"failed", "retried", "timed_out", "lost"})


class RunTracing:
    """The spans of one worker's runs; made only when tracing is on (see for_worker)."""

    def __init__(self) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        from jobq.worker.executor import RAISED

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
        """End ``run``'s span with ``outcome`` (a label of jobq.worker.observers), its
        status ERROR for a failure, described by the last line of ``ended.error``."""
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
    return RunTracing() if MODULE in sys.modules else None


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
