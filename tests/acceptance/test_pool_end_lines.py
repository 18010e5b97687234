"""One end line per run, whatever the pool: real `jobq worker --burst` processes on every
database, `--pool threads` and `--pool processes`, JSON log lines. The app is
tests/apps/process_tasks.py.

A run past its timeout (on threads it returns late; in a child it is killed), a run
cancelled while it runs and a run that calls sys.exit() each have exactly one end line
(logger jobq.task, with a status) saying how they ended, as their rows do; so does a run
whose child was killed with -9 from outside.
Each worker exits by itself (burst) before its log is read: no line can come later.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import jobq
from jobq import Status
from jobq.db.tasks import CANCELLED_ON_REQUEST
from tests.acceptance.test_hostile_tasks import DEADLINE, alive_until, exits_by_itself, get, state
from tests.acceptance.test_process_pool import runs, store  # noqa: F401 (fixture)
from tests.apps import process_tasks
from tests.worker_processes import Workers

pytestmark = pytest.mark.slow


@pytest.fixture
def workers(store: jobq.Store, db_url: str, tmp_path: Path) -> Iterator[Workers]:  # noqa: F811
    started = Workers("tests.apps.process_tasks:app", db_url, tmp_path, ["--log-format", "json"])
    yield started
    started.kill_all()


def end_lines(log: str, task_id: int) -> list[dict[str, Any]]:
    """The end lines of ``task_id``'s runs in a JSON ``log``: jobq.task lines with a status."""
    records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    return [
        r
        for r in records
        if r["logger"] == "jobq.task" and r.get("task_id") == task_id and "status" in r
    ]


def assert_one_end_line(log: str, task_id: int, status: str, error: str) -> None:
    found = [(r["status"], r.get("error")) for r in end_lines(log, task_id)]
    assert found == [(status, error)], f"task {task_id}'s end lines: {end_lines(log, task_id)}"


@pytest.mark.parametrize("pool", ["threads", "processes"])
def test_a_run_stopped_at_its_timeout_or_on_cancel_has_one_end_line(
    store: jobq.Store,  # noqa: F811
    workers: Workers,
    pool: str,
) -> None:
    """A run sleeping past its 2 s timeout, a run cancelled while it runs and a run that
    calls sys.exit(3): one end line each ("failed", timed out; "cancelled"; "failed",
    "SystemExit: 3"), matching their rows; with processes, a run whose child was killed
    with -9 from outside also has one ("worker child died: signal 9 (SIGKILL)")."""
    overslept = process_tasks.oversleeps.enqueue(seconds=3 * process_tasks.SHORT_TIMEOUT)
    cancelled = process_tasks.until_cancelled.enqueue()
    exited = process_tasks.exits.enqueue(code=3)
    doomed = process_tasks.doomed.enqueue() if pool == "processes" else None
    worker = workers.start("--burst", "--concurrency", "4", "--pool", pool)
    alive_until(worker, lambda: len(runs(cancelled)) == 1)
    store.cancel(cancelled)
    if doomed is not None:
        alive_until(worker, lambda: len(runs(doomed)) == 1)
        os.kill(runs(doomed)[0]["pid"], signal.SIGKILL)
    log = exits_by_itself(worker, DEADLINE)

    timed_out = f"timed out after {process_tasks.SHORT_TIMEOUT} s"
    if pool == "processes":
        timed_out += " (killed)"
    task = get(store, overslept)
    assert (task.status, task.error) == (Status.FAILED, timed_out), state(store, overslept)
    assert_one_end_line(log, overslept, "failed", timed_out)
    assert get(store, cancelled).status is Status.CANCELLED, state(store, cancelled)
    assert_one_end_line(log, cancelled, "cancelled", CANCELLED_ON_REQUEST)
    task = get(store, exited)
    assert (task.status, task.error) == (Status.FAILED, "SystemExit: 3"), state(store, exited)
    assert_one_end_line(log, exited, "failed", "SystemExit: 3")
    if doomed is not None:
        died = "worker child died: signal 9 (SIGKILL)"
        task = get(store, doomed)
        assert (task.status, task.error) == (Status.FAILED, died), state(store, doomed)
        assert_one_end_line(log, doomed, "failed", died)
