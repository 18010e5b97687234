"""Cron schedules with real `jobq worker` processes: each tick runs once, crashes included.

The app is tests/apps/cron.py; $JOBQ_TEST_CRON picks which schedules it defines, so a
test can redefine them between worker starts as a deployment would.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import jobq
from jobq import Status
from tests.acceptance.test_worker_processes import wait_until
from tests.apps import cron as cron_app

ROOT = Path(__file__).resolve().parents[2]


def store_with_empty_log(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[jobq.Store]:
    """A Store on ``db_url``, the cron test app's (empty) runs table beside it; a fixture's
    body (yield from it)."""
    monkeypatch.setenv("JOBQ_DATABASE_URL", db_url)
    cron_app.LOG.empty()
    store = jobq.Store(db_url)
    yield store
    store.dispose()
    cron_app.LOG.dispose()


@pytest.fixture
def store(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[jobq.Store]:
    """A Store on ``db_url``, with an empty runs table beside it."""
    yield from store_with_empty_log(db_url, monkeypatch)


def worker(db_url: str, variant: str = "ticks", *options: str, hang: bool = False) -> Any:
    """Start `jobq worker` on the cron test app with schedules ``variant``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JOBQ_DATABASE_URL": db_url}
    env["JOBQ_TEST_CRON"] = variant
    env["PYTHONFAULTHANDLER"] = "1"
    env.pop("JOBQ_TEST_CRON_HANG", None)
    if hang:
        env["JOBQ_TEST_CRON_HANG"] = "1"
    return subprocess.Popen(
        [sys.executable, "-m", "jobq.cli", "worker", "--app", "tests.apps.cron:app",
         "--poll-interval", "0.05", "--log-level", "warning", *options],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def stop(*workers: Any) -> list[str]:
    """SIGTERM the workers and return their stderr, asserting each exited cleanly."""
    for process in workers:
        process.send_signal(signal.SIGTERM)
    errors = []
    for process in workers:
        try:
            _, stderr = process.communicate(timeout=45)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            _, stderr = process.communicate(timeout=30)
            raise AssertionError(f"worker still running 45 s after SIGTERM:\n{stderr}") from None
        assert process.returncode == 0, stderr
        assert "Traceback" not in stderr, stderr
        errors.append(stderr)
    return errors


def burst(db_url: str, variant: str) -> None:
    """Run a --burst worker with schedules ``variant``: it stores them, then exits idle."""
    _, stderr = worker(db_url, variant, "--burst").communicate(timeout=60)
    assert "Traceback" not in stderr, stderr


def runs() -> list[dict[str, Any]]:
    """Every recorded run of ``tick``, in start order, ticks as aware UTC datetimes."""
    with cron_app.runs_engine().connect() as conn:
        rows = conn.execute(sa.select(cron_app.RUNS).order_by(cron_app.RUNS.c.started)).all()
    found = [dict(row._mapping) for row in rows]
    for run in found:
        run["tick"] = jobq.db.tasks.as_utc(run["tick"])
    return found


def schedule(store: jobq.Store, name: str) -> jobq.ScheduleState | None:
    return next((s for s in store.schedules() if s.name == name), None)


@pytest.mark.slow
def test_three_workers_run_a_per_second_schedule_once_per_tick(
    store: jobq.Store, db_url: str
) -> None:
    """Three workers over 6 s: 5 to 7 runs, each for its own tick, one second apart."""
    workers = [worker(db_url) for _ in range(3)]
    try:
        wait_until(lambda: schedule(store, "tick") is not None, timeout=60)
        time.sleep(6)
    finally:
        stop(*workers)
    recorded = runs()
    assert 5 <= len(recorded) <= 7, recorded
    per_tick = Counter(run["tick"] for run in recorded)
    assert max(per_tick.values()) == 1, per_tick
    ticks = sorted(per_tick)
    # Consecutive runs are a whole number of seconds apart (usually one): no tick between
    # two runs was run twice or half-run.
    for before, after in itertools.pairwise(ticks):
        assert (after - before) % timedelta(seconds=1) == timedelta(0)
        assert after > before
    for run in recorded:
        assert run["finished"] is not None, run
        # A run starts once its tick has come (the database's clock and this host's are one).
        assert run["started"] >= run["tick"].timestamp() - 0.01, run
    state = schedule(store, "tick")
    assert state is not None and state.last_status == "done"
    task = store.get(state.task_id)
    assert task is not None and task.recurring
    assert task.attempt == len(recorded)  # one capture per run, nothing else captured it


@pytest.mark.slow
def test_a_worker_killed_mid_run_does_not_stop_the_schedule(store: jobq.Store, db_url: str) -> None:
    """kill -9 during a run: once its lease (2 s) expires, a later tick runs elsewhere.

    The killed run's tick is not run again (the task has no retries): the row moves on to
    the tick after the rescue, as a crashed attempt that spent the tick. A recurring run
    is rescued, not captured again, and the killed worker did the upkeep: with
    --rescue-interval 1 its upkeep lease lapses after 4 s, not 20.
    """
    hanging = worker(db_url, "ticks", "--rescue-interval", "1", hang=True)
    try:
        wait_until(lambda: len(runs()) == 1, timeout=60)
        killed = runs()[0]
        hanging.send_signal(signal.SIGKILL)
        hanging.communicate(timeout=30)
    finally:
        if hanging.poll() is None:
            hanging.kill()
    healthy = worker(db_url, "ticks", "--rescue-interval", "1")
    try:
        wait_until(lambda: any(r["finished"] is not None for r in runs()), timeout=30)
    finally:
        stop(healthy)
    recorded = runs()
    later = [run for run in recorded if run["finished"] is not None]
    assert later and all(run["tick"] > killed["tick"] for run in later), recorded
    # The next run waited for the killed run's lease to expire (2 s), not less.
    assert later[0]["started"] >= killed["started"] + 2.0, recorded
    assert Counter(run["tick"] for run in recorded).most_common(1)[0][1] == 1, recorded
    state = schedule(store, "tick")
    assert state is not None and state.last_status == "done", state
    task = store.get(state.task_id)
    assert task is not None and task.status in (Status.DONE, Status.IN_PROGRESS)
    assert task.recurring


@pytest.mark.slow
def test_restarting_workers_with_a_redefined_or_removed_schedule(
    store: jobq.Store, db_url: str
) -> None:
    """A worker start stores the app's schedules: a new definition updates the row (and
    reschedules it), and an app without it leaves the row in place, disabled."""
    burst(db_url, "v1")
    first = schedule(store, "report")
    assert first is not None
    assert (first.cron, first.timezone, first.enabled, first.defined) == (
        "0 * * * *", "UTC", True, True,
    )  # fmt: skip
    assert first.next_run.minute == 0 and first.next_run.second == 0
    row = store.get(first.task_id)
    assert row is not None and row.args == {"kind": "hourly"} and row.status is Status.DONE

    burst(db_url, "v2")
    second = schedule(store, "report")
    assert second is not None and second.task_id == first.task_id
    assert (second.cron, second.timezone, second.defined) == ("30 * * * *", "Europe/Paris", True)
    # Half past the hour in Paris is half past the hour in UTC too.
    assert second.next_run.minute == 30 and second.next_run.second == 0
    row = store.get(first.task_id)
    assert row is not None and row.args == {"kind": "half past"} and row.status is Status.DONE

    burst(db_url, "none")
    third = schedule(store, "report")
    assert third is not None and third.task_id == first.task_id
    assert (third.enabled, third.defined) == (True, False)
    row = store.get(first.task_id)
    assert row is not None and row.status is Status.CANCELLED and row.recurring
    assert len(store.schedules()) == 1

    # Defined again, it runs again from its next tick.
    burst(db_url, "v1")
    fourth = schedule(store, "report")
    assert fourth is not None and fourth.defined and fourth.cron == "0 * * * *"
    row = store.get(first.task_id)
    assert row is not None and row.status is Status.DONE
    assert row.run_at > first.next_run - timedelta(hours=1)
    assert row.run_at.astimezone(UTC).minute == 0
