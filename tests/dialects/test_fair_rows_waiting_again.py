"""Rows of a fair queue that come to wait without an enqueue of their own: a workflow's
nodes (written with their keys, woken as they are released) and an operator's retry.
Each is captured when its key's turn comes, not after the upkeep's settle; on every
database."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import jobq
from jobq import Status
from jobq.db.errors import InvalidOption
from jobq.db.tasks import Completion
from tests import shared_database
from tests.dialects.test_fair import key_rows

#: One migrated database per backend for the module, emptied before each test.
backend, shared_url, db_url = shared_database.FIXTURES


@pytest.fixture
def t(app: jobq.App) -> SimpleNamespace:
    """Queue q fair; a task whose key is its customer, one without a key."""
    app.store.fair_queues.make_fair("q")

    @app.task(queue="q", retries=0, fair_key="{customer}")
    def bill(customer: str) -> None: ...

    @app.task(queue="q", retries=0)
    def tidy() -> None: ...

    return SimpleNamespace(bill=bill, tidy=tidy)


def capture(app: jobq.App, limit: int = 10) -> list[jobq.Task]:
    return app.store.capture(limit, queues="q", worker_id="w", lease=600)


def end(app: jobq.App, task: jobq.Task, status: Status = Status.DONE) -> None:
    """Record ``task``'s end as a worker does for a workflow's node (its children settle)."""
    completion = Completion(task.id, task.attempt, status, in_workflow=task.workflow_id is not None)
    assert app.store.set_statuses([completion]) == 1


def idle(app: jobq.App, customer: str, t: SimpleNamespace) -> None:
    """Make ``customer``'s key idle: a task of it run and ended, then a capture that finds
    nothing of it."""
    t.bill.enqueue(customer=customer)
    (task,) = capture(app)
    end(app, task)
    assert capture(app) == []
    assert key_rows_of(app)[customer] is True


def key_rows_of(app: jobq.App) -> dict[str, bool]:
    return key_rows(app.store)


def test_a_workflows_nodes_are_stored_with_their_keys(app: jobq.App, t: SimpleNamespace) -> None:
    handle = jobq.group(
        t.bill.s(customer="acme"), t.bill.s(customer="x", _fair_key="chosen"), t.tidy.s()
    ).enqueue()
    captured = {task.id: task.fair_key for task in capture(app)}
    assert sorted(captured.values()) == ["", "acme", "chosen"]
    assert set(captured) == {task.id for task in handle.tasks}


def test_a_released_node_is_captured_though_its_key_was_idle(
    app: jobq.App, t: SimpleNamespace
) -> None:
    idle(app, "b", t)
    jobq.chain(t.bill.s(customer="a"), t.bill.s(customer="b")).enqueue()
    (first,) = capture(app)
    assert first.fair_key == "a"
    end(app, first)  # releases the second node, whose key "b" was idle
    (second,) = capture(app)
    assert second.fair_key == "b"


def test_a_node_released_by_the_sweep_wakes_its_key(app: jobq.App, t: SimpleNamespace) -> None:
    idle(app, "b", t)
    handle = jobq.chain(t.bill.s(customer="a"), t.bill.s(customer="b")).enqueue()
    (first,) = capture(app)
    # The end recorded as by a worker that does not settle nodes: the sweep releases it.
    completion = Completion(first.id, first.attempt, Status.DONE)
    assert app.store.set_statuses([completion]) == 1
    assert app.store.workflows.sweep_workflows() >= 1
    assert [task.id for task in capture(app)] == [handle.tasks[1].id]


def test_an_operators_retry_wakes_its_key(app: jobq.App, t: SimpleNamespace) -> None:
    t.bill.enqueue(customer="c")
    (task,) = capture(app)
    end(app, task, Status.FAILED)  # no retries left: the key has nothing more
    assert capture(app) == []
    assert key_rows_of(app)["c"] is True
    assert app.store.retry(task.id)
    assert [again.id for again in capture(app)] == [task.id]


def test_a_signatures_fair_key_is_checked(t: SimpleNamespace) -> None:
    with pytest.raises(InvalidOption, match="fair_key"):
        t.bill.s(customer="a", _fair_key="")


def test_a_node_written_before_its_queue_became_fair_gets_the_keyless_key(
    app: jobq.App, t: SimpleNamespace
) -> None:
    handle = jobq.chain(t.tidy.s(_queue="r"), t.tidy.s(_queue="r")).enqueue()
    app.store.fair_queues.make_fair("r")  # settles the first node, waiting; not the second
    (first,) = app.store.capture(10, queues="r", worker_id="w", lease=600)
    assert first.fair_key == ""
    end(app, first)
    (second,) = app.store.capture(10, queues="r", worker_id="w", lease=600)
    assert (second.id, second.fair_key) == (handle.tasks[1].id, "")
