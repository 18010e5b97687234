"""Pausing queues on every database: a paused queue is captured by nobody, from the
pause's commit on, whether it is limited or not, and whatever a Store's copy of
jobq_limits says; its running tasks end as they would; resuming lets it run again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

import jobq
from jobq import Status
from jobq.db.errors import InvalidOption
from jobq.dialects.schema import limits
from tests import shared_database
from tests.dialects.test_limits import by_queue, capture, enqueue, finish, limit_rows

#: One migrated database per backend for the module, emptied before each test.
backend, shared_url, db_url = shared_database.FIXTURES


@pytest.fixture
def other(db_url: str) -> Iterator[jobq.Store]:
    """A second Store on the same database: a worker whose copy of jobq_limits is fresh."""
    s = jobq.Store(db_url)
    yield s
    s.dispose()


# --- pause, resume, read ----------------------------------------------------------------


def test_pause_and_resume_say_whether_they_changed_anything(store: jobq.Store) -> None:
    assert store.paused_queues() == []
    assert store.pause_queue("a") is True
    assert store.pause_queue("a") is False
    assert store.pause_queue("b") is True
    assert store.paused_queues() == ["a", "b"]
    assert store.resume_queue("a") is True
    assert store.resume_queue("a") is False
    assert store.resume_queue("never") is False
    assert store.paused_queues() == ["b"]


def test_a_pause_is_not_a_limit_and_a_resume_leaves_no_row(store: jobq.Store) -> None:
    store.pause_queue("a")
    assert store.limits() == {}
    assert [(row["queue"], row["paused"]) for row in limit_rows(store)] == [("a", True)]
    store.resume_queue("a")
    assert limit_rows(store) == []


def test_a_limited_queue_keeps_its_limit_through_a_pause(store: jobq.Store) -> None:
    limit = store.set_limit("a", concurrency=2, rate="5/s")
    store.pause_queue("a")
    assert store.limits() == {"a": limit}  # the same setting: the same generation
    store.resume_queue("a")
    assert store.limits() == {"a": limit}
    assert [row["paused"] for row in limit_rows(store)] == [False]


def test_setting_or_clearing_a_limit_keeps_the_pause(store: jobq.Store) -> None:
    store.pause_queue("a")
    store.set_limit("a", concurrency=1)
    assert store.paused_queues() == ["a"]
    assert store.clear_limit("a") is True
    assert store.clear_limit("a") is False
    assert store.paused_queues() == ["a"]
    assert store.limits() == {}
    enqueue(store, "a", 2)
    assert capture(store) == []


def test_app_pause_and_resume(db_url: str, store: jobq.Store) -> None:
    app = jobq.App(db_url)
    try:
        assert app.pause_queue("a") is True
        assert store.paused_queues() == ["a"]
        assert app.resume_queue("a") is True
        assert store.paused_queues() == []
    finally:
        app.store.dispose()


@pytest.mark.parametrize("queue", ["", None, 3, "x" * 256])
def test_a_bad_queue_name_is_refused_and_writes_nothing(store: jobq.Store, queue: Any) -> None:
    with pytest.raises(InvalidOption, match="queue"):
        store.pause_queue(queue)
    with pytest.raises(InvalidOption, match="queue"):
        store.resume_queue(queue)
    assert limit_rows(store) == []


# --- capture ------------------------------------------------------------------------------


@pytest.mark.parametrize("queues", [None, ["a"], ["a", "b"]])
def test_a_paused_queue_is_not_captured_and_others_are(store: jobq.Store, queues: Any) -> None:
    enqueue(store, "a", 3)
    enqueue(store, "b", 2)
    store.pause_queue("a")
    assert by_queue(capture(store, 10, queues)) == ({} if queues == ["a"] else {"b": 2})
    store.resume_queue("a")
    assert by_queue(capture(store, 10, queues)) == {"a": 3}


@pytest.mark.parametrize("limit", [{"concurrency": 5}, {"rate": "10/s"}])
def test_a_paused_limited_queue_is_not_captured(store: jobq.Store, limit: Any) -> None:
    store.set_limit("a", **limit)
    enqueue(store, "a", 3)
    store.pause_queue("a")
    assert capture(store, 10) == []
    assert store.limited_queues() == {}
    store.resume_queue("a")
    assert by_queue(capture(store, 10)) == {"a": 3}


@pytest.mark.parametrize("limited", [False, True])
def test_a_pause_holds_for_a_store_whose_copy_predates_it(
    store: jobq.Store, other: jobq.Store, limited: bool
) -> None:
    """The Store that captures read jobq_limits just before the pause (its copy is kept
    for a second): the capture statements themselves leave the paused queue out."""
    if limited:
        store.set_limit("a", concurrency=5)
    enqueue(store, "a", 3)
    enqueue(store, "b", 1)
    assert set(other.limited_queues()) == ({"a"} if limited else set())
    store.pause_queue("a")
    assert by_queue(capture(other, 10)) == {"b": 1}
    assert by_queue(capture(other, 10, ["a"])) == {}


def test_a_limiter_capture_takes_nothing_of_a_paused_queue(store: jobq.Store) -> None:
    """capture_from_limited_queue (the tigerbeetle limiter's capture, after TigerBeetle
    granted slots) takes nothing of a queue paused since the slots were granted."""
    store.set_limit("a", concurrency=5)
    enqueue(store, "a", 3)
    store.pause_queue("a")
    assert store.capture_from_limited_queue("a", 3, worker_id="w", lease=60) == []
    store.resume_queue("a")
    assert len(store.capture_from_limited_queue("a", 3, worker_id="w", lease=60)) == 3


def test_running_tasks_of_a_paused_queue_end_as_they_would(store: jobq.Store) -> None:
    enqueue(store, "a", 3)
    running = capture(store, 2)
    store.pause_queue("a")
    finish(store, running[:1])
    finish(store, running[1:], Status.FAILED)  # a retry left: it waits, paused
    assert [store.get(task.id).status for task in running] == [Status.DONE, Status.FAILED]
    assert capture(store) == []
    store.resume_queue("a")
    assert len(capture(store)) == 2


def test_burst_mode_does_not_wait_for_a_paused_limited_queue(store: jobq.Store) -> None:
    """limited_waiting (a burst worker keeps going while limited queues hold tasks back)
    leaves a paused queue out: its tasks wait for a resume, not for room."""
    store.set_limit("a", concurrency=1)
    enqueue(store, "a", 2)
    capture(store)
    assert store.limited_waiting(["a"]) is True
    store.pause_queue("a")
    assert store.limited_waiting(["a"]) is False


def test_capturing_an_unpaused_queue_costs_no_extra_statement(
    store: jobq.Store, other: jobq.Store
) -> None:
    """With other queues paused, a capture of the rest is the capture statement alone (on
    MySQL, where capture takes steps: picking, taking and reading back what it picked)."""
    store.pause_queue("slow")
    enqueue(store, "fast", 3)
    other.limited_queues()  # read jobq_limits now
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if "jobq_" in statement:
            statements.append(statement)

    event.listen(other.engine, "before_cursor_execute", record)
    try:
        assert len(capture(other, 10, ["fast"])) == 3
    finally:
        event.remove(other.engine, "before_cursor_execute", record)
    assert len(statements) == (1 if other.dialect.capture_is_one_statement else 3), statements


def test_a_row_that_neither_limits_nor_pauses_is_refused(store: jobq.Store) -> None:
    """jobq_limits_not_empty: a row must limit its queue, pause it, or both."""
    row = {"queue": "a", "generation": 1, "updated_at": sa.func.now(), "paused": False}
    # MariaDB reports a failed CHECK as an OperationalError (4025), not an IntegrityError.
    refused_as = (sa.exc.IntegrityError, sa.exc.OperationalError)
    with pytest.raises(refused_as) as refused, store.engine.begin() as conn:
        conn.execute(sa.insert(limits).values(**row))
    assert "jobq_limits_not_empty" in str(refused.value)
    assert limit_rows(store) == []


# --- why ----------------------------------------------------------------------------------


def test_explain_names_the_pause_first(store: jobq.Store) -> None:
    store.set_limit("a", concurrency=1)
    enqueue(store, "a", 2)
    capture(store)
    waiting = enqueue(store, "a", 1)[0]
    assert store.explain(waiting).reason == "concurrency_full"
    store.pause_queue("a")
    explained = store.explain(waiting)
    assert explained.reason == "queue_paused"
    assert explained.details["paused"] is True
    assert "queue 'a' is paused" in explained.lines[1]


def test_explain_of_a_task_due_later_says_its_queue_is_paused(store: jobq.Store) -> None:
    later = store.enqueue("t", {}, queue="a", delay=3600)
    store.pause_queue("a")
    explained = store.explain(later)
    assert explained.reason == "due_later"
    assert explained.lines[1] == "and its queue 'a' is paused"
    store.resume_queue("a")
    assert "and its queue 'a' is paused" not in store.explain(later).lines
