"""A `jobq worker --burst` runs every retry that falls due within --burst-wait before it
exits, on every database.

Each round enqueues a task that always fails (tests/apps/burst.py's ``always_fails``:
retries=2 and the default backoff, so three attempts, 0.5-1 s and 1-2 s apart) and runs
a fresh burst worker until it exits by itself; every attempt must have run. The worker
captures when its own retry falls due and looks for what is due later right after, so a
look that misses a task falling due at that moment shows within a few rounds (before the
look came before the capture, see jobq/worker/pacing.py, it did in 5 of 20 rounds on SQLite,
fewer on PostgreSQL and MySQL).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import jobq
from jobq import Status
from tests.acceptance.test_hostile_tasks import excerpt, exits_by_itself
from tests.apps import burst
from tests.worker_processes import Workers, app_store

pytestmark = pytest.mark.slow

ROUNDS = 20
#: Rounds run side by side, each with a worker and a queue of its own: the workers mostly
#: wait for backoffs, so ten at once (two batches) take little longer than four did (five
#: batches, 23 s a backend).
AT_ONCE = 10
ATTEMPTS = 3
#: Seconds a burst worker gets to run a round's attempts and exit (a busy 2-core machine).
DEADLINE = 60


@pytest.fixture
def store(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[jobq.Store]:
    yield from app_store(burst.app, None, db_url, monkeypatch)


@pytest.fixture
def workers(store: jobq.Store, db_url: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers("tests.apps.burst:app", db_url, tmp_path)
    yield started
    started.kill_all()


def attempts_run(run_file: Path) -> Counter[int]:
    """How many runs of each task the run file records."""
    if not run_file.exists():
        return Counter()
    return Counter(int(line.split()[0]) for line in run_file.read_text().splitlines())


def test_a_burst_worker_runs_every_retry_due_within_burst_wait(
    store: jobq.Store, workers: Workers, tmp_path: Path
) -> None:
    """Twenty rounds, a fresh burst worker each: it exits 0 by itself once all three
    attempts of the round's task have run, the task failed for good. The rounds run
    AT_ONCE at a time, each on a queue of its own (the workers mostly wait for the
    backoffs, and a round's race is its own worker's)."""
    for first in range(1, ROUNDS + 1, AT_ONCE):
        batch = []
        for round_ in range(first, min(first + AT_ONCE, ROUNDS + 1)):
            run_file = tmp_path / f"runs-{round_}"
            task_id = burst.always_fails.enqueue(_queue=f"round-{round_}")
            worker = workers.start(
                "--burst", "--queues", f"round-{round_}", env={"JOBQ_TEST_RUN_FILE": str(run_file)}
            )
            batch.append((round_, run_file, task_id, worker))
        for round_, run_file, task_id, worker in batch:
            log = exits_by_itself(worker, DEADLINE)
            row = store.get(task_id)
            assert row is not None
            end = (row.status, row.attempt, row.retries_left)
            assert attempts_run(run_file) == {task_id: ATTEMPTS}, (
                f"round {round_} of {ROUNDS}: {attempts_run(run_file)[task_id]} run(s), the "
                f"row {end}; the worker exited before a retry due within --burst-wait:\n"
                f"{excerpt(log, lines=40)}"
            )
            assert end == (Status.FAILED, ATTEMPTS, 0), f"round {round_}"
            assert "burst over: nothing left to run" in log, excerpt(log)
