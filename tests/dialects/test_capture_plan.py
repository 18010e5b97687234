"""Capture walks a partial index in its own order and stops at its LIMIT.

It must neither read the finished rows (the table may hold millions) nor sort the whole
backlog of queued rows, whichever queues it is asked for; and it must stay so once
psycopg prepares the statement and PostgreSQL plans it generically.
"""

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
BACKLOG = 20_000
QUEUE_CHOICES = {"all queues": None, "one queue": ["default"], "two queues": ["default", "q"]}


def fill(store: jobq.Store) -> None:
    """Many finished rows, a large backlog in 'default', a few tasks in 'q'."""
    store.enqueue_many("old", [{"i": i} for i in range(FINISHED)])
    with store.engine.begin() as conn:
        conn.execute(
            sa.update(tasks).values(status="done", finished_at=store.dialect.now(), attempt=1)
        )
    store.enqueue_many("backlog", [{"i": i} for i in range(BACKLOG)])
    store.enqueue_many("new", [{"i": i} for i in range(50)], queue="q")
    with store.engine.begin() as conn:
        mysql = conn.dialect.name in ("mysql", "mariadb")
        conn.exec_driver_sql("ANALYZE TABLE jobq_tasks" if mysql else "ANALYZE")


def captured_sql(store: jobq.Store, queues: list[str] | None) -> tuple[str, Any]:
    """The statement and parameters the Store sends for one capture (which is rolled back);
    where capture takes steps (MySQL), the first: the SELECT ... FOR UPDATE SKIP LOCKED."""
    seen: list[tuple[str, Any]] = []

    class Seen(Exception):
        pass

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        first = statement.lstrip().upper().startswith(("WITH", "UPDATE"))
        if "jobq_tasks" in statement and (first or "FOR UPDATE SKIP LOCKED" in statement):
            seen.append((statement, parameters))
            raise Seen  # abort: nothing is captured

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        with pytest.raises(Seen):
            store.capture(10, queues=queues, worker_id="explain", lease=30)
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    assert len(seen) == 1, seen
    return seen[0]


def sqlite_plan(store: jobq.Store, statement: str, parameters: Any) -> str:
    with store.engine.connect() as conn:
        plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).all()
    return "\n".join(str(row[-1]) for row in plan)


def mysql_plan(store: jobq.Store, statement: str, parameters: Any) -> list[dict[str, Any]]:
    with store.engine.connect() as conn:
        return [
            dict(row._mapping) for row in conn.exec_driver_sql("EXPLAIN " + statement, parameters)
        ]


def postgres_plans(store: jobq.Store, statement: str, parameters: Any) -> list[str]:
    """The custom plan, and the generic plan a prepared statement gets."""
    url = store.engine.url.set(drivername="postgresql")
    conninfo = url.render_as_string(hide_password=False)
    with psycopg.connect(conninfo, cursor_factory=psycopg.ClientCursor) as conn:
        custom = "\n".join(r[0] for r in conn.execute("EXPLAIN " + statement, parameters))
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
    return [custom, generic]


@pytest.mark.slow
def test_capture_walks_a_partial_index_in_order(store: jobq.Store, backend: str) -> None:
    fill(store)
    for label, queues in QUEUE_CHOICES.items():
        statement, parameters = captured_sql(store, queues)
        if backend == "sqlite":
            plan = sqlite_plan(store, statement, parameters)
            assert "USING INDEX jobq_tasks_capture" in plan, (label, plan)
            assert "SCAN jobq_tasks" not in plan, (label, plan)
            assert "TEMP B-TREE FOR ORDER BY" not in plan, (label, plan)
            continue
        if backend == "mysql":
            steps = mysql_plan(store, statement, parameters)
            (outer,) = [step for step in steps if step["table"] == "jobq_tasks"]
            # The emulated partial index, read in its order (no sort) up to the LIMIT.
            assert outer["key"].startswith("jobq_tasks_capture"), (label, steps)
            assert "filesort" not in (outer["Extra"] or ""), (label, steps)
            assert all(step["type"] != "ALL" for step in steps), (label, steps)
            continue
        for plan in postgres_plans(store, statement, parameters):
            assert "Index Scan using jobq_tasks_capture" in plan, (label, plan)
            assert "Seq Scan on jobq_tasks" not in plan, (label, plan)
            assert not re.search(r"->\s+Sort\b", plan), (label, plan)


def test_prepared_unique_enqueue_keeps_working(store: jobq.Store) -> None:
    """Past psycopg's prepare threshold the ON CONFLICT arbiter must still be found."""
    first = store.enqueue("t", {}, unique_key="same")
    for _ in range(12):
        assert store.enqueue("t", {}, unique_key="same") == first
    for i in range(12):
        store.enqueue("t", {}, unique_key=f"k{i}")
        assert len(store.capture(1, worker_id="w")) == 1
