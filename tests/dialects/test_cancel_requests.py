"""Cancel requests of running tasks, snoozes and progress, on every database.

A cancel of a running task is a request (cancel_requested_at); the run's fenced end then
decides: an end that would make the task wait again (a failure with retries left, a
snooze, a release) ends it cancelled instead, while done and terminal failures are
recorded as they happened. Every end path is checked: set_status, set_statuses, and
complete_and_capture (the worker's).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import jobq
from jobq import Status
from jobq.db.tasks import Completion
from jobq.lifecycle.in_task import PROGRESS
from jobq.lifecycle.run_control import RunControl
from tests import shared_database
from tests.helpers import all_rows, expire_lease

#: One migrated database per backend for the module, emptied before each test.
backend, shared_url, db_url = shared_database.FIXTURES

End = Callable[[jobq.Store, Completion], int]


def by_set_status(store: jobq.Store, end: Completion) -> int:
    applied = store.set_status(
        end.id, end.attempt, end.status, result=end.result, error=end.error,
        retry_delay=end.retry_delay,
    )  # fmt: skip
    return int(applied)


def by_set_statuses(store: jobq.Store, end: Completion) -> int:
    return store.set_statuses([end])


def by_complete_and_capture(store: jobq.Store, end: Completion) -> int:
    applied, _ = store.complete_and_capture([end], 0, worker_id="w")
    return applied


END_PATHS = pytest.mark.parametrize(
    "record", [by_set_status, by_set_statuses, by_complete_and_capture]
)


def running_with_request(store: jobq.Store, retries: int = 3, **options: object) -> jobq.Task:
    task_id = store.enqueue("t", {}, retries=retries, **options)  # type: ignore[arg-type]
    (task,) = store.capture(1, worker_id="w")
    assert task.id == task_id
    assert store.cancel(task_id)
    return task


@END_PATHS
@pytest.mark.parametrize(
    "end",
    [
        Completion(0, 0, Status.FAILED, error="boom", retry_delay=0),
        Completion(0, 0, Status.QUEUED, retry_delay=5),  # a snooze, or a release
    ],
    ids=["failed-with-retries", "snoozed"],
)
def test_an_end_that_would_wait_again_ends_cancelled_when_a_cancel_was_asked(
    store: jobq.Store, record: End, end: Completion
) -> None:
    task = running_with_request(store)
    fenced = Completion(
        task.id, task.attempt, end.status, error=end.error, retry_delay=end.retry_delay
    )
    assert record(store, fenced) == 1
    row = store.get(task.id)
    assert row is not None
    assert (row.status, row.error, row.retries_left) == (
        Status.CANCELLED,
        "cancelled on request",
        3,
    )
    assert row.finished_at is not None and row.locked_by is None and row.locked_until is None
    assert store.capture(1, worker_id="w") == []


@END_PATHS
def test_a_run_that_finishes_despite_the_request_is_recorded_as_it_finished(
    store: jobq.Store, record: End
) -> None:
    done = running_with_request(store)
    assert record(store, Completion(done.id, done.attempt, Status.DONE, result={"n": 1})) == 1
    row = store.get(done.id)
    assert row is not None and (row.status, row.result) == (Status.DONE, {"n": 1})
    last = running_with_request(store, retries=0)
    assert record(store, Completion(last.id, last.attempt, Status.FAILED, error="boom")) == 1
    row = store.get(last.id)
    assert row is not None and (row.status, row.error) == (Status.FAILED, "boom")


@END_PATHS
def test_without_a_request_a_failure_with_retries_waits_for_its_retry(
    store: jobq.Store, record: End
) -> None:
    store.enqueue("t", {}, retries=3)
    (task,) = store.capture(1, worker_id="w")
    end = Completion(task.id, task.attempt, Status.FAILED, error="boom", retry_delay=0)
    assert record(store, end) == 1
    row = store.get(task.id)
    assert row is not None and (row.status, row.finished_at) == (Status.FAILED, None)


def test_a_cancelled_run_frees_its_lock_key(store: jobq.Store) -> None:
    first = running_with_request(store, lock_key="account-7")
    second = store.enqueue("t", {}, lock_key="account-7")
    assert store.capture(1, worker_id="w") == []  # the key is held
    end = Completion(first.id, first.attempt, Status.FAILED, error="boom", retry_delay=0)
    assert store.set_statuses([end]) == 1
    assert [task.id for task in store.capture(1, worker_id="w")] == [second]


def test_cancel_writes_nothing_for_an_ended_task_or_an_unknown_id(
    store: jobq.Store,
) -> None:
    ended = store.enqueue("t", {})
    assert store.cancel(ended)
    before = all_rows(store)
    assert not store.cancel(ended)
    with pytest.raises(jobq.TaskNotFound):
        store.cancel(10**9)
    with pytest.raises(jobq.InvalidOption, match="id"):
        store.cancel("7")  # type: ignore[arg-type]
    assert all_rows(store) == before


def test_a_repeated_request_keeps_the_first_time(store: jobq.Store) -> None:
    task = running_with_request(store)
    first = store.get(task.id)
    assert store.cancel(task.id)
    again = store.get(task.id)
    assert first is not None and again is not None
    assert again.cancel_requested_at == first.cancel_requested_at is not None


def test_a_snooze_spends_no_retry_and_runs_again_later(store: jobq.Store) -> None:
    store.enqueue("t", {}, retries=2)
    (task,) = store.capture(1, worker_id="w")
    assert store.set_statuses([Completion(task.id, task.attempt, Status.QUEUED, retry_delay=0)])
    (again,) = store.capture(1, worker_id="w")
    assert (again.id, again.attempt, again.retries_left) == (task.id, 2, 2)
    end = Completion(again.id, again.attempt, Status.QUEUED, retry_delay=3600)
    assert store.set_statuses([end]) == 1
    assert store.capture(1, worker_id="w") == []  # not due for an hour
    row = store.get(task.id)
    assert row is not None and (row.status, row.retries_left, row.error) == (Status.QUEUED, 2, None)


def test_retry_clears_the_request_and_the_progress(store: jobq.Store) -> None:
    task = running_with_request(store)
    PROGRESS.take()
    PROGRESS.put(task.fence, {"current": 3, "total": 9, "message": None})
    RunControl(store).tick(0.0, [])
    end = Completion(task.id, task.attempt, Status.FAILED, error="boom", retry_delay=0)
    assert store.set_statuses([end]) == 1
    row = store.get(task.id)
    assert row is not None and row.status is Status.CANCELLED
    assert row.progress == {"current": 3, "total": 9, "message": None}
    assert store.retry(task.id)
    row = store.get(task.id)
    assert row is not None and row.status is Status.QUEUED
    assert (row.cancel_requested_at, row.progress) == (None, None)


def test_run_control_hears_requests_only_for_the_runs_asked(store: jobq.Store) -> None:
    for _ in range(3):
        store.enqueue("t", {})
    runs = store.capture(3, worker_id="w")
    assert store.cancel(runs[1].id)
    control = RunControl(store)
    fences = [task.fence for task in runs]
    assert control.tick(0.0, fences) == {runs[1].fence}
    # Another attempt of the same task is not the run asked about.
    stale = (runs[1].id, runs[1].attempt + 1)
    assert control.tick(10.0, [stale]) == set()


def test_progress_is_fenced_by_attempt_and_keeps_the_newest_report(store: jobq.Store) -> None:
    store.enqueue("t", {})
    (task,) = store.capture(1, worker_id="w")
    PROGRESS.take()
    PROGRESS.put(task.fence, {"current": 1, "total": None, "message": "a"})
    PROGRESS.put(task.fence, {"current": 2, "total": None, "message": "b\\x00"})
    PROGRESS.put((task.id, task.attempt + 1), {"current": 99, "total": None, "message": None})
    RunControl(store).tick(0.0, [])
    row = store.get(task.id)
    assert row is not None and row.progress == {"current": 2, "total": None, "message": "b\\x00"}
    assert not PROGRESS


def test_a_rescued_run_whose_cancel_was_asked_for_ends_cancelled(store: jobq.Store) -> None:
    task = running_with_request(store)
    other = store.enqueue("t", {}, retries=3)
    (plain,) = store.capture(1, worker_id="w")
    assert plain.id == other
    expire_lease(store, task.id)
    expire_lease(store, other)
    assert store.rescue() == 2
    row = store.get(task.id)
    assert row is not None
    assert (row.status, row.error, row.retries_left) == (
        Status.CANCELLED,
        "cancelled on request",
        3,
    )
    assert row.finished_at is not None
    row = store.get(other)
    assert row is not None and (row.status, row.error, row.finished_at) == (
        Status.FAILED, "lease expired", None,
    )  # fmt: skip


def test_a_lost_run_whose_cancel_was_asked_is_not_run_again(store: jobq.Store) -> None:
    """Its worker died after the request: no capture takes it once its lease expires
    (it would run the code again); rescue ends it cancelled."""
    task = running_with_request(store)
    expire_lease(store, task.id)
    assert store.capture(10, worker_id="other") == []
    assert store.rescue() == 1
    ended = store.get(task.id)
    assert ended is not None
    assert (ended.status, ended.attempt, ended.error) == (
        Status.CANCELLED,
        1,
        "cancelled on request",
    )
