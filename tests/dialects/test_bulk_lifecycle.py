"""Store.cancel_queue and Store.purge: every waiting task of one queue, in batches, and
nothing else; on every database."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

import jobq
from jobq import Status
from jobq.db.tasks import Completion, as_utc
from jobq.dialects.schema import tasks
from jobq.lifecycle import bulk
from tests import shared_database
from tests.helpers import all_rows, set_columns

#: One migrated database per backend for the module, emptied before each test.
backend, shared_url, db_url = shared_database.FIXTURES

FUTURE = datetime.now(UTC) + timedelta(days=1)


def every_kind(store: jobq.Store, queue: str = "bulk") -> tuple[list[int], list[int]]:
    """One task of ``queue`` in every state, and a waiting one of another queue:
    (the ids of the waiting tasks of ``queue``, the ids of every other task)."""
    waiting = [
        store.enqueue("queued", {}, queue=queue),
        store.enqueue("later", {}, queue=queue, run_at=FUTURE),  # queued, not due yet
        store.enqueue("retrying", {}, queue=queue, retries=2),
    ]
    set_columns(store, waiting[2], status="failed", attempt=1, retries_left=1, error="boom")
    others = []
    for name, values in [
        ("running", {"status": "in_progress", "attempt": 1, "locked_by": "w"}),
        ("done", {"status": "done", "attempt": 1}),
        ("failed", {"status": "failed", "attempt": 4, "retries_left": 0}),
        ("cancelled", {"status": "cancelled"}),
        ("tick", {"recurring": True, "status": "done"}),  # a schedule's row between ticks
        ("tick_due", {"recurring": True}),  # queued
        ("tick_retrying", {"recurring": True, "status": "failed", "retries_left": 1}),
    ]:
        task_id = store.enqueue(name, {}, queue=queue, retries=2)
        set_columns(store, task_id, **values)
        others.append(task_id)
    others.append(store.enqueue("elsewhere", {}, queue="other"))
    failed_elsewhere = store.enqueue("elsewhere_retrying", {}, queue="other", retries=2)
    set_columns(store, failed_elsewhere, status="failed", attempt=1, retries_left=1)
    others.append(failed_elsewhere)
    return waiting, others


def by_id(store: jobq.Store) -> dict[int, dict[str, Any]]:
    return {row["id"]: row for row in all_rows(store)}


def test_cancel_queue_cancels_only_the_waiting_tasks_of_that_queue(store: jobq.Store) -> None:
    waiting, others = every_kind(store)
    before = by_id(store)
    assert store.cancel_queue("bulk") == len(waiting)
    after = by_id(store)
    assert set(after) == set(before)
    for task_id in waiting:
        row = after[task_id]
        assert row["status"] == "cancelled" and row["finished_at"] is not None, row
        unchanged = {k: v for k, v in row.items() if k not in ("status", "finished_at")}
        assert unchanged == {
            k: v for k, v in before[task_id].items() if k not in ("status", "finished_at")
        }
    assert {i: after[i] for i in others} == {i: before[i] for i in others}
    assert store.cancel_queue("bulk") == 0  # none is left waiting


def test_cancel_queue_sets_finished_at_by_the_database_clock(store: jobq.Store) -> None:
    task_id = store.enqueue("a", {}, queue="bulk")
    with store.engine.connect() as conn:
        now = conn.execute(sa.select(store.dialect.now())).scalar_one()
    assert store.cancel_queue("bulk") == 1
    task = store.get(task_id)
    assert task is not None and task.finished_at is not None
    assert abs((task.finished_at - as_utc(now)).total_seconds()) < 5  # type: ignore[operator]


def test_purge_deletes_only_the_waiting_tasks_of_that_queue(store: jobq.Store) -> None:
    waiting, others = every_kind(store)
    before = by_id(store)
    assert store.purge("bulk") == len(waiting)
    after = by_id(store)
    assert after == {i: before[i] for i in others}
    assert store.purge("bulk") == 0


@pytest.mark.parametrize("operation", ["cancel_queue", "purge"])
def test_batches_smaller_than_the_queue_take_every_task(store: jobq.Store, operation: str) -> None:
    ids = store.enqueue_many("a", [{"n": n} for n in range(7)], queue="bulk")
    kept = store.enqueue("b", {}, queue="other")
    assert getattr(store, operation)("bulk", batch_size=3) == 7
    rows = by_id(store)
    if operation == "purge":
        assert list(rows) == [kept]
    else:
        assert [rows[i]["status"] for i in ids] == ["cancelled"] * 7
        assert rows[kept]["status"] == "queued"


@pytest.mark.parametrize("batch_size", [1, 7, 8, 2_100])
def test_every_batch_size_counts_exactly(store: jobq.Store, batch_size: int) -> None:
    # 2,500 rows in batches of 2,100: a batch names its ids in several statements.
    n = 2_500 if batch_size == 2_100 else 7
    store.enqueue_many("a", [{}] * n, queue="bulk")
    assert store.cancel_queue("bulk", batch_size=batch_size) == n
    assert store.counts() == {("bulk", Status.CANCELLED): n}
    with store.engine.begin() as conn:
        conn.execute(sa.update(tasks).values(status="queued", finished_at=None))
    assert store.purge("bulk", batch_size=batch_size) == n
    assert store.counts() == {}


def test_the_functions_of_the_module_are_what_the_store_calls(store: jobq.Store) -> None:
    waiting, others = every_kind(store)
    assert bulk.cancel_waiting(store, "bulk", batch_size=2) == len(waiting)
    assert store.retry(waiting[0])  # queued again
    assert bulk.purge(store, "bulk", batch_size=2) == 1
    assert store.get(waiting[0]) is None
    assert all(store.get(i) is not None for i in others)


@pytest.mark.parametrize("operation", ["cancel_queue", "purge"])
def test_a_row_captured_between_reading_and_writing_a_batch_stays(
    store: jobq.Store, operation: str
) -> None:
    """The UPDATE or DELETE says again that each row must be waiting: one captured after
    its batch read the ids (here: in the same transaction, as a capture committed
    meanwhile would be seen on PostgreSQL and MySQL) is left running."""
    ids = store.enqueue_many("a", [{}] * 5, queue="bulk")
    captured = ids[2]
    done: list[bool] = []

    def capture_after_the_select(conn: sa.Connection, cursor: Any, statement: str, *_: Any) -> None:
        if done or "ORDER BY jobq_tasks.id" not in statement:  # the batch's read of its ids
            return
        done.append(True)
        conn.execute(
            sa.update(tasks)
            .where(tasks.c.id == captured)
            .values(status="in_progress", attempt=1, locked_by="w")
        )

    event.listen(store.engine, "after_cursor_execute", capture_after_the_select)
    try:
        assert getattr(store, operation)("bulk") == 4
    finally:
        event.remove(store.engine, "after_cursor_execute", capture_after_the_select)
    assert done
    task = store.get(captured)
    assert task is not None and task.status is Status.IN_PROGRESS


@pytest.mark.parametrize("batch_size", [1, bulk.DEFAULT_BATCH])
@pytest.mark.parametrize("operation", ["cancel_queue", "purge"])
def test_blocked_workflow_nodes_are_waiting_and_the_nodes_after_them_settle(
    app: jobq.App, operation: str, batch_size: int
) -> None:
    """While the first step of a chain runs, a bulk action on queue ``victimq`` takes its
    two blocked steps there and a queued root there; the nodes after them in other
    queues end cancelled at once, naming the node taken (as `jobq cancel ID` does). When
    the running step ends done, nothing is released, and the sweep finds nothing left."""
    store = app.store

    @app.task(retries=0)
    def step(n: int) -> int:
        return n

    chained = jobq.chain(
        step.s(n=1),
        step.s(n=2, _queue="victimq"),
        step.s(n=3, _queue="other"),
        step.s(n=4, _queue="victimq"),
        step.s(n=5, _queue="other"),
    ).enqueue()
    first, victim, after, last, tail = (task.id for task in chained.tasks)
    rooted = jobq.chain(step.s(n=6, _queue="victimq"), step.s(n=7, _queue="other")).enqueue()
    root, child = (task.id for task in rooted.tasks)
    (running,) = store.capture(10, worker_id="w", queues="default")
    assert running.id == first
    victim_name = store.get(victim).name  # type: ignore[union-attr]
    assert getattr(store, operation)("victimq", batch_size=batch_size) == 3

    rows = by_id(store)
    if operation == "purge":
        assert not {victim, last, root} & set(rows)
        named = {
            parent: f"cancelled: task {parent}, which it waits for, no longer exists"
            for parent in (victim, last, root)
        }
    else:
        assert [rows[i]["status"] for i in (victim, last, root)] == ["cancelled"] * 3
        named = {
            parent: f"cancelled: task {parent} ({rows[parent]['name']}), which it waits for, "
            "was cancelled"
            for parent in (victim, root)
        }
        assert rows[victim]["name"] == victim_name
    # One batch deletes ``last`` with the edge into it: ``tail`` then waits for it, gone.
    tail_waits_for = last if operation == "purge" and batch_size > 1 else victim
    for task_id, parent in ((after, victim), (tail, tail_waits_for), (child, root)):
        row = rows[task_id]
        assert (row["status"], row["error"]) == ("cancelled", named[parent]), row
        assert row["finished_at"] is not None
    ended = Completion(first, running.attempt, Status.DONE, result=1, in_workflow=True)
    assert store.set_statuses([ended]) == 1
    assert store.capture(10, worker_id="w") == []
    assert {i: by_id(store)[i]["status"] for i in (after, tail, child)} == dict.fromkeys(
        (after, tail, child), "cancelled"
    )
    assert store.sweep_workflows() == 0
    assert getattr(store, operation)("victimq", batch_size=batch_size) == 0


BAD: list[tuple[str, Callable[[jobq.Store], int]]] = [
    ("queue", lambda s: s.cancel_queue("")),
    ("queue", lambda s: s.purge("")),
    ("queue", lambda s: s.purge(None)),  # type: ignore[arg-type]
    ("queue", lambda s: s.cancel_queue("q" * 256)),
    ("batch_size", lambda s: s.cancel_queue("bulk", batch_size=0)),
    ("batch_size", lambda s: s.purge("bulk", batch_size=0)),
    ("batch_size", lambda s: s.purge("bulk", batch_size=-1)),
    ("batch_size", lambda s: s.cancel_queue("bulk", batch_size=True)),
    ("batch_size", lambda s: s.purge("bulk", batch_size=2.5)),  # type: ignore[arg-type]
]


def test_bad_input_is_invalid_option_and_writes_nothing(store: jobq.Store) -> None:
    every_kind(store)
    before = all_rows(store)
    for option, call in BAD:
        with pytest.raises(jobq.InvalidOption) as raised:
            call(store)
        assert f"Option {option!r} is invalid" in str(raised.value)
    assert all_rows(store) == before
