"""A test app for workflows: every run of a node records itself in RUNS, then does its work.

- ``value(x, pause)`` returns ``x`` after ``pause`` seconds (checking for a cancel).
- ``append(item, pause)`` returns its parent's list with ``item`` added (a chain builds a
  list in order), or ``[item]`` for a node with no parent.
- ``total()`` returns the sum of its parents' results (a chord's callback), and
  ``collect()`` the list of them, in its ``after=`` order (a diamond's join).
- ``flaky(x)`` fails its first attempt and returns ``x`` at the second.
- ``fail(x)`` always raises: with ``retries=1`` it fails twice, the second time for good.
- ``slow(seconds)`` runs until ``seconds`` pass or its cancel is requested
  (``jobq.check_cancelled()`` every 10 ms), so that it is stopped mid-run.
- ``gated(path)`` runs until the file ``path`` exists (the test opens the gate), so that
  it ends done at a moment the test chooses.
- ``retrying()`` asks for a retry in 20 ms at every attempt (100,000 retries), unrecorded.

A run records (task id, attempt, name, arguments, pid, start) in its own committed
transaction before it does anything else, so a test counts runs per capture: one row per
(task id, attempt), and a run killed mid-way leaves its row. Every task has a 2 s lease
and no backoff, so that the runs of a killed worker come back within seconds. Its
database URL comes from $JOBQ_DATABASE_URL, as a deployed worker's would.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import sqlalchemy as sa

import jobq
from jobq.core.retry import FixedBackoff
from tests.apps.run_log import RunLog

app = jobq.App()

#: Leases short enough that a killed worker's runs are captured again within seconds.
LEASE = 2
NOW = FixedBackoff(0)

RUNS = sa.Table(
    "test_workflow_runs",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("task_id", sa.BigInteger, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("name", sa.String(100), nullable=False),
    sa.Column("args", sa.Text, nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("started", sa.Double(), nullable=False),
)

LOG = RunLog(RUNS)
runs_engine = LOG.engine


def _record() -> None:
    """Record this run (its own transaction, committed before the task's work)."""
    task = jobq.current_task()
    assert task is not None
    with runs_engine().begin() as conn:
        conn.execute(
            sa.insert(RUNS).values(
                task_id=task.id, attempt=task.attempt, name=task.name,
                args=json.dumps(task.args, sort_keys=True), pid=os.getpid(), started=time.time(),
            )
        )  # fmt: skip


def _pause(seconds: float) -> None:
    """Sleep ``seconds``, stopping at once (jobq.Cancelled) if the run's cancel is asked."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        jobq.check_cancelled()
        time.sleep(min(0.01, max(deadline - time.monotonic(), 0)))
    jobq.check_cancelled()


@app.task(retries=3, lease=LEASE, backoff=NOW)
def value(x: int, pause: float = 0.0) -> int:
    _record()
    _pause(pause)
    return x


@app.task(retries=3, lease=LEASE, backoff=NOW)
def append(item: str, pause: float = 0.0) -> list[str]:
    _record()
    _pause(pause)
    parents = jobq.parent_results()
    before: list[str] = parents[0] if parents else []
    return [*before, item]


@app.task(retries=3, lease=LEASE, backoff=NOW)
def total() -> int:
    _record()
    return sum(jobq.parent_results())


@app.task(retries=3, lease=LEASE, backoff=NOW)
def collect() -> list[Any]:
    _record()
    return jobq.parent_results()


@app.task(retries=3, lease=LEASE, backoff=NOW)
def flaky(x: int) -> int:
    _record()
    task = jobq.current_task()
    assert task is not None
    if task.attempt == 1:
        raise RuntimeError(f"flaky({x}) fails its first attempt")
    return x


@app.task(retries=1, lease=LEASE, backoff=NOW)
def fail(x: int) -> None:
    _record()
    raise RuntimeError(f"fail({x}) fails every time")


@app.task(retries=3, lease=LEASE, backoff=NOW)
def slow(seconds: float) -> float:
    _record()
    _pause(seconds)
    return seconds


@app.task(retries=100_000, lease=LEASE, backoff=NOW)
def retrying() -> None:
    """Asks to run again in 20 ms at every attempt, for as long as it has retries (its
    runs are not recorded: it runs hundreds of times a second)."""
    raise jobq.Retry(delay=0.02)


@app.task(retries=3, lease=LEASE, backoff=NOW)
def gated(path: str) -> str:
    _record()
    while not os.path.exists(path):
        jobq.check_cancelled()
        time.sleep(0.01)
    return path
