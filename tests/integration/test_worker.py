"""The worker loop in this process: outcomes, retries, timeouts, unknown tasks, registry."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

import jobq
from jobq import Status
from jobq.core.workers import FORGET_AFTER
from jobq.dialects.schema import workers
from jobq.worker import Worker
from tests.apps import mixed


@pytest.fixture
def app(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[jobq.App]:
    monkeypatch.setenv("JOBQ_DATABASE_URL", db_url)
    monkeypatch.setattr(mixed, "_effects_engine", None)
    mixed.app.store = jobq.Store(db_url)
    mixed.create_effects_table()
    with mixed.effects().begin() as conn:
        conn.execute(sa.delete(mixed.EFFECTS))
    yield mixed.app
    mixed.app.store.dispose()
    mixed.effects().dispose()


def burst(app: jobq.App, **options: object) -> Worker:
    worker = Worker(app, burst=True, poll_interval=0.05, **options)  # type: ignore[arg-type]
    worker.run()
    return worker


def test_a_burst_worker_runs_everything_and_exits(app: jobq.App) -> None:
    store = app.store
    ok = mixed.work.enqueue(n=1, key=1)
    fails_once = mixed.work.enqueue(n=2, fail_times=1, key=2)
    fails_always = mixed.work.enqueue(n=3, fail_times=9, key=3)
    retried = mixed.retry_once.enqueue(n=4)
    doubled = mixed.double.enqueue(n=21)
    worker = burst(app, concurrency=4)
    results = {i: store.get(i) for i in (ok, fails_once, fails_always, retried, doubled)}
    assert (results[ok].status, results[ok].result) == (Status.DONE, 2)  # type: ignore[union-attr]
    assert (results[fails_once].status, results[fails_once].attempt) == (Status.DONE, 2)  # type: ignore[union-attr]
    always = results[fails_always]
    assert always is not None
    assert (always.status, always.attempt, always.retries_left) == (Status.FAILED, 3, 0)
    assert "RuntimeError: attempt 3 of 3 fails" in always.error  # type: ignore[operator]
    assert (results[retried].result, results[retried].attempt) == ("second time lucky", 2)  # type: ignore[union-attr]
    assert results[doubled].result == 42  # type: ignore[union-attr]
    assert worker.stats["stale"] == 0 and store.live_workers() == []


def test_a_result_that_is_not_json_fails_its_task_and_nothing_else(app: jobq.App) -> None:
    store = app.store
    bad = [mixed.returns.enqueue(value="set"), mixed.returns.enqueue(value="datetime"),
           mixed.returns_async.enqueue(value="set")]  # fmt: skip
    good = [mixed.returns.enqueue(value="ok"), mixed.returns_async.enqueue(value="ok")]
    worker = burst(app, concurrency=5)
    for task_id in bad:
        task = store.get(task_id)
        assert task is not None and task.status is Status.FAILED
        assert "returned a result that is not JSON" in task.error  # type: ignore[operator]
    assert [store.get(i).result for i in good] == ["ok", "ok"]  # type: ignore[union-attr]
    assert worker.stats["failed"] == 3 and worker.stats["done"] == 2


# Whether asyncio cancels the async run within its 0.5 s depends on the machine's load: a
# run late to stop is counted as timed out too. Alone, never beside other tests.
@pytest.mark.serial
def test_timeouts_fail_sync_and_async_runs(app: jobq.App) -> None:
    sync_id = mixed.too_slow.enqueue(seconds=3)
    async_id = mixed.too_slow_async.enqueue(seconds=3)
    worker = burst(app)
    for task_id in (sync_id, async_id):
        task = app.store.get(task_id)
        assert task is not None and task.status is Status.FAILED
        assert task.error == "timed out after 0.5 s"
    assert worker.stats["timed_out"] == 1  # the sync one; asyncio cancelled the other


def test_a_capture_slower_than_the_wait_for_free_slots_still_fills_them_all(
    app: jobq.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a busy server a capture can take longer than the 10 ms free slots wait for the
    others: the next capture still waits for the slots to come free (it does not leave at
    once with the few that have), and the runs' ends ride in the captures' statements
    rather than in transactions of their own while the worker waits."""
    store = app.store
    for _ in range(80):
        mixed.sleep.enqueue(seconds=0)
    sizes: list[int] = []
    separate: list[int] = []
    capture, set_statuses = store.complete_and_capture, store.set_statuses

    def slow_capture(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.03)  # three times the wait: a round trip to a busy server
        applied, captured = capture(*args, **kwargs)
        sizes.append(len(captured))
        return applied, captured

    def counted_set_statuses(ends: Any, *args: Any, **kwargs: Any) -> Any:
        separate.append(len(ends))
        return set_statuses(ends, *args, **kwargs)

    monkeypatch.setattr(store, "complete_and_capture", slow_capture)
    monkeypatch.setattr(store, "set_statuses", counted_set_statuses)
    worker = burst(app, concurrency=8)
    assert worker.stats["done"] == 80
    taken = [size for size in sizes if size]
    assert sum(taken) == 80 and statistics.median(taken) == 8, sizes
    assert separate == []


# Serial: on PostgreSQL the worker listens on a channel of the whole database, and another
# test process's enqueues (its own schema, the same channel) woke it to look (14 looks in
# the second measured once in the parallel run).
@pytest.mark.serial
def test_free_slots_beside_a_long_run_look_no_more_often_than_the_poll_interval(
    app: jobq.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One slot runs a 2 s task, seven are free and the queue is empty: they look for
    tasks every --poll-interval (0.25 s), not every few ms; a task enqueued meanwhile still
    starts, and a short run's end is written while the long one goes on."""
    store = app.store
    looks: list[float] = []
    capture = store.complete_and_capture

    def counted_capture(*args: Any, **kwargs: Any) -> Any:
        looks.append(time.monotonic())
        return capture(*args, **kwargs)

    monkeypatch.setattr(store, "complete_and_capture", counted_capture)
    long_id = mixed.sleep.enqueue(seconds=2)
    worker = Worker(app, concurrency=8, poll_interval=0.25)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        while store.get(long_id).status is not Status.IN_PROGRESS:  # type: ignore[union-attr]
            time.sleep(0.01)
        began = time.monotonic()
        time.sleep(1.0)
        quiet = [at for at in looks if began <= at < began + 1.0]
        short_id = mixed.double.enqueue(n=4)
        while store.get(short_id).status is not Status.DONE:  # type: ignore[union-attr]
            time.sleep(0.01)
        assert store.get(long_id).status is Status.IN_PROGRESS  # type: ignore[union-attr]
    finally:
        worker.stop()
        thread.join(timeout=10)
    # Every 0.25 s is 4 in the second; one more where a look and the window's edges meet.
    assert len(quiet) <= 5, [round(at - began, 3) for at in quiet]
    assert store.get(short_id).result == 8  # type: ignore[union-attr]
    assert store.get(long_id).status is Status.DONE  # type: ignore[union-attr]


def test_an_unknown_task_name_fails_and_the_worker_carries_on(app: jobq.App) -> None:
    unknown = app.store.enqueue("os.system", {"command": "echo pwned"}, retries=0)
    fine = mixed.double.enqueue(n=1)
    burst(app)
    task = app.store.get(unknown)
    assert task is not None and task.status is Status.FAILED
    assert task.error == "task 'os.system' is not registered in this worker"
    assert app.store.get(fine).result == 2  # type: ignore[union-attr]


def test_side_effects_happen_once_per_task(app: jobq.App) -> None:
    mixed.work.enqueue_many([{"n": i, "key": 1000 + i} for i in range(200)])
    burst(app, concurrency=8)
    with mixed.effects().connect() as conn:
        per_task = conn.execute(
            sa.select(mixed.EFFECTS.c.task, sa.func.count()).group_by(mixed.EFFECTS.c.task)
        ).all()
    assert len(per_task) == 200 and {n for _, n in per_task} == {1}
    assert app.store.counts() == {("default", Status.DONE): 200}


def test_a_short_lease_is_renewed_from_the_moment_the_task_is_captured(app: jobq.App) -> None:
    """An idle worker's next heartbeat is up to 10 s away; a 1 s lease must not wait for it."""
    worker = Worker(app, poll_interval=0.05)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        time.sleep(0.3)  # idle: the first heartbeat has happened
        task_id = app.store.enqueue("sleep", {"seconds": 2.5}, lease=1, retries=3)
        while app.store.get(task_id).locked_by != worker.worker_id:  # type: ignore[union-attr]
            time.sleep(0.01)
        deadline = time.monotonic() + 2.2
        while time.monotonic() < deadline:
            assert app.store.capture(1, worker_id="thief") == [], "the lease lapsed mid-run"
            time.sleep(0.1)
        while app.store.get(task_id).status is not Status.DONE:  # type: ignore[union-attr]
            time.sleep(0.05)
    finally:
        worker.stop()
        thread.join(timeout=10)
    task = app.store.get(task_id)
    assert task is not None and (task.attempt, task.result) == (1, 2.5)


def test_workers_purge_expired_leases_as_part_of_their_upkeep(app: jobq.App) -> None:
    """Expired lease rows go with the worker's rescue pass; live ones and other locks stay."""
    store = app.store
    assert jobq.Lease(store, "expired", 0.05).acquire()
    assert jobq.Lease(store, "live", 60).acquire()
    assert jobq.Mutex(store, "held").acquire()
    time.sleep(0.2)
    burst(app)
    names = {held.name for held in jobq.locks.list_locks(store)}
    assert names == {"live", "held"}


def test_workers_forget_workers_unseen_for_longer_than_forget_after(app: jobq.App) -> None:
    """A dead worker's row (it never unregistered) goes with a worker's rescue pass once
    unseen for FORGET_AFTER; one unseen for less stays, listed as stale."""
    store = app.store
    unseen = {"dead-long-ago": FORGET_AFTER + 60, "dead-lately": FORGET_AFTER - 600}
    for worker_id, seconds in unseen.items():
        store.register_worker(worker_id, host="gone", pid=1, queues=None, concurrency=1)
        with store.engine.begin() as conn:
            conn.execute(
                sa.update(workers)
                .where(workers.c.worker_id == worker_id)
                .values(last_seen=store.dialect.now_plus(-seconds))
            )
    burst(app)
    assert [(w.worker_id, w.alive) for w in store.live_workers()] == [("dead-lately", False)]
