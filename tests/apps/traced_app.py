"""A test app that traces with OpenTelemetry (jobq[otel]): its spans, finished, go as JSON
lines to the file $TRACED_APP_SPANS, one process's spans per file.

The worker process loads it with `jobq worker --app tests.apps.traced_app:app`, which sets
the TracerProvider up at import, before the worker starts; `web_request()` plays a web
request that enqueues tasks inside its span, in a process of its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import jobq
from jobq.core.retry import FixedBackoff

SPANS = "TRACED_APP_SPANS"


class JsonLinesExporter(SpanExporter):
    """Appends each finished span to a file as one JSON line, at once (SimpleSpanProcessor
    exports as each span ends: nothing is lost when the worker process exits)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a", encoding="utf-8") as file:
            for span in spans:
                file.write(json.dumps(as_dict(span)) + "\n")
        return SpanExportResult.SUCCESS


def as_dict(span: ReadableSpan) -> dict[str, Any]:
    """What the tests look at in a span, ids in hex."""
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": None if span.parent is None else f"{span.parent.span_id:016x}",
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "events": [
            {"name": event.name, "attributes": dict(event.attributes or {})}
            for event in span.events
        ],
    }


provider = TracerProvider()
if os.environ.get(SPANS):
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(os.environ[SPANS])))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("tests.apps.traced_app")

app = jobq.App()


@app.task()
def checkout(order: int) -> int:
    """Makes a span of its own, which must nest under the run's."""
    with tracer.start_as_current_span("charge card") as span:
        span.set_attribute("order", order)
    return order


@app.task(retries=1, backoff=FixedBackoff(0))
def boom() -> None:
    """Fails both of its attempts: one retried, then failed for good."""
    raise RuntimeError("boom")


@app.task()
async def notify(order: int) -> int:
    """An async task making a span of its own, on the worker's event loop."""
    with tracer.start_as_current_span("send mail"):
        await asyncio.sleep(0)
    return order


def web_request() -> None:
    """Enqueue a checkout, a failing task and a notification inside a SERVER span, as a web
    request would; print their ids as JSON."""
    with tracer.start_as_current_span("GET /checkout", kind=trace.SpanKind.SERVER):
        ids = {
            "checkout": app.enqueue("checkout", {"order": 1}),
            "boom": app.enqueue("boom"),
            "notify": app.enqueue("notify", {"order": 1}),
        }
    json.dump(ids, sys.stdout)
