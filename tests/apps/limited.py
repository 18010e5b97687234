"""A test app for per-queue limits: tasks that record when they ran, in RUNS.

- ``work`` (queue ``limited``) and ``short_lease`` (queue ``limited``, lease 2 s) sleep
  ``seconds``; with $JOBQ_TEST_LIMITED_HANG set, they hang instead (to be killed).
- ``free`` (queue ``free``) sleeps ``seconds``: a queue that no limit holds back.

Each run inserts a row when it starts (wall clock, and its capture time by the database's
clock) and sets ``finished`` when it ends. Its database URL comes from $JOBQ_DATABASE_URL,
as a deployed worker's would.
"""

from __future__ import annotations

import os
import time

import sqlalchemy as sa

import jobq
from jobq.dialects.types import Moment
from tests.apps.run_log import RunLog

app = jobq.App()

RUNS = sa.Table(
    "test_limited_runs",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("task_id", sa.BigInteger, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("queue", sa.String(100), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    # The row's started_at: the database's clock when the run was captured.
    sa.Column("captured", Moment, nullable=False),
    # time.time() when the task's code began and ended.
    sa.Column("started", sa.Double(), nullable=False),
    sa.Column("finished", sa.Double(), nullable=True),
)

LOG = RunLog(RUNS)
runs_engine = LOG.engine


def _run(seconds: float) -> None:
    """Record this run's start, sleep (or hang), record its end."""
    started = time.time()
    task = jobq.current_task()
    assert task is not None and task.started_at is not None
    with runs_engine().begin() as conn:
        run_id = conn.execute(
            sa.insert(RUNS).values(
                task_id=task.id, attempt=task.attempt, queue=task.queue_id, pid=os.getpid(),
                captured=task.started_at, started=started,
            )
        ).inserted_primary_key[0]  # fmt: skip
    if os.environ.get("JOBQ_TEST_LIMITED_HANG"):
        time.sleep(3600)
    time.sleep(seconds)
    finished = time.time()
    with runs_engine().begin() as conn:
        conn.execute(sa.update(RUNS).where(RUNS.c.id == run_id).values(finished=finished))


@app.task(queue="limited", retries=3)
def work(seconds: float) -> None:
    _run(seconds)


@app.task(queue="limited", retries=3, lease=2)
def short_lease(seconds: float) -> None:
    _run(seconds)


@app.task(queue="free", retries=0)
def free(seconds: float) -> None:
    _run(seconds)
