"""Cancelling running tasks, snoozes and progress, with real `jobq worker` processes on
every database (tests/apps/run_control.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import jobq
from jobq import Status
from tests.acceptance.test_worker_processes import wait_until
from tests.worker_processes import Workers

APP = "tests.apps.run_control:app"


@pytest.fixture
def workers(db_url: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(APP, db_url, tmp_path, ["--concurrency", "8"])
    yield started
    started.kill_all()


def status(store: jobq.Store, task_id: int) -> Status:
    task = store.get(task_id)
    assert task is not None
    return task.status


def stop(workers: Workers) -> None:
    for worker in workers.started:
        worker.process.terminate()
        assert worker.process.wait(timeout=60) == 0, worker.stderr()


def test_a_running_sync_task_that_checks_and_an_async_one_end_cancelled(
    store: jobq.Store, workers: Workers
) -> None:
    sync_id = store.enqueue("steps", {"n": 100_000, "pause": 0.01}, retries=3)
    async_id = store.enqueue("nap", {"seconds": 600}, retries=3)
    workers.start()
    wait_until(lambda: status(store, sync_id) is status(store, async_id) is Status.IN_PROGRESS)
    assert store.cancel(sync_id) and store.cancel(async_id)
    wait_until(lambda: status(store, sync_id) is status(store, async_id) is Status.CANCELLED)
    for task_id in (sync_id, async_id):
        task = store.get(task_id)
        assert task is not None
        assert (task.error, task.retries_left, task.attempt) == ("cancelled on request", 3, 1)
        assert task.cancel_requested_at is not None and task.finished_at is not None
        # Heard of within a second or so (the worker looks every half second).
        assert (task.finished_at - task.cancel_requested_at).total_seconds() < 10
    stop(workers)
    log = workers.started[0].stderr()
    assert f"task {sync_id} attempt 1: cancel requested; stopping it" in log
    assert "2 cancelled" in log


def test_a_run_that_sees_the_request_and_returns_is_recorded_done(
    store: jobq.Store, workers: Workers
) -> None:
    task_id = store.enqueue("notices", {"seconds": 600})
    workers.start()
    wait_until(lambda: status(store, task_id) is Status.IN_PROGRESS)
    assert store.cancel(task_id)
    wait_until(lambda: status(store, task_id) is Status.DONE)
    task = store.get(task_id)
    assert task is not None and task.result == "saw the request" and task.cancel_requested


def test_cancel_racing_the_end_of_the_run_has_exactly_one_winner(
    store: jobq.Store, workers: Workers
) -> None:
    """Thirty runs of 50 ms to 1.5 s, all running, cancelled longest first: the short ones
    end before their worker hears of the request, the long ones after. Each row ends done
    with its result or cancelled without one, after one attempt; a cancel that found its
    task ended said so (False) and wrote nothing."""
    ids = {n: store.enqueue("steps", {"n": n, "pause": 0.05}) for n in range(1, 31)}
    workers.start("--concurrency", "30")
    wait_until(lambda: all(status(store, i) is not Status.QUEUED for i in ids.values()))
    answers = {task_id: store.cancel(task_id) for _, task_id in sorted(ids.items(), reverse=True)}
    ended = (Status.DONE, Status.CANCELLED)
    wait_until(lambda: all(status(store, i) in ended for i in ids.values()))
    outcomes = {Status.DONE: 0, Status.CANCELLED: 0}
    for n, task_id in ids.items():
        task = store.get(task_id)
        assert task is not None and task.attempt == 1
        outcomes[task.status] += 1
        if task.status is Status.DONE:
            assert task.result == n and task.error is None
            assert answers[task_id] == task.cancel_requested  # ended before, or ran on
        else:
            assert answers[task_id] and task.result is None
            assert task.error == "cancelled on request"
    assert outcomes[Status.DONE] >= 1 and outcomes[Status.CANCELLED] >= 1, outcomes


def test_a_cancelled_run_frees_its_limit_slot(store: jobq.Store, workers: Workers) -> None:
    store.set_limit("narrow", concurrency=1)
    first = store.enqueue("hold", {"seconds": 600}, queue="narrow")
    second = store.enqueue("hold", {"seconds": 0.05}, queue="narrow")
    workers.start()
    wait_until(lambda: status(store, first) is Status.IN_PROGRESS)
    assert status(store, second) is Status.QUEUED
    assert store.cancel(first)
    wait_until(lambda: status(store, second) is Status.DONE)
    assert status(store, first) is Status.CANCELLED


def test_a_snooze_spends_no_retry(store: jobq.Store, workers: Workers) -> None:
    task_id = store.enqueue("snoozer", {"times": 3}, retries=1)
    workers.start()
    wait_until(lambda: status(store, task_id) is Status.DONE)
    task = store.get(task_id)
    assert task is not None and (task.result, task.attempt, task.retries_left) == (4, 4, 1)
    stop(workers)
    assert "3 snoozed" in workers.started[0].stderr()


def test_progress_reaches_the_row_while_the_task_runs(store: jobq.Store, workers: Workers) -> None:
    task_id = store.enqueue("steps", {"n": 100_000, "pause": 0.001})
    workers.start()
    seen = []

    def advanced() -> bool:
        task = store.get(task_id)
        assert task is not None
        if task.progress is not None and task.progress not in seen:
            seen.append(task.progress)
        return len(seen) >= 3

    wait_until(advanced)
    assert store.cancel(task_id)
    wait_until(lambda: status(store, task_id) is Status.CANCELLED)
    currents = [p["current"] for p in seen]
    assert currents == sorted(currents) and all(p["total"] == 100_000 for p in seen)
    assert seen[-1]["message"] == f"step {currents[-1]}"
