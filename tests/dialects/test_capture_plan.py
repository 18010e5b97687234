"""Capture stays an index scan on the partial index when the table is full of finished rows."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy import event

import jobq
from jobq.schema import tasks

FINISHED = 30_000


def fill_with_finished_rows(store: jobq.Store) -> None:
    store.enqueue_many("old", [{"i": i} for i in range(FINISHED)])
    with store.engine.begin() as conn:
        conn.execute(
            sa.update(tasks).values(status="done", finished_at=store.dialect.now(), attempt=1)
        )
    store.enqueue_many("new", [{"i": i} for i in range(50)], queue="q")
    with store.engine.begin() as conn:
        conn.exec_driver_sql("ANALYZE")


def captured_sql(store: jobq.Store) -> tuple[str, Any]:
    """The statement and parameters the Store sends for one capture (which is rolled back)."""
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if "jobq_tasks" in statement and statement.lstrip().upper().startswith(("WITH", "UPDATE")):
            seen.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        store.capture(10, queues=["q"], worker_id="explain", lease=30)
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    assert len(seen) == 1, seen
    return seen[0]


def test_capture_uses_the_partial_index(store: jobq.Store, backend: str) -> None:
    fill_with_finished_rows(store)
    statement, parameters = captured_sql(store)
    if backend == "sqlite":
        with store.engine.connect() as conn:
            plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).all()
        text = "\n".join(str(row[-1]) for row in plan)
        assert "USING INDEX jobq_tasks_capture" in text, text
        assert "SCAN jobq_tasks" not in text, text
        return
    url = store.engine.url.set(drivername="postgresql")
    conninfo = url.render_as_string(hide_password=False)
    with psycopg.connect(conninfo, cursor_factory=psycopg.ClientCursor) as conn:
        custom = "\n".join(r[0] for r in conn.execute("EXPLAIN " + statement, parameters))
        # The plan after psycopg has prepared the statement: parameters, not values.
        names = list(parameters)
        positional = re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m.group(1)) + 1}", statement)
        conn.execute("PREPARE jobq_capture AS " + positional)
        conn.execute("SET plan_cache_mode = force_generic_plan")
        placeholders = ", ".join(["%s"] * len(names))
        generic = "\n".join(
            r[0]
            for r in conn.execute(
                f"EXPLAIN EXECUTE jobq_capture({placeholders})", [parameters[n] for n in names]
            )
        )
        conn.rollback()
    for plan_text in (custom, generic):
        assert "jobq_tasks_capture" in plan_text, plan_text
        assert "Seq Scan on jobq_tasks" not in plan_text, plan_text


def test_prepared_unique_enqueue_keeps_working(store: jobq.Store) -> None:
    """Past psycopg's prepare threshold the ON CONFLICT arbiter must still be found."""
    first = store.enqueue("t", {}, unique_key="same")
    for _ in range(12):
        assert store.enqueue("t", {}, unique_key="same") == first
    for i in range(12):
        store.enqueue("t", {}, unique_key=f"k{i}")
        assert len(store.capture(1, worker_id="w")) == 1


@pytest.fixture(autouse=True)
def _quiet(backend: str) -> None:
    """Nothing to set up; keeps both backends listed in the test ids."""
