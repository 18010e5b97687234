"""jobq.testing's immediate mode runs tasks through a real Store on in-memory SQLite."""

from __future__ import annotations

import pytest

import jobq
import jobq.testing
from jobq import Status

app = jobq.App("sqlite:///never-used.db")
calls: list[str] = []


@app.task
def add(a: int, b: int) -> int:
    return a + b


@app.task(retries=2)
def flaky(name: str) -> None:
    calls.append(name)
    raise RuntimeError(f"{name} failed")


@app.task
async def fetch(url: str) -> int:
    return len(url)


@app.task
def fan_out(n: int) -> int:
    for i in range(n):
        add.enqueue(a=i, b=i)
    return n


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    calls.clear()


def test_tasks_run_as_they_are_enqueued() -> None:
    with jobq.testing.immediate(app) as store:
        task_id = add.enqueue(a=2, b=3)
        task = store.get(task_id)
        assert task is not None and (task.status, task.result) == (Status.DONE, 5)
        async_id = fetch.enqueue(url="https://example.com")
        assert store.get(async_id).result == 19  # type: ignore[union-attr]


def test_failures_are_retried_until_terminal() -> None:
    with jobq.testing.immediate(app) as store:
        task_id = flaky.enqueue(name="x")
        task = store.get(task_id)
        assert task is not None
        assert (task.status, task.attempt, task.retries_left) == (Status.FAILED, 3, 0)
        assert "RuntimeError: x failed" in task.error  # type: ignore[operator]
    assert calls == ["x", "x", "x"]


def test_without_retry_at_once_a_failure_waits_for_its_backoff() -> None:
    with jobq.testing.immediate(app, retry_at_once=False) as store:
        task = store.get(flaky.enqueue(name="y"))
        assert task is not None and (task.status, task.retries_left) == (Status.FAILED, 2)
        assert task.finished_at is None
    assert calls == ["y"]


def test_tasks_enqueued_by_tasks_run_too() -> None:
    with jobq.testing.immediate(app) as store:
        fan_out.enqueue(n=3)
        assert store.counts() == {("default", Status.DONE): 4}


def test_each_block_has_a_fresh_database_and_the_app_gets_its_store_back() -> None:
    with jobq.testing.immediate(app) as store:
        add.enqueue(a=1, b=1)
    with jobq.testing.immediate(app) as again:
        assert again is not store and again.counts() == {}
    assert app._store is None


def test_enqueues_inside_a_transaction_run_at_run_pending() -> None:
    with jobq.testing.immediate(app) as store:
        with store.engine.begin() as conn:
            task_id = add.enqueue(a=4, b=4, _connection=conn)
        assert store.get(task_id).status is Status.QUEUED  # type: ignore[union-attr]
        assert jobq.testing.run_pending(app) == 1
        assert store.get(task_id).result == 8  # type: ignore[union-attr]


@app.task
def total() -> int:
    return sum(jobq.parent_results())


@app.task(retries=0)
def broken() -> None:
    raise RuntimeError("broken")


def test_immediate_runs_a_workflow_node_by_node_with_parent_results() -> None:
    with jobq.testing.immediate(app):
        chord = jobq.chord(jobq.group(add.s(a=i, b=1) for i in range(4)), total.s()).enqueue()
        assert chord.result(timeout=0) == 1 + 2 + 3 + 4
        failing = jobq.chain(broken.s(), add.s(a=1, b=1)).enqueue()
        assert [handle.status for handle in failing.tasks] == [Status.FAILED, Status.CANCELLED]
        with pytest.raises(jobq.TaskCancelled, match=r"task \d+ \(broken\), which it waits for"):
            failing.result(timeout=0)


def test_parent_results_outside_a_run_are_empty() -> None:
    assert jobq.parent_results() == []
    assert total() == 0
