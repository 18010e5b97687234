"""Workflows (jobq.workflows) on every database: nodes that run after other nodes.

Driven in this process through the Store's calls (capture, set_status(es),
complete_and_capture, cancel, rescue, sweep_workflows) on the rows an App's workflows
write, and once through a worker in a thread for the handles' results. An end recorded
by hand is marked ``in_workflow`` as the worker marks the ends of workflow nodes.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

import jobq
from jobq import Status
from jobq.db.tasks import Completion
from jobq.dialects.schema import task_edges, tasks, workflows
from jobq.worker import Worker
from tests import shared_database
from tests.helpers import all_rows, expire_lease, set_columns

c = tasks.c
PAST = datetime(2020, 1, 1, tzinfo=UTC)
#: The error of a node cancelled with its whole workflow.
WITH_ITS_WORKFLOW = "cancelled with its workflow"


# --- fixtures and helpers ---------------------------------------------------------------


#: One migrated database per backend for the module, emptied before each test.
backend, shared_url, db_url = shared_database.FIXTURES


@pytest.fixture
def t(app: jobq.App) -> SimpleNamespace:
    """The tasks the workflows here are made of."""

    @app.task(retries=0)
    def num(n: int) -> int:
        return n

    @app.task(retries=0)
    def plus(n: int) -> int:
        """Its parents' results, summed, plus ``n``."""
        return sum(jobq.parent_results()) + n

    @app.task(retries=0)
    def gather() -> list[Any]:
        return jobq.parent_results()

    @app.task(retries=2)
    def flaky(n: int) -> int:
        return n

    @app.task(retries=0)
    def boom(n: int) -> None:
        raise RuntimeError(f"boom {n}")

    @app.task(unique="once:{n}")
    def once(n: int) -> None: ...

    return SimpleNamespace(num=num, plus=plus, gather=gather, flaky=flaky, boom=boom, once=once)


def ids_of(handle: jobq.WorkflowHandle) -> list[int]:
    return [task.id for task in handle.tasks]


def row(store: jobq.Store, task_id: int) -> jobq.Task:
    task = store.get(task_id)
    assert task is not None, f"task {task_id} is gone"
    return task


def statuses(store: jobq.Store, *task_ids: int) -> list[Status]:
    return [row(store, task_id).status for task_id in task_ids]


def capture(store: jobq.Store, limit: int = 100, **options: Any) -> dict[int, jobq.Task]:
    """Every task a capture of ``limit`` took, by id."""
    return {task.id: task for task in store.capture(limit, worker_id="w", **options)}


def capture_only(store: jobq.Store, *task_ids: int) -> list[jobq.Task]:
    """Capture, checking that exactly ``task_ids`` were capturable; their tasks in that order."""
    captured = capture(store)
    assert sorted(captured) == sorted(task_ids)
    return [captured[task_id] for task_id in task_ids]


def end(store: jobq.Store, task: jobq.Task, status: Status = Status.DONE, **outcome: Any) -> None:
    """End run ``task`` as a worker would end a workflow node's run."""
    completion = Completion(task.id, task.attempt, status, in_workflow=True, **outcome)
    assert store.set_statuses([completion]) == 1


def count_rows(store: jobq.Store) -> tuple[int, int, int]:
    """(tasks, edges, workflows) rows in the database."""
    with store.engine.connect() as conn:
        return tuple(  # type: ignore[return-value]
            conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
            for table in (tasks, task_edges, workflows)
        )


def because(store: jobq.Store, parent_id: int, how: str) -> str:
    """The error of a node cancelled because task ``parent_id`` failed / was cancelled."""
    return f"cancelled: task {parent_id} ({row(store, parent_id).name}), which it waits for, {how}"


# --- writing a workflow -------------------------------------------------------------------


def test_a_workflow_is_written_whole_or_not_at_all(app: jobq.App, t: SimpleNamespace) -> None:
    store = app.store
    flow = jobq.chord(jobq.group(t.num.s(n=1), t.num.s(n=2), t.num.s(n=3)), t.gather.s())

    with pytest.raises(RuntimeError, match="caller's failure"), store.engine.begin() as conn:
        flow.enqueue(connection=conn)
        raise RuntimeError("the caller's failure")
    assert count_rows(store) == (0, 0, 0)

    with store.engine.begin() as conn:
        handle = flow.enqueue(connection=conn)
    assert count_rows(store) == (4, 3, 1)
    *header, callback = ids_of(handle)
    assert [task.id for task in store.workflow_tasks(handle.id)] == ids_of(handle)
    assert {task.workflow_id for task in store.workflow_tasks(handle.id)} == {handle.id}
    assert statuses(store, *header, callback) == [Status.QUEUED] * 3 + [Status.BLOCKED]
    assert store.workflow_edges(handle.id) == [
        (callback, position, parent, False) for position, parent in enumerate(header)
    ]
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(workflows.c.nodes)).scalar_one() == 4

    # Without a connection: a transaction of its own, committed, or undone whole when a
    # statement fails (here the edges' INSERT, after the workflow's and the nodes' rows).
    def refuse_edges(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if "INSERT INTO jobq_task_edges" in statement:
            raise RuntimeError("the edges could not be written")

    event.listen(store.engine, "before_cursor_execute", refuse_edges)
    try:
        with pytest.raises(RuntimeError, match="edges could not be written"):
            flow.enqueue()
    finally:
        event.remove(store.engine, "before_cursor_execute", refuse_edges)
    assert count_rows(store) == (4, 3, 1)
    alone = jobq.chain(t.num.s(n=4), t.num.s(n=5)).enqueue()
    assert count_rows(store) == (6, 4, 2)
    assert statuses(store, *ids_of(alone)) == [Status.QUEUED, Status.BLOCKED]
    assert store.workflow_tasks(10**9) == []


def test_a_signature_carries_the_task_options_and_its_own(
    app: jobq.App, t: SimpleNamespace
) -> None:
    store = app.store
    handle = jobq.Workflow()
    first = handle.add(t.flaky.s(n=1, _queue="side", _priority=7))
    handle.add(t.num.s(n=2), after=[first])
    enqueued = handle.enqueue()
    one, two = (row(store, task_id) for task_id in ids_of(enqueued))
    assert (one.name, one.args, one.queue_id, one.priority, one.retries_left) == (
        "flaky", {"n": 1}, "side", 7, 2,
    )  # fmt: skip
    assert (two.name, two.args, two.queue_id, two.priority, two.retries_left) == (
        "num", {"n": 2}, "default", 0, 0,
    )  # fmt: skip
    assert capture(store, queues="default") == {}
    assert list(capture(store, queues="side")) == [one.id]


# --- blocked nodes and their release ------------------------------------------------------


def test_nodes_with_parents_are_blocked_and_never_captured(
    app: jobq.App, t: SimpleNamespace
) -> None:
    store = app.store
    handle = jobq.chain(t.num.s(n=1), t.num.s(n=2, _priority=100), t.num.s(n=3)).enqueue()
    first, second, third = ids_of(handle)
    plain = store.enqueue("num", {"n": 9})
    # Due long ago, and first in priority: still not captured while they wait.
    set_columns(store, second, run_at=PAST)
    set_columns(store, third, run_at=PAST)
    assert sorted(capture(store)) == [first, plain]
    assert statuses(store, second, third) == [Status.BLOCKED, Status.BLOCKED]
    assert capture(store) == {}
    assert store.rescue() == 0
    assert store.sweep_workflows() == 0
    assert capture(store) == {}
    assert statuses(store, second, third) == [Status.BLOCKED, Status.BLOCKED]


def by_set_status(store: jobq.Store, task: jobq.Task, result: Any) -> list[jobq.Task]:
    assert store.set_status(task.id, task.attempt, Status.DONE, result=result)
    return []


def by_set_statuses(store: jobq.Store, task: jobq.Task, result: Any) -> list[jobq.Task]:
    end(store, task, result=result)
    return []


def by_complete_and_capture(store: jobq.Store, task: jobq.Task, result: Any) -> list[jobq.Task]:
    done = Completion(task.id, task.attempt, Status.DONE, result=result, in_workflow=True)
    applied, captured = store.complete_and_capture([done], 10, worker_id="w")
    assert applied == 1
    return captured


#: The ways a run's end is recorded; the worker's (complete_and_capture) captures too.
END_PATHS = {
    "set_status": by_set_status,
    "set_statuses": by_set_statuses,
    "complete_and_capture": by_complete_and_capture,
}


def test_a_chain_releases_one_step_at_a_time(app: jobq.App, t: SimpleNamespace) -> None:
    store = app.store
    for path, record in END_PATHS.items():
        handle = jobq.chain(*(t.num.s(n=n) for n in range(4))).enqueue()
        nodes = ids_of(handle)
        captured = capture(store)
        for step, task_id in enumerate(nodes):
            assert list(captured) == [task_id], (path, step)
            task = captured[task_id]
            assert task.attempt == 1
            waiting = [Status.DONE] * step + [Status.IN_PROGRESS] + [Status.BLOCKED] * (3 - step)
            assert statuses(store, *nodes) == waiting, (path, step)
            assert store.parent_results(task_id) == ([] if step == 0 else [{"step": step - 1}])
            # The worker's path captures the next step in the call that ends this one.
            captured = {next_.id: next_ for next_ in record(store, task, {"step": step})}
            if not captured:
                captured = capture(store)
        assert captured == {}, path
        assert statuses(store, *nodes) == [Status.DONE] * 4
        assert all(edge[3] for edge in store.workflow_edges(handle.id))
        assert handle.result(timeout=0) == {"step": 3}


def test_a_chord_callback_is_queued_by_the_write_that_ends_the_last_member(
    app: jobq.App, t: SimpleNamespace
) -> None:
    store = app.store
    handle = jobq.chord([t.num.s(n=n) for n in range(3)], t.gather.s()).enqueue()
    *members, callback = ids_of(handle)
    running = capture_only(store, *members)
    end(store, running[0], result=0)
    end(store, running[1], result=1)
    assert statuses(store, callback) == [Status.BLOCKED]
    assert capture(store) == {}

    # An end rolled back with its transaction releases nothing.
    last = running[2]
    with pytest.raises(RuntimeError, match="rolled back"), store.engine.begin() as conn:
        assert store.set_status(last.id, last.attempt, Status.DONE, result=2, connection=conn)
        raise RuntimeError("rolled back")
    assert statuses(store, last.id, callback) == [Status.IN_PROGRESS, Status.BLOCKED]

    # In the caller's transaction nothing looks again after the commit, and no sweep runs:
    # the callback is queued by the very write that records the last member's end.
    with store.engine.begin() as conn:
        assert store.set_status(last.id, last.attempt, Status.DONE, result=2, connection=conn)
        queued = conn.execute(sa.select(c.status).where(c.id == callback)).scalar_one()
        assert queued == Status.QUEUED.value
    (gathering,) = capture_only(store, callback)
    assert store.parent_results(callback) == [0, 1, 2]
    end(store, gathering, result=[0, 1, 2])
    assert handle.result(timeout=0) == [0, 1, 2]


def test_members_ending_in_one_batch_queue_the_callback_once(
    app: jobq.App, t: SimpleNamespace
) -> None:
    store = app.store
    handle = jobq.chord([t.num.s(n=n) for n in range(5)], t.gather.s()).enqueue()
    *members, callback = ids_of(handle)
    running = capture_only(store, *members)
    ends = [
        Completion(task.id, task.attempt, Status.DONE, result=n, in_workflow=True)
        for n, task in enumerate(running)
    ]
    applied, captured = store.complete_and_capture(ends, 10, worker_id="w")
    assert applied == 5
    assert [task.id for task in captured] == [callback]
    assert captured[0].attempt == 1
    assert store.parent_results(callback) == [0, 1, 2, 3, 4]
    assert capture(store) == {}


def test_parent_results_follow_the_after_order(app: jobq.App, t: SimpleNamespace) -> None:
    store = app.store
    flow = jobq.Workflow()
    roots = [flow.add(t.num.s(n=n)) for n in range(4)]
    order = [roots[2], roots[0], roots[3], roots[1]]
    flow.add(t.gather.s(), after=order)
    handle = flow.enqueue()
    *root_ids, child = ids_of(handle)
    running = capture_only(store, *root_ids)
    for index in (1, 3, 0, 2):  # ends in yet another order
        end(store, running[index], result={"root": index})
    assert store.parent_results(child) == [{"root": 2}, {"root": 0}, {"root": 3}, {"root": 1}]
    parents = store.parents(child)
    assert [parent_id for parent_id, _ in parents] == [root_ids[i] for i in (2, 0, 3, 1)]
    assert all(task is not None and task.status is Status.DONE for _, task in parents)
    assert store.parents(root_ids[0]) == [] and store.parent_results(root_ids[0]) == []
    plain = store.enqueue("num", {"n": 1})
    assert store.parents(plain) == [] and store.parent_results(plain) == []
    # A parent whose row was pruned gives None in its place.
    with store.engine.begin() as conn:
        conn.execute(sa.delete(tasks).where(c.id == root_ids[0]))
    assert store.parent_results(child) == [{"root": 2}, None, {"root": 3}, {"root": 1}]
    assert [task is None for _, task in store.parents(child)] == [False, True, False, False]


def test_a_delayed_child_is_not_due_after_its_parents_until_its_run_at(
    app: jobq.App, t: SimpleNamespace
) -> None:
    store = app.store
    later = datetime.now(UTC) + timedelta(days=3)
    flow = jobq.Workflow()
    parent = flow.add(t.num.s(n=1))
    flow.add(t.num.s(n=2, _delay=3600), after=[parent])
    flow.add(t.num.s(n=3, _run_at=later), after=[parent])
    flow.add(t.num.s(n=4), after=[parent])
    handle = flow.enqueue()
    parent_id, delayed_id, at_id, now_id = ids_of(handle)
    created = row(store, delayed_id).created_at
    (running,) = capture_only(store, parent_id)
    end(store, running, result=1)
    assert statuses(store, delayed_id, at_id, now_id) == [Status.QUEUED] * 3
    assert abs(row(store, delayed_id).run_at - (created + timedelta(seconds=3600))) < timedelta(
        seconds=60
    )
    assert abs(row(store, at_id).run_at - later) < timedelta(seconds=1)
    # A node without a delay is due from its release, not from its enqueue.
    assert row(store, now_id).run_at >= row(store, parent_id).finished_at  # type: ignore[operator]
    capture_only(store, now_id)
    set_columns(store, delayed_id, run_at=PAST)
    capture_only(store, delayed_id)
    assert capture(store) == {}


# --- failures, retries and cancels ----------------------------------------------------------


def test_a_parent_retrying_leaves_its_children_blocked(app: jobq.App, t: SimpleNamespace) -> None:
    store = app.store
    for path in ("set_status", "set_statuses", "rescue"):
        handle = jobq.chain(t.flaky.s(n=1), t.num.s(n=2), t.num.s(n=3)).enqueue()
        parent, child, grandchild = ids_of(handle)
        for attempt in (1, 2):
            (running,) = capture_only(store, parent)
            assert running.attempt == attempt
            if path == "set_status":
                assert store.set_status(
                    parent, attempt, Status.FAILED, error="flaky", retry_delay=0
                )
            elif path == "set_statuses":
                end(store, running, Status.FAILED, error="flaky", retry_delay=0)
            else:
                expire_lease(store, parent)
                assert store.rescue() == 1
                assert store.sweep_workflows() == 0
            failed = row(store, parent)
            # Capture spends a retry of a failed run: 2 are left after the first, 1 after.
            expected = (Status.FAILED, None, 3 - attempt)
            assert (failed.status, failed.finished_at, failed.retries_left) == expected, path
            for waiting in (child, grandchild):
                task = row(store, waiting)
                assert (task.status, task.error, task.finished_at) == (
                    Status.BLOCKED, None, None,
                ), path  # fmt: skip
        (running,) = capture_only(store, parent)
        assert (running.attempt, running.retries_left) == (3, 0)
        end(store, running, result=1)
        capture_only(store, child)  # left running: its lease holds it
        assert statuses(store, grandchild) == [Status.BLOCKED]


def fail_for_good(store: jobq.Store, run: jobq.Task, how: str) -> None:
    """End ``run`` failed for good, by way of ``how``."""
    if how == "set_status":
        assert store.set_status(run.id, run.attempt, Status.FAILED, error="boom")
    elif how == "set_statuses":
        end(store, run, Status.FAILED, error="boom")
    elif how == "complete_and_capture":
        ended = Completion(run.id, run.attempt, Status.FAILED, error="boom", in_workflow=True)
        assert store.complete_and_capture([ended], 10, worker_id="w") == (1, [])
    else:  # a failure no retry could mend, though the task has retries left
        ended = Completion(
            run.id, run.attempt, Status.FAILED, error="boom", terminal=True, in_workflow=True
        )
        assert store.set_statuses([ended]) == 1


def test_a_parent_failed_for_good_cancels_its_descendants_not_another_branch(
    app: jobq.App, t: SimpleNamespace
) -> None:
    store = app.store
    for how in ("set_status", "set_statuses", "complete_and_capture", "terminal"):
        flow = jobq.Workflow()
        failing = flow.add(t.boom.s(n=1) if how != "terminal" else t.flaky.s(n=1))
        other = flow.add(t.num.s(n=2))
        child = flow.add(t.num.s(n=3), after=[failing])
        flow.add(t.num.s(n=4), after=[child])
        flow.add(t.gather.s(), after=[other, failing])
        branch = flow.add(t.num.s(n=5), after=[other])
        flow.add(t.num.s(n=6), after=[branch])
        handle = flow.enqueue()
        names = ["failing", "other", "child", "grandchild", "both", "branch", "end"]
        ids = dict(zip(names, ids_of(handle), strict=True))
        fail, unrelated = capture_only(store, ids["failing"], ids["other"])
        fail_for_good(store, fail, how)
        failed = row(store, ids["failing"])
        assert failed.status is Status.FAILED and failed.finished_at is not None, how
        reason = because(store, ids["failing"], "failed")
        assert reason == f"cancelled: task {fail.id} ({failed.name}), which it waits for, failed"
        for name in ("child", "grandchild", "both"):
            task = row(store, ids[name])
            assert (task.status, task.error) == (Status.CANCELLED, reason), (how, name)
            assert task.finished_at is not None and task.attempt == 0
        # The other branch of the same DAG runs on.
        assert statuses(store, ids["other"], ids["branch"], ids["end"]) == [
            Status.IN_PROGRESS, Status.BLOCKED, Status.BLOCKED,
        ], how  # fmt: skip
        end(store, unrelated, result=2)
        (branch_run,) = capture_only(store, ids["branch"])
        end(store, branch_run, result=5)
        (last,) = capture_only(store, ids["end"])
        end(store, last, result=6)
        assert statuses(store, ids["both"]) == [Status.CANCELLED]
        assert capture(store) == {}
        with pytest.raises(jobq.TaskFailed):
            handle.tasks[0].result(timeout=0)
        # The workflow's results: the first final node's that did not end done raises.
        with pytest.raises(jobq.TaskCancelled) as raised:
            handle.result(timeout=0)
        assert (raised.value.task_id, raised.value.error) == (ids["grandchild"], reason)


def test_cancelling_a_node_cancels_its_descendants(app: jobq.App, t: SimpleNamespace) -> None:
    store = app.store
    # A waiting root: it and everything after it.
    first = jobq.chain(t.num.s(n=1), t.num.s(n=2), t.num.s(n=3)).enqueue()
    root, middle, leaf = ids_of(first)
    assert store.cancel(root)
    assert row(store, root).status is Status.CANCELLED
    reason = because(store, root, "was cancelled")
    for task_id in (middle, leaf):
        assert (row(store, task_id).status, row(store, task_id).error) == (Status.CANCELLED, reason)
    assert not store.cancel(middle)  # ended already

    # A blocked middle node: it and what comes after it; its parent runs on.
    second = jobq.chain(t.num.s(n=1), t.num.s(n=2), t.num.s(n=3)).enqueue()
    root, middle, leaf = ids_of(second)
    assert store.cancel(middle)
    assert statuses(store, root, middle, leaf) == [
        Status.QUEUED,
        Status.CANCELLED,
        Status.CANCELLED,
    ]
    assert row(store, leaf).error == because(store, middle, "was cancelled")
    (running,) = capture_only(store, root)
    end(store, running, result=1)
    assert statuses(store, middle, leaf) == [Status.CANCELLED, Status.CANCELLED]
    assert capture(store) == {}


def test_cancelling_a_running_node_asks_and_its_end_decides(
    app: jobq.App, t: SimpleNamespace
) -> None:
    store = app.store
    finishing = jobq.chain(t.flaky.s(n=1), t.num.s(n=2), t.num.s(n=3)).enqueue()
    failing = jobq.chain(t.flaky.s(n=4), t.num.s(n=5), t.num.s(n=6)).enqueue()
    first, second = capture_only(store, finishing.tasks[0].id, failing.tasks[0].id)
    for handle in (finishing, failing):
        parent, child, grandchild = ids_of(handle)
        assert store.cancel(parent)
        asked = row(store, parent)
        assert asked.status is Status.IN_PROGRESS and asked.cancel_requested_at is not None
        assert statuses(store, child, grandchild) == [Status.BLOCKED, Status.BLOCKED]

    # Done despite the request: recorded as it happened, its child released.
    end(store, first, result=1)
    assert statuses(store, *ids_of(finishing)) == [Status.DONE, Status.QUEUED, Status.BLOCKED]

    # A failure with retries left would wait again: it ends cancelled, and so does
    # everything after it.
    end(store, second, Status.FAILED, error="flaky", retry_delay=0)
    parent, child, grandchild = ids_of(failing)
    ended = row(store, parent)
    assert (ended.status, ended.error) == (Status.CANCELLED, "cancelled on request")
    reason = because(store, parent, "was cancelled")
    for task_id in (child, grandchild):
        assert (row(store, task_id).status, row(store, task_id).error) == (Status.CANCELLED, reason)


def test_cancel_workflow_cancels_waiting_nodes_and_asks_running_ones(
    app: jobq.App, t: SimpleNamespace
) -> None:
    store = app.store
    flow = jobq.Workflow()
    done = flow.add(t.num.s(n=1))
    running = flow.add(t.flaky.s(n=2))
    flow.add(t.num.s(n=3, _queue="later"))
    flow.add(t.flaky.s(n=4))
    flow.add(t.gather.s(), after=[done, running])
    handle = flow.enqueue()
    other = jobq.chain(t.num.s(n=5, _queue="later"), t.num.s(n=6)).enqueue()
    done_id, running_id, queued_id, retrying_id, blocked_id = ids_of(handle)

    captured = capture(store, queues="default")
    assert sorted(captured) == sorted([done_id, running_id, retrying_id])
    end(store, captured[done_id], result=1)
    end(store, captured[retrying_id], Status.FAILED, error="flaky", retry_delay=3600)
    before_other = [row(store, task_id) for task_id in ids_of(other)]

    assert handle.cancel() == 4  # queued, retrying, blocked: cancelled; running: asked
    for task_id in (queued_id, retrying_id, blocked_id):
        task = row(store, task_id)
        assert (task.status, task.error) == (Status.CANCELLED, WITH_ITS_WORKFLOW), task_id
        assert task.finished_at is not None
    assert row(store, done_id).status is Status.DONE
    asked = row(store, running_id)
    assert asked.status is Status.IN_PROGRESS and asked.cancel_requested_at is not None
    assert [row(store, task_id) for task_id in ids_of(other)] == before_other
    assert store.cancel_workflow(handle.id) == 1  # the running node, asked again
    assert row(store, running_id).cancel_requested_at == asked.cancel_requested_at

    # The running node's later failure with retries left ends it cancelled.
    end(store, captured[running_id], Status.FAILED, error="flaky", retry_delay=0)
    ended = row(store, running_id)
    assert (ended.status, ended.error) == (Status.CANCELLED, "cancelled on request")
    assert store.cancel_workflow(handle.id) == 0  # nothing is left to cancel
    assert list(capture(store)) == [ids_of(other)[0]]  # the other workflow runs on
    with pytest.raises(jobq.WorkflowNotFound):
        store.cancel_workflow(10**9)
    with pytest.raises(jobq.TaskCancelled, match="cancelled with its workflow"):
        handle.result(timeout=0)


# --- what no end settled: the race of two last parents, rescue, deleted parents --------------


def race(store: jobq.Store, backend: str, first: jobq.Task, second: jobq.Task) -> None:
    """End runs ``first`` and ``second`` (the last parents of a node) as two transactions at
    once would: each records its end and marks its edge, neither sees the other's, and
    nothing looks again."""
    if backend == "sqlite":
        # One writer at a time: write the state the race leaves (ends that do not settle,
        # then both edges marked done).
        ends = [Completion(run.id, run.attempt, Status.DONE, result=run.args["n"])
                for run in (first, second)]  # fmt: skip
        assert store.set_statuses(ends) == 2
        with store.engine.begin() as conn:
            marked = sa.update(task_edges).where(task_edges.c.parent_id.in_([first.id, second.id]))
            conn.execute(marked.values(parent_done=True))
        return
    # The ends must not wait for each other's locks: should the second, it fails in
    # seconds instead of waiting for the first, which this thread would commit after it.
    wait_at_most = {
        "postgresql": "SET LOCAL lock_timeout = '5s'",
        "mysql": "SET SESSION innodb_lock_wait_timeout = 5",
    }[backend]
    with store.engine.connect() as one, store.engine.connect() as other:
        one_tx, other_tx = one.begin(), other.begin()
        other.exec_driver_sql(wait_at_most)
        for run, conn in ((first, one), (second, other)):
            assert store.set_status(
                run.id, run.attempt, Status.DONE, result=run.args["n"], connection=conn
            )
        one_tx.commit()
        other_tx.commit()


def test_two_last_parents_ending_in_concurrent_transactions_are_repaired(
    app: jobq.App, t: SimpleNamespace, backend: str
) -> None:
    """Neither end queues the callback; the writer's look once committed (look_again), or
    any worker's sweep, does."""
    store = app.store
    looked_at, swept = (
        jobq.chord([t.num.s(n=n), t.num.s(n=n + 1)], t.gather.s()).enqueue() for n in (1, 3)
    )
    runs = capture_only(store, *ids_of(looked_at)[:2], *ids_of(swept)[:2])
    for handle, first, second in ((looked_at, *runs[:2]), (swept, *runs[2:])):
        race(store, backend, first, second)
        *parents, callback = ids_of(handle)
        assert statuses(store, *parents, callback) == [
            Status.DONE, Status.DONE, Status.BLOCKED,
        ]  # fmt: skip
        assert [edge[3] for edge in store.workflow_edges(handle.id)] == [True, True]
    assert capture(store) == {}

    assert store.look_again(ids_of(looked_at)[:2]) == 1
    assert statuses(store, ids_of(looked_at)[2], ids_of(swept)[2]) == [
        Status.QUEUED, Status.BLOCKED,
    ]  # fmt: skip
    assert store.sweep_workflows() == 1
    assert store.sweep_workflows() == 0
    captured = capture_only(store, ids_of(looked_at)[2], ids_of(swept)[2])
    assert [store.parent_results(run.id) for run in captured] == [[1, 2], [3, 4]]


def test_sweep_cancels_the_descendants_of_a_deleted_parent(
    app: jobq.App, t: SimpleNamespace
) -> None:
    """A parent row deleted by a write that settles nothing (by hand, or an older jobq's
    purge): the sweep cancels the nodes after it. (jobq's own purge settles them itself:
    tests/dialects/test_bulk_lifecycle.py.)"""
    store = app.store
    handle = jobq.chain(t.num.s(n=1, _queue="doomed"), t.num.s(n=2), t.num.s(n=3)).enqueue()
    parent, child, grandchild = ids_of(handle)
    kept = jobq.chain(t.num.s(n=4), t.num.s(n=5)).enqueue()
    with store.engine.begin() as conn:
        assert conn.execute(sa.delete(tasks).where(c.id == parent)).rowcount == 1
    assert store.get(parent) is None
    assert statuses(store, child, grandchild) == [Status.BLOCKED, Status.BLOCKED]
    assert store.sweep_workflows() == 2
    reason = f"cancelled: task {parent}, which it waits for, no longer exists"
    for task_id in (child, grandchild):
        task = row(store, task_id)
        assert (task.status, task.error) == (Status.CANCELLED, reason)
        assert task.finished_at is not None
    assert statuses(store, *ids_of(kept)) == [Status.QUEUED, Status.BLOCKED]
    assert store.sweep_workflows() == 0


def test_sweep_cancels_the_descendants_of_a_parent_rescue_ended(
    app: jobq.App, t: SimpleNamespace
) -> None:
    store = app.store
    expired = jobq.chain(t.num.s(n=1), t.num.s(n=2), t.num.s(n=3)).enqueue()
    asked = jobq.chain(t.flaky.s(n=4), t.num.s(n=5), t.num.s(n=6)).enqueue()
    capture_only(store, expired.tasks[0].id, asked.tasks[0].id)
    assert store.cancel(asked.tasks[0].id)
    for handle in (expired, asked):
        expire_lease(store, handle.tasks[0].id)
    assert store.rescue() == 2
    # No retry left: failed for good; a cancel asked for: cancelled, retries or not.
    ends = [row(store, handle.tasks[0].id) for handle in (expired, asked)]
    assert [(task.status, task.error) for task in ends] == [
        (Status.FAILED, "lease expired"), (Status.CANCELLED, "cancelled on request"),
    ]  # fmt: skip
    assert all(task.finished_at is not None for task in ends)
    # Rescue ends runs without settling them: the next sweep (every worker's) does.
    below = [*ids_of(expired)[1:], *ids_of(asked)[1:]]
    assert statuses(store, *below) == [Status.BLOCKED] * 4
    assert store.sweep_workflows() == 4
    for handle, how in ((expired, "failed"), (asked, "was cancelled")):
        parent, *after = ids_of(handle)
        reason = because(store, parent, how)
        for task_id in after:
            task = row(store, task_id)
            assert (task.status, task.error) == (Status.CANCELLED, reason)
    assert store.sweep_workflows() == 0


def test_sweep_queues_the_child_of_a_parent_done_by_an_end_that_did_not_settle(
    app: jobq.App, t: SimpleNamespace
) -> None:
    store = app.store
    handle = jobq.chain(t.num.s(n=1), t.num.s(n=2)).enqueue()
    parent, child = ids_of(handle)
    (running,) = capture_only(store, parent)
    # An end not marked in_workflow (a worker that does not know workflows, say).
    assert store.set_statuses([Completion(parent, running.attempt, Status.DONE, result=1)]) == 1
    assert statuses(store, parent, child) == [Status.DONE, Status.BLOCKED]
    assert store.workflow_edges(handle.id) == [(child, 0, parent, False)]
    assert store.sweep_workflows() == 1
    assert store.workflow_edges(handle.id) == [(child, 0, parent, True)]
    capture_only(store, child)


def test_retrying_a_node_cancelled_for_its_parent_does_not_run_it_before_its_parent(
    app: jobq.App, t: SimpleNamespace
) -> None:
    """A node runs only once every parent is done, whoever queues it again."""
    store = app.store
    handle = jobq.chain(t.boom.s(n=1), t.gather.s()).enqueue()
    parent, child = ids_of(handle)
    (running,) = capture_only(store, parent)
    end(store, running, Status.FAILED, error="boom")
    assert statuses(store, parent, child) == [Status.FAILED, Status.CANCELLED]
    assert store.retry(child)  # `jobq retry ID`: back to waiting for its parent
    assert capture(store) == {}, "a node ran though its parent failed"
    assert row(store, child).status is Status.BLOCKED
    store.sweep_workflows()  # its parent failed for good: it is cancelled again
    assert statuses(store, parent, child) == [Status.FAILED, Status.CANCELLED]
    assert store.retry(parent)  # the parent again: the child waits for it again
    assert statuses(store, parent, child) == [Status.QUEUED, Status.BLOCKED]
    assert row(store, child).error is None
    (running,) = capture_only(store, parent)
    end(store, running, Status.DONE)
    assert statuses(store, parent, child) == [Status.DONE, Status.QUEUED]


def test_a_chord_of_one_signature_is_a_group_of_one(app: jobq.App, t: SimpleNamespace) -> None:
    handle = jobq.chord(t.num.s(n=1), t.gather.s()).enqueue()
    assert statuses(app.store, *ids_of(handle)) == [Status.QUEUED, Status.BLOCKED]


# --- graphs and signatures refused ------------------------------------------------------------


def _after_a_node_of_another_workflow(t: SimpleNamespace) -> object:
    stranger = jobq.Workflow().add(t.num.s(n=1))
    return jobq.Workflow().add(t.num.s(n=2), after=[stranger])


def _after_a_node_twice(t: SimpleNamespace) -> object:
    flow = jobq.Workflow()
    node = flow.add(t.num.s(n=1))
    return flow.add(t.num.s(n=2), after=[node, node])


def _after_a_signature(t: SimpleNamespace) -> object:
    flow = jobq.Workflow()
    flow.add(t.num.s(n=1))
    return flow.add(t.num.s(n=2), after=[t.num.s(n=1)])


BAD_GRAPHS: dict[str, Callable[[SimpleNamespace], object]] = {
    "after a node of another workflow": _after_a_node_of_another_workflow,
    "after a node twice": _after_a_node_twice,
    "after a signature": _after_a_signature,
    "a node of a task function": lambda t: jobq.Workflow().add(t.num),
    "a workflow of no nodes": lambda t: jobq.Workflow().enqueue(),
    "an empty chain": lambda t: jobq.chain(),
    "an empty group": lambda t: jobq.group(),
    "an empty iterable group": lambda t: jobq.group(iter([])),
    "a chord of an empty header": lambda t: jobq.chord([], t.gather.s()),
    "a chain with a number": lambda t: jobq.chain(t.num.s(n=1), 5),
    "a group with a string": lambda t: jobq.group(t.num.s(n=1), "x"),
    "a chord with a number as callback": lambda t: jobq.chord(jobq.group(t.num.s(n=1)), 5),
    "a group of a number": lambda t: jobq.group(5),
    "a task with unique=": lambda t: t.once.s(n=1),
    "both _delay and _run_at": lambda t: t.num.s(n=1, _delay=5, _run_at=datetime.now(UTC)),
}


def outcome(call: Callable[[], object]) -> str:
    """What ``call()`` did: its error's class and message, or "no error"."""
    try:
        call()
    except Exception as error:
        return f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
    return "no error"


def test_bad_graphs_are_refused_before_anything_is_written(
    app: jobq.App, t: SimpleNamespace
) -> None:
    wrong = {}
    for case, build in BAD_GRAPHS.items():
        got = outcome(lambda build=build: build(t))  # type: ignore[misc]
        if not got.startswith("InvalidWorkflow: Invalid workflow: "):
            wrong[case] = got
    # A node of an app on another database.
    elsewhere = jobq.App("sqlite://")

    @elsewhere.task()
    def num(n: int) -> int:
        return n

    flow = jobq.Workflow()
    flow.add(t.num.s(n=1))
    got = outcome(lambda: flow.add(num.s(n=2)))
    elsewhere.store.dispose()
    if (
        got
        != "InvalidWorkflow: Invalid workflow: its tasks belong to apps with different databases"
    ):
        wrong["a node of another database"] = got
    assert wrong == {}
    assert count_rows(app.store) == (0, 0, 0)


BAD_ARGUMENTS: dict[str, tuple[dict[str, Any], type[Exception]]] = {
    "missing": ({}, jobq.InvalidTaskArguments),
    "unexpected": ({"n": 1, "m": 2}, jobq.InvalidTaskArguments),
    "not JSON": ({"n": object()}, jobq.InvalidTaskArguments),
    "a connection": ({"n": 1, "_connection": None}, jobq.InvalidTaskArguments),
    "an unknown option": ({"n": 1, "_lease": 3}, jobq.InvalidTaskArguments),
    "a negative delay": ({"n": 1, "_delay": -1}, jobq.InvalidOption),
    "a run_at not a datetime": ({"n": 1, "_run_at": "2030"}, jobq.InvalidOption),
    "a priority not an integer": ({"n": 1, "_priority": "high"}, jobq.InvalidOption),
    "a priority out of range": ({"n": 1, "_priority": 10**12}, jobq.InvalidOption),
    "an empty queue": ({"n": 1, "_queue": ""}, jobq.InvalidOption),
    "a queue not a string": ({"n": 1, "_queue": 5}, jobq.InvalidOption),
}


def test_bad_arguments_to_a_signature_are_refused_as_enqueue_refuses_them(
    app: jobq.App, t: SimpleNamespace
) -> None:
    """Each refused with the error enqueue gives (a signature takes no _connection), before
    anything is written."""
    wrong = {}
    for case, (kwargs, error) in BAD_ARGUMENTS.items():

        def enqueue(kwargs: dict[str, Any] = kwargs) -> object:
            return t.num.enqueue(**dict(kwargs))

        def as_node(kwargs: dict[str, Any] = kwargs) -> object:
            return jobq.chain(t.num.s(**dict(kwargs)), t.gather.s()).enqueue()

        if "_connection" not in kwargs:
            assert outcome(enqueue).startswith(f"{error.__name__}: "), case
        got = outcome(as_node)
        if not got.startswith(f"{error.__name__}: "):
            wrong[case] = f"{got} (rows written: {count_rows(app.store)})"
    assert wrong == {}
    assert count_rows(app.store) == (0, 0, 0)


# --- handles, with a worker -------------------------------------------------------------------


@contextmanager
def worker_running(app: jobq.App) -> Iterator[Worker]:
    """A worker running ``app``'s tasks in a thread, stopped at the end of the block."""
    worker = Worker(app, concurrency=4, poll_interval=0.05, grace=5)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(timeout=30)
        assert not thread.is_alive(), "the worker did not stop"


def test_workflow_handles_give_the_results_of_their_final_nodes(
    app: jobq.App, t: SimpleNamespace
) -> None:
    linear = jobq.chain(t.num.s(n=1), t.plus.s(n=10), t.plus.s(n=100)).enqueue()
    side_by_side = jobq.group(t.num.s(n=n) for n in (3, 1, 2)).enqueue()
    gathered = jobq.chord(jobq.group(t.num.s(n=n) for n in (3, 1, 2)), t.gather.s()).enqueue()
    nested = jobq.chain(jobq.group(t.num.s(n=1), t.num.s(n=2)), t.plus.s(n=0)).enqueue()
    failing = jobq.chain(t.num.s(n=1), t.boom.s(n=2), t.plus.s(n=3)).enqueue()
    with worker_running(app) as worker:
        assert linear.result(timeout=30) == 111
        assert side_by_side.result(timeout=30) == [3, 1, 2]
        assert gathered.result(timeout=30) == [3, 1, 2]
        assert asyncio.run(nested.wait(timeout=30)) == 3
        with pytest.raises(jobq.TaskCancelled) as raised:
            failing.result(timeout=30)
    assert worker.stats["stale"] == 0
    boom = failing.tasks[1]
    assert raised.value.task_id == failing.tasks[2].id
    assert raised.value.error == because(app.store, boom.id, "failed")
    with pytest.raises(jobq.TaskFailed, match="boom 2"):
        boom.result(timeout=0)
    assert [task.status for task in app.store.workflow_tasks(failing.id)] == [
        Status.DONE, Status.FAILED, Status.CANCELLED,
    ]  # fmt: skip
    assert [task.result for task in app.store.workflow_tasks(linear.id)] == [1, 11, 111]
    # The handle of a workflow enqueued elsewhere, read from its rows.
    again = app.workflow(gathered.id)
    assert (ids_of(again), [task.id for task in again.final]) == (
        ids_of(gathered), [gathered.tasks[-1].id],
    )  # fmt: skip
    assert again.result(timeout=0) == [3, 1, 2]
    assert app.workflow(side_by_side.id).result(timeout=0) == [3, 1, 2]
    with pytest.raises(jobq.WorkflowNotFound):
        app.workflow(10**9)


def test_waiting_for_a_workflow_no_worker_runs_times_out(app: jobq.App, t: SimpleNamespace) -> None:
    handle = jobq.chain(t.num.s(n=1), t.num.s(n=2)).enqueue()
    with pytest.raises(jobq.ResultTimeout):
        handle.result(timeout=0)
    with pytest.raises(jobq.ResultTimeout):
        asyncio.run(handle.wait(timeout=0))
    with pytest.raises(jobq.InvalidOption):
        handle.result(timeout=-1)
    assert statuses(app.store, *ids_of(handle)) == [Status.QUEUED, Status.BLOCKED]


# --- tasks on their own ------------------------------------------------------------------------


@contextmanager
def statements_seen(store: jobq.Store) -> Iterator[list[str]]:
    """The SQL of every statement the Store sends in the block."""
    seen: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        seen.append(statement)

    event.listen(store.engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(store.engine, "before_cursor_execute", note)


def about_workflows(statements: list[str]) -> list[str]:
    return [s for s in statements if re.search(r"jobq_(task_edges|workflows)", s)]


def test_ends_of_plain_tasks_touch_no_workflow_table(
    app: jobq.App, t: SimpleNamespace, backend: str
) -> None:
    store = app.store
    store.enqueue_many("num", [{"n": n} for n in range(5)])
    first = store.capture(2, worker_id="w")
    with statements_seen(store) as together:
        ends = [Completion(task.id, task.attempt, Status.DONE, result=1) for task in first]
        applied, second = store.complete_and_capture(ends, 2, worker_id="w")
        assert (applied, len(second)) == (2, 2)
    if backend == "postgresql":  # the ends and the capture stay one statement
        assert len(together) == 1, together
    with statements_seen(store) as alone:
        ends = [Completion(task.id, task.attempt, Status.DONE) for task in second]
        assert store.set_statuses(ends) == 2
        (last,) = store.capture(1, worker_id="w")
        assert store.set_status(last.id, last.attempt, Status.FAILED, error="boom")
    assert together and alone
    assert about_workflows(together + alone) == []
    assert count_rows(store) == (5, 0, 0)
    assert [r["status"] for r in all_rows(store)] == ["done"] * 4 + ["failed"]

    # The same ends of workflow nodes do settle the nodes after them.
    handle = jobq.chain(t.num.s(n=1), t.num.s(n=2)).enqueue()
    (node,) = capture_only(store, handle.tasks[0].id)
    with statements_seen(store) as settling:
        done = Completion(node.id, node.attempt, Status.DONE, result=1, in_workflow=True)
        assert store.complete_and_capture([done], 2, worker_id="w")[0] == 1
    assert about_workflows(settling) != []
