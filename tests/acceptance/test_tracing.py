"""OpenTelemetry traces (jobq[otel]) across processes, on every database: a "web request"
process enqueues inside its span, a real `jobq worker` process runs the tasks, and each
writes its finished spans as JSON lines (tests/apps/traced_app.py).

This test process never imports OpenTelemetry itself: it only reads those files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import jobq
from tests.worker_processes import ROOT, Workers

APP = "tests.apps.traced_app:app"


@pytest.fixture
def workers(db_url: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(APP, db_url, tmp_path, ["--burst", "--burst-wait", "0.5"])
    yield started
    started.kill_all()


def environment(db_url: str, spans: Path | None) -> dict[str, str]:
    """This process's environment for a child on ``db_url`` writing its spans to ``spans``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JOBQ_DATABASE_URL": db_url}
    env.pop("TRACED_APP_SPANS", None)
    if spans is not None:
        env["TRACED_APP_SPANS"] = str(spans)
    return env


def python(code: str, env: dict[str, str]) -> str:
    """Run ``code`` in a fresh interpreter; its stdout (its failure fails the test)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def spans_in(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def one(spans: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    """The one span whose top-level fields or attributes are those of ``match``."""
    found = [
        span
        for span in spans
        if all(span.get(key, span["attributes"].get(key)) == value for key, value in match.items())
    ]
    assert len(found) == 1, (match, spans)
    return found[0]


def test_a_web_request_its_enqueues_and_their_runs_are_one_trace(
    db_url: str, store: jobq.Store, workers: Workers, tmp_path: Path
) -> None:
    web_spans, worker_spans = tmp_path / "web.jsonl", tmp_path / "worker.jsonl"
    code = "from tests.apps.traced_app import web_request; web_request()"
    ids = json.loads(python(code, environment(db_url, web_spans)))
    # Outside any span, in a process that does not trace at all.
    untraced = store.enqueue("checkout", {"order": 2})
    assert store.get(untraced).trace_context is None  # type: ignore[union-attr]
    stored = store.get(ids["checkout"]).trace_context  # type: ignore[union-attr]
    assert stored is not None and stored["traceparent"].startswith("00-")

    worker = workers.start(env={"TRACED_APP_SPANS": str(worker_spans)})
    assert worker.process.wait(timeout=120) == 0, worker.stderr()

    web = spans_in(web_spans)
    request = one(web, name="GET /checkout")
    assert request["kind"] == "SERVER" and request["parent_id"] is None
    trace_id = request["trace_id"]
    enqueues = {}
    for task in ("checkout", "boom", "notify"):
        enqueue = one(web, name=f"jobq.enqueue {task}")
        assert enqueue["kind"] == "PRODUCER"
        assert enqueue["trace_id"] == trace_id
        assert enqueue["parent_id"] == request["span_id"]
        assert enqueue["attributes"] == {"jobq.queue": "default", "jobq.task_id": ids[task]}
        enqueues[task] = enqueue
    # version-trace id-parent id-flags: the enqueue span is the run's parent.
    assert stored["traceparent"].split("-")[1:3] == [trace_id, enqueues["checkout"]["span_id"]]

    ran = spans_in(worker_spans)
    runs = [span for span in ran if span["name"].startswith("jobq.run ")]
    assert len(runs) == 5, ran  # checkout twice, boom twice, notify once

    def run_of(task: str, task_id: int, attempt: int, outcome: str) -> dict[str, Any]:
        run = one(
            runs, name=f"jobq.run {task}", **{"jobq.task_id": task_id, "jobq.attempt": attempt}
        )
        assert run["kind"] == "CONSUMER"
        assert run["attributes"] == {
            "jobq.task_id": task_id, "jobq.attempt": attempt, "jobq.queue": "default",
            "jobq.outcome": outcome,
        }  # fmt: skip
        return run

    for task, attempt, outcome in (
        ("checkout", 1, "done"), ("notify", 1, "done"), ("boom", 1, "retried"),
        ("boom", 2, "failed"),
    ):  # fmt: skip
        run = run_of(task, ids[task], attempt, outcome)
        assert run["trace_id"] == trace_id
        assert run["parent_id"] == enqueues[task]["span_id"]

    # The spans the tasks' code made nest under their runs, sync and async alike.
    for task, inner in (("checkout", "charge card"), ("notify", "send mail")):
        made = one(ran, name=inner, trace_id=trace_id)
        assert made["parent_id"] == run_of(task, ids[task], 1, "done")["span_id"]

    for attempt, outcome in ((1, "retried"), (2, "failed")):
        failed = run_of("boom", ids["boom"], attempt, outcome)
        assert failed["status"] == "ERROR"
        [event] = failed["events"]
        assert event["name"] == "exception"
        assert event["attributes"]["exception.type"] == "RuntimeError"
        assert event["attributes"]["exception.message"] == "boom"
    assert run_of("checkout", ids["checkout"], 1, "done")["status"] == "UNSET"

    # The task enqueued outside any span: a trace of its own, its run the root.
    root = run_of("checkout", untraced, 1, "done")
    assert root["parent_id"] is None and root["trace_id"] != trace_id
    assert one(ran, name="charge card", trace_id=root["trace_id"])["parent_id"] == root["span_id"]


NO_OPENTELEMETRY = """
    import os
    import sys

    import jobq

    store = jobq.Store(os.environ["JOBQ_DATABASE_URL"])
    task_id = store.enqueue("anything", {"n": 1})
    [task_id_2] = store.enqueue_many("anything", [{"n": 2}])
    assert store.get(task_id).trace_context is None
    assert store.get(task_id_2).trace_context is None
    import jobq.core.tracing  # what a worker imports: nothing of OpenTelemetry either
    from jobq.worker import Worker  # the loop and all it imports

    loaded = sorted(name for name in sys.modules if name.startswith("opentelemetry"))
    assert not loaded, loaded
    print("ok")
"""


def test_without_opentelemetry_nothing_is_imported_and_nothing_stored(
    db_url: str, store: jobq.Store
) -> None:
    assert python(NO_OPENTELEMETRY, environment(db_url, None)) == "ok\n"


IN_MEMORY = """
    import os

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import jobq

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    store = jobq.Store(os.environ["JOBQ_DATABASE_URL"])
    with trace.get_tracer("test").start_as_current_span("batch job"):
        ids = store.enqueue_many("anything", [{"n": 1}, {"n": 2}, {"n": 3}], queue="bulk")
        unique = store.enqueue("anything", {"n": 4}, unique_key="one")
        try:
            store.enqueue("anything", {"n": 1}, priority=2**40)
        except jobq.InvalidOption:
            pass
    [batch, single, job] = exporter.get_finished_spans()
    assert batch.name == "jobq.enqueue anything", batch.name
    assert batch.parent.span_id == job.context.span_id
    assert dict(batch.attributes) == {"jobq.queue": "bulk", "jobq.task_count": 3}
    assert single.parent.span_id == job.context.span_id
    assert dict(single.attributes) == {"jobq.queue": "default", "jobq.task_id": unique}

    def parent_in_row(task_id):
        # traceparent: version-trace id-parent span id-flags
        _, trace_id, span_id, _ = store.get(task_id).trace_context["traceparent"].split("-")
        return int(trace_id, 16), int(span_id, 16)

    # Every row of the batch, and the row a unique key wrote, carry their span's context.
    for task_id in ids:
        assert parent_in_row(task_id) == (batch.context.trace_id, batch.context.span_id)
    assert parent_in_row(unique) == (single.context.trace_id, single.context.span_id)
    print("ok")
"""


def test_enqueue_many_has_one_span_for_the_batch_and_every_row_its_context(
    db_url: str, store: jobq.Store
) -> None:
    # An enqueue refused before anything is written (its options checked) makes no span.
    assert python(IN_MEMORY, environment(db_url, None)) == "ok\n"
