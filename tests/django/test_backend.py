"""JobqBackend: Django's Tasks contract on jobq's rows, and Django's transactions."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction
from django.tasks import TaskResult, TaskResultStatus, default_task_backend, task, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
from django.tasks.signals import task_enqueued
from shop import tasks
from shop.models import Order

import jobq
from jobq.contrib.django import JobqBackend
from jobq.contrib.django.settings import database_url


def store() -> jobq.Store:
    return default_task_backend.app.store


def test_the_backend_says_what_it_supports() -> None:
    backend = task_backends["default"]
    assert isinstance(backend, JobqBackend)
    assert backend.supports_defer and backend.supports_async_task
    assert backend.supports_get_result and backend.supports_priority


def test_a_task_enqueued_in_a_committed_block_runs_and_reads_back(run_worker) -> None:
    with transaction.atomic():
        order = Order.objects.create(item="teapot")
        result = tasks.mark_paid.enqueue(order.id)
    assert result.status == TaskResultStatus.READY and result.kwargs == {}
    assert result.args == [order.id]
    row = store().get(int(result.id))
    assert row is not None and row.status == "queued" and row.name == "shop.tasks.mark_paid"

    run_worker()

    done = tasks.mark_paid.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 1
    assert Order.objects.get(pk=order.id).paid
    assert done.enqueued_at <= done.started_at <= done.finished_at
    assert done.last_attempted_at == done.started_at and done.attempts == 1
    assert done.errors == [] and done.args == [order.id]
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 1


def test_a_task_enqueued_in_a_rolled_back_block_leaves_nothing() -> None:
    before = store().counts()
    with pytest.raises(RuntimeError), transaction.atomic():
        result = tasks.add.enqueue(1, 2)
        raise RuntimeError("undo")
    assert store().get(int(result.id)) is None
    assert store().counts() == before
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result(result.id)


def test_on_commit_enqueues_after_the_commit_only(run_worker) -> None:
    ids: list[str] = []
    with transaction.atomic():
        transaction.on_commit(lambda: ids.append(tasks.add.enqueue(2, 3).id))
        assert ids == []
    with pytest.raises(RuntimeError), transaction.atomic():
        transaction.on_commit(lambda: ids.append(tasks.add.enqueue(9, 9).id))
        raise RuntimeError("undo")
    assert len(ids) == 1
    run_worker()
    assert tasks.add.get_result(ids[0]).return_value == 5


def test_a_plain_jobq_task_takes_djangos_connection(run_worker) -> None:
    app = jobq.App()
    app.store = jobq.Store(database_url("default"))

    @app.task(queue="plain")
    def plain(n: int) -> int:
        return n

    with pytest.raises(RuntimeError), transaction.atomic():
        undone = plain.enqueue(n=1, _connection=connection)
        raise RuntimeError("undo")
    assert app.store.get(undone) is None
    with transaction.atomic():
        kept = plain.enqueue(n=2, _connection=connection)
    assert app.store.get(kept).status == "queued"
    outside = plain.enqueue(n=3, _connection=connection)  # its own transaction, committed
    assert app.store.get(outside).status == "queued"
    app.store.dispose()


@pytest.mark.parametrize("given", ["raw", "text"])
def test_anything_else_as_connection_is_refused_saying_what_to_pass(given: str) -> None:
    app = jobq.App()
    app.store = jobq.Store(database_url("default"))

    @app.task
    def plain() -> None: ...

    connection.ensure_connection()
    passed = connection.connection if given == "raw" else "default"
    with pytest.raises(jobq.InvalidOption) as refused:
        plain.enqueue(_connection=passed)
    assert "pass a SQLAlchemy Connection" in str(refused.value)
    assert "django.db.connection" in str(refused.value)
    with pytest.raises(jobq.InvalidOption, match="takes a SQLAlchemy Connection only"):
        asyncio.run(plain.enqueue_async(_connection=connection))
    app.store.dispose()


def test_priority_queue_run_after_and_context(run_worker) -> None:
    order = Order.objects.create(item="kettle")
    receipt = tasks.send_receipt.enqueue(order.id)
    row = store().get(int(receipt.id))
    assert (row.queue_id, row.priority) == ("emails", 10)  # Django's priority, as it is
    later = datetime.now(UTC) + timedelta(hours=1)
    deferred = tasks.add.using(run_after=later).enqueue(1, 1)
    assert abs(store().get(int(deferred.id)).run_at - later) < timedelta(seconds=1)
    low = tasks.add.using(priority=-50).enqueue(0, 1)
    high = tasks.add.using(priority=50).enqueue(0, 2)
    me = tasks.whoami.enqueue(label="ctx")

    run_worker("--concurrency", "1")

    assert tasks.send_receipt.get_result(receipt.id).return_value == "receipt for kettle"
    assert tasks.add.get_result(deferred.id).status == TaskResultStatus.READY  # not due
    first, second = tasks.add.get_result(high.id), tasks.add.get_result(low.id)
    assert first.started_at <= second.started_at and first.task.priority == 50
    assert tasks.whoami.get_result(me.id).return_value == {
        "attempt": 1, "id": me.id, "label": "ctx"
    }  # fmt: skip


def test_a_failing_task_is_failed_with_its_exception(run_worker) -> None:
    failed = tasks.fail.enqueue("broken")
    flaky = tasks.flaky.enqueue()
    run_worker()
    result = tasks.fail.get_result(failed.id)
    assert result.status == TaskResultStatus.FAILED and result.is_finished
    (error,) = result.errors
    assert error.exception_class_path == "shop.tasks.Boom"
    assert error.exception_class is tasks.Boom
    assert "Boom: broken" in error.traceback and "in fail\n    raise Boom" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    retried = tasks.flaky.get_result(flaky.id)  # TASK_OPTIONS: one retry, then failed
    assert retried.status == TaskResultStatus.FAILED and retried.attempts == 2


def test_aenqueue_and_aget_result_of_an_async_task(run_worker) -> None:
    # async_to_sync: Django's sync_to_async then runs the enqueue on this thread's connection.
    result = async_to_sync(tasks.double.aenqueue)(21)
    run_worker()
    done = async_to_sync(tasks.double.aget_result)(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 42


def test_results_that_do_not_exist_or_are_of_another_task() -> None:
    for missing in ("999999999", "not-an-id", "-1"):
        with pytest.raises(TaskResultDoesNotExist):
            default_task_backend.get_result(missing)
    other = tasks.add.enqueue(1, 1)
    with pytest.raises(TaskResultMismatch):
        tasks.fail.get_result(other.id)


def test_djangos_checks_of_tasks_and_the_enqueued_signal() -> None:
    with pytest.raises(InvalidTask, match="Queue 'nowhere' is not valid"):
        tasks.add.using(queue_name="nowhere")
    with pytest.raises(InvalidTask, match="priority must be"):
        tasks.add.using(priority=101)
    with pytest.raises(InvalidTask, match="aware"):
        tasks.add.using(run_after=datetime(2030, 1, 1))

    def local() -> None: ...

    with pytest.raises(InvalidTask, match="module level"):
        task(local)
    with pytest.raises(TypeError):
        tasks.add.enqueue(object(), 1)  # not JSON: nothing written
    seen = []

    def enqueued(sender: type, task_result: TaskResult, **_: object) -> None:
        seen.append((sender, task_result.id))

    task_enqueued.connect(enqueued)
    try:
        result = tasks.add.enqueue(4, 4)
    finally:
        task_enqueued.disconnect(enqueued)
    assert seen == [(JobqBackend, result.id)] and result.backend == "default"
