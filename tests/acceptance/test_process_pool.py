"""`jobq worker --pool processes` against real worker processes, on every database.

The app is tests/apps/process_tasks.py. A sync run past its timeout has its child
killed (SIGTERM, then SIGKILL) and only then ends "timed out after N s (killed)", so its
retry never overlaps it; a child that dies fails its run with the signal that killed it
and the worker goes on; a child that grew past --max-memory-per-child is replaced; a
cancel of a running task kills its child.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import jobq
from jobq import Status
from tests.acceptance.test_hostile_tasks import (
    DEADLINE,
    alive_until,
    exits_by_itself,
    get,
    state,
    stop,
)
from tests.apps import process_tasks
from tests.worker_processes import Workers, app_store

pytestmark = pytest.mark.slow

POOL = ("--pool", "processes")


@pytest.fixture
def store(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[jobq.Store]:
    """The test app's Store on ``db_url``, with an empty runs table beside it."""
    yield from app_store(process_tasks.app, process_tasks.LOG, db_url, monkeypatch)


@pytest.fixture
def workers(store: jobq.Store, db_url: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers("tests.apps.process_tasks:app", db_url, tmp_path)
    yield started
    started.kill_all()


def runs(task_id: int) -> list[dict[str, Any]]:
    """The recorded runs of ``task_id``, in attempt order."""
    stmt = (
        sa.select(process_tasks.RUNS)
        .where(process_tasks.RUNS.c.task_id == task_id)
        .order_by(process_tasks.RUNS.c.attempt)
    )
    with process_tasks.LOG.engine().connect() as conn:
        return [dict(row._mapping) for row in conn.execute(stmt)]


def test_runaway_runs_are_killed_at_their_timeout_and_retried_only_after(
    store: jobq.Store, workers: Workers
) -> None:
    """A pure-Python loop that never returns is stopped by SIGTERM at its timeout (its
    ``finally`` runs); one that ignores SIGTERM is stopped by SIGKILL. Both end "timed out
    after N s (killed)"; the first's retry ran once, after its first child was gone; a
    segfault in a third child fails only its own run; the well-behaved tasks beside them
    all ran; the burst worker exits 0."""
    runaway = process_tasks.runaway.enqueue()
    deaf = process_tasks.ignores_term.enqueue()
    crash = process_tasks.segfault.enqueue()
    fine = [process_tasks.pid.enqueue() for _ in range(20)]
    log = exits_by_itself(workers.start("--burst", "--concurrency", "3", *POOL), DEADLINE)

    task = get(store, runaway)
    assert (task.status, task.attempt, task.result) == (Status.DONE, 2, 2), state(store, runaway)
    first, second = runs(runaway)
    assert first["finished"] is not None, "SIGTERM did not let the first attempt's finally run"
    assert second["started"] >= first["finished"]
    assert second["earlier_alive"] is False, "the retry began while attempt 1's child lived"
    assert second["pid"] != first["pid"]
    timeout = process_tasks.TIMEOUT
    assert f"task {runaway} runaway attempt 1 timed out after {timeout} s; killing" in log

    task = get(store, deaf)
    assert (task.status, task.attempt, task.error) == (
        Status.FAILED, 1, f"timed out after {timeout} s (killed)",
    ), state(store, deaf)  # fmt: skip
    (deaf_run,) = runs(deaf)
    assert deaf_run["finished"] is None  # SIGKILL: nothing after it ran

    task = get(store, crash)
    assert (task.status, task.error) == (
        Status.FAILED, "worker child died: signal 11 (SIGSEGV)",
    ), state(store, crash)  # fmt: skip
    pids = set()
    for task_id in fine:
        task = get(store, task_id)
        assert (task.status, task.attempt) == (Status.DONE, 1), state(store, task_id)
        pids.add(task.result)
    assert os.getpid() not in pids and len(pids) >= 1
    assert "children killed: 2" in log and "children died: 1" in log


def test_a_child_past_max_memory_is_replaced_between_runs(
    store: jobq.Store, workers: Workers
) -> None:
    """With --max-memory-per-child 150 and one slot: the run that grows its child to
    about 250 MB completes in it, and the next run has a new child; runs that stay small
    keep theirs. --max-tasks-per-child 3 replaces a child after its third run."""
    ids = [
        process_tasks.pid.enqueue(),
        process_tasks.grow.enqueue(mb=20),
        process_tasks.pid.enqueue(),
        process_tasks.grow.enqueue(mb=250),
        process_tasks.pid.enqueue(),
        process_tasks.pid.enqueue(),
    ]
    log = exits_by_itself(
        workers.start(
            "--burst", "--concurrency", "1", "--max-memory-per-child", "150",
            "--max-tasks-per-child", "3", *POOL,
        ),
        DEADLINE,
    )  # fmt: skip
    pids = []
    for task_id in ids:
        task = get(store, task_id)
        assert (task.status, task.attempt) == (Status.DONE, 1), state(store, task_id)
        pids.append(task.result)
    # Runs 1-3 share a child (the third is its last: --max-tasks-per-child 3); run 4 grows
    # a new child past 150 MB, so run 5 gets another, which run 6 shares.
    assert pids[0] == pids[1] == pids[2] != pids[3] != pids[4] == pids[5], pids
    assert pids[4] != pids[0]
    assert "(--max-memory-per-child 150)" in log and "(--max-tasks-per-child)" in log


def test_cancel_of_a_running_sync_task_kills_its_child(store: jobq.Store, workers: Workers) -> None:
    """A sync task asleep for ten minutes is cancelled while it runs: its child is killed,
    the run ends cancelled at once (not when the sleep would end), the worker goes on. A
    SIGTERM sent to that child by anyone but its worker (a platform signalling every
    process) is ignored: the run goes on until the cancel. A child killed with -9 from
    outside fails its run "worker child died: signal 9 (SIGKILL)"."""
    napper = process_tasks.nap.enqueue(seconds=600)
    worker = workers.start("--concurrency", "2", *POOL)
    alive_until(worker, lambda: len(runs(napper)) == 1)
    (run,) = runs(napper)
    os.kill(run["pid"], signal.SIGTERM)
    ignored = f"worker child {run['pid']}: SIGTERM from pid {os.getpid()} ignored"
    alive_until(worker, lambda: ignored in worker.stderr())
    assert get(store, napper).status is Status.IN_PROGRESS
    store.cancel(napper)
    alive_until(worker, lambda: get(store, napper).status is Status.CANCELLED)
    with pytest.raises(ProcessLookupError):
        os.kill(run["pid"], 0)
    after = process_tasks.pid.enqueue()
    alive_until(worker, lambda: get(store, after).status is Status.DONE)

    # A child killed with -9 from outside (the OOM killer) fails its run, saying so.
    doomed = process_tasks.doomed.enqueue()
    alive_until(worker, lambda: len(runs(doomed)) == 1)
    os.kill(runs(doomed)[0]["pid"], signal.SIGKILL)
    alive_until(worker, lambda: get(store, doomed).status is Status.FAILED)
    assert get(store, doomed).error == "worker child died: signal 9 (SIGKILL)"
    stop(worker)
    assert get(store, napper).attempt == 1


def test_sigterm_kills_pool_children_still_running_past_the_grace(
    store: jobq.Store, workers: Workers
) -> None:
    """SIGTERM with --grace 1 while a pool child sleeps: the worker exits 0, the run is
    back queued with its retry unspent, and its child is gone before that release."""
    napper = process_tasks.nap.enqueue(seconds=600)
    worker = workers.start("--concurrency", "1", "--grace", "1", *POOL)
    alive_until(worker, lambda: len(runs(napper)) == 1)
    (run,) = runs(napper)
    stop(worker)  # SIGTERM, and an exit 0 within 30 s
    task = get(store, napper)
    assert (task.status, task.attempt, task.retries_left) == (Status.QUEUED, 1, 2)
    with pytest.raises(ProcessLookupError):
        os.kill(run["pid"], 0)
