"""SIGTERM always ends a `jobq worker` within its --grace, even while a sync task's
thread holds the GIL in a pure-Python loop (tests/apps/hostile.py's ``spin``)."""

from __future__ import annotations

import subprocess
import time

import pytest

import jobq
from jobq import Status
from tests.acceptance.test_hostile_tasks import (  # noqa: F401 (fixtures)
    Workers,
    abort,
    alive_until,
    clean_exit,
    excerpt,
    get,
    run_of,
    state,
    store,
    workers,
)
from tests.apps import hostile

pytestmark = pytest.mark.slow

ROUNDS = 10
#: Seconds a worker may take to exit after SIGTERM with --grace 1.
EXIT_WITHIN = 20


def test_sigterm_ends_a_worker_busy_in_a_cpu_bound_task(
    store: jobq.Store,  # noqa: F811
    workers: Workers,  # noqa: F811
) -> None:
    """Ten rounds, a fresh `--concurrency 2 --grace 1` worker each: once the task (a 120 s
    busy loop, retries=2) has started, SIGTERM; the worker exits 0 within 20 s and the
    task is back queued, its retries unspent (each round runs its next attempt)."""
    task_id = hostile.spin.enqueue(seconds=120)
    for round_ in range(1, ROUNDS + 1):
        worker = workers.start("--concurrency", "2", "--grace", "1")
        alive_until(worker, lambda round_=round_: run_of(task_id, round_) is not None)
        signalled = time.monotonic()
        worker.process.terminate()
        try:
            worker.process.wait(timeout=EXIT_WITHIN)
        except subprocess.TimeoutExpired:
            log = abort(worker)
            raise AssertionError(
                f"round {round_} of {ROUNDS}: the worker still ran {EXIT_WITHIN} s after "
                f"SIGTERM (--grace 1); its stacks:\n{excerpt(log, lines=120)}"
            ) from None
        took = time.monotonic() - signalled
        clean_exit(worker)
        task = get(store, task_id)
        assert (task.status, task.attempt, task.retries_left) == (Status.QUEUED, round_, 2), (
            f"round {round_} (exit after {took:.1f} s): {state(store, task_id)}"
        )
