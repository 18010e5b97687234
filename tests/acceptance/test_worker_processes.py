"""`jobq worker` as deployed: real processes, signals, kill -9, several workers at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

import jobq
from jobq import Status
from tests.apps import mixed

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture
def store(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[jobq.Store]:
    monkeypatch.setenv("JOBQ_DATABASE_URL", db_url)
    monkeypatch.setattr(mixed, "_effects_engine", None)
    mixed.app.store = store = jobq.Store(db_url)
    mixed.create_effects_table()
    with mixed.effects().begin() as conn:
        conn.execute(sa.delete(mixed.EFFECTS))
    yield store
    store.dispose()
    mixed.effects().dispose()


def worker(db_url: str, *options: str) -> subprocess.Popen[str]:
    """Start `jobq worker` on the mixed test app."""
    # PYTHONFAULTHANDLER: SIGABRT (see stop_workers) dumps every thread's stack to stderr.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JOBQ_DATABASE_URL": db_url}
    env["PYTHONFAULTHANDLER"] = "1"
    return subprocess.Popen(
        [sys.executable, "-m", "jobq.cli", "worker", "--app", "tests.apps.mixed:app",
         "--poll-interval", "0.05", *options],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def stop_workers(
    processes: list[subprocess.Popen[str]],
    store: jobq.Store | None = None,
    timeout: float = 30,
) -> list[tuple[str, str]]:
    """SIGTERM every worker and collect (stdout, stderr); a worker still running after
    ``timeout`` seconds is aborted, and the test fails with every thread's stack.

    Given the workers' ``store``, it first waits until each running worker has
    registered: a SIGTERM is only graceful once its handler is installed.
    """
    if store is not None:
        deadline = time.monotonic() + 60
        while len(store.live_workers()) < sum(p.poll() is None for p in processes):
            if time.monotonic() > deadline:
                break  # the stop below reports whoever hangs
            time.sleep(0.05)
    for process in processes:
        process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    ended, stuck = [], []
    for process in processes:
        try:
            ended.append(process.communicate(timeout=max(deadline - time.monotonic(), 0.1)))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)
            out, err = process.communicate(timeout=30)
            ended.append((out, err))
            stuck.append(err)
    assert not stuck, "a worker did not stop after SIGTERM:\n" + "\n---\n".join(stuck)
    return ended


def wait_until(condition: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def effects_per_task() -> dict[int, int]:
    with mixed.effects().connect() as conn:
        rows = conn.execute(
            sa.select(mixed.EFFECTS.c.task, sa.func.count()).group_by(mixed.EFFECTS.c.task)
        ).all()
    return dict(rows)  # type: ignore[arg-type]


def test_a_burst_worker_drains_1000_mixed_tasks(store: jobq.Store, db_url: str) -> None:
    # Every 5th task fails once, every 7th always fails (retries=2, so 3 attempts).
    kwargs = [
        {"n": i, "key": i, "fail_times": 9 if i % 7 == 0 else 1 if i % 5 == 0 else 0}
        for i in range(1000)
    ]
    ids = mixed.work.enqueue_many(kwargs)
    done = worker(db_url, "--burst", "--concurrency", "8").communicate(timeout=300)
    assert "Traceback" not in done[1], done[1]
    for task_id, args in zip(ids, kwargs, strict=True):
        task = store.get(task_id)
        assert task is not None
        if args["fail_times"] == 9:
            assert (task.status, task.attempt, task.retries_left) == (Status.FAILED, 3, 0)
        elif args["fail_times"] == 1:
            assert (task.status, task.attempt, task.retries_left) == (Status.DONE, 2, 1)
        else:
            assert (task.status, task.attempt, task.retries_left) == (Status.DONE, 1, 2)
            assert task.result == args["n"] * 2
    assert store.live_workers() == []


def test_sigterm_releases_running_tasks_without_spending_a_retry(
    store: jobq.Store, db_url: str
) -> None:
    ids = mixed.sleep.enqueue_many([{"seconds": 30}] * 3)
    process = worker(db_url, "--concurrency", "3", "--grace", "1")
    wait_until(lambda: store.counts().get(("default", Status.IN_PROGRESS)) == 3)
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    _out, err = process.communicate(timeout=20)
    assert process.returncode == 0, err
    assert time.monotonic() - started < 10
    for task_id in ids:
        task = store.get(task_id)
        assert task is not None
        assert (task.status, task.retries_left, task.attempt) == (Status.QUEUED, 0, 1)
    assert store.live_workers() == []


def test_kill_9_mid_task_runs_it_again_after_the_lease(store: jobq.Store, db_url: str) -> None:
    # A 1 s lease: the live worker keeps renewing it; once killed, it lapses within 1 s.
    task_id = store.enqueue("sleep", {"seconds": 1.5}, lease=1, retries=2)
    first = worker(db_url, "--concurrency", "1")
    wait_until(lambda: store.get(task_id).status is Status.IN_PROGRESS)  # type: ignore[union-attr]
    time.sleep(0.5)  # mid-run, with at least one lease renewal behind it
    first.kill()
    first.wait(timeout=10)
    second = worker(db_url, "--concurrency", "1")
    try:
        wait_until(lambda: store.get(task_id).status is Status.DONE, timeout=60)  # type: ignore[union-attr]
    finally:
        second.send_signal(signal.SIGTERM)
        second.communicate(timeout=30)
    task = store.get(task_id)
    assert task is not None
    # Run again once, by the second worker, after the first one's lease expired.
    assert (task.result, task.attempt, task.retries_left) == (1.5, 2, 1)
    assert task.locked_by is None and task.finished_at is not None


def test_four_workers_run_each_of_5000_side_effects_once(store: jobq.Store, db_url: str) -> None:
    mixed.work.enqueue_many([{"n": i, "key": i} for i in range(5000)])
    processes = [worker(db_url, "--burst", "--concurrency", "8") for _ in range(4)]
    for process in processes:
        _out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
    per_task = effects_per_task()
    assert len(per_task) == 5000 and set(per_task.values()) == {1}
    assert store.counts() == {("default", Status.DONE): 5000}
    with mixed.effects().connect() as conn:
        pids = conn.execute(sa.select(sa.func.count(sa.distinct(mixed.EFFECTS.c.pid)))).scalar()
    assert pids == 4, "every worker took part"
