"""A test app for purging a queue while workers run it: ``nap`` records that its run began
(in RUNS, before it sleeps), then sleeps ``seconds``.

A run whose row a purge deleted would still be in RUNS, with no row left to end. Its
database URL comes from $JOBQ_DATABASE_URL, as a deployed worker's would.
"""

from __future__ import annotations

import os
import time

import sqlalchemy as sa

import jobq
from tests.apps.run_log import RunLog

app = jobq.App()

RUNS = sa.Table(
    "test_lifecycle_bulk_runs",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("task_id", sa.BigInteger, nullable=False),
    sa.Column("queue", sa.String(100), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
)

LOG = RunLog(RUNS)


@app.task(retries=0)
def nap(seconds: float) -> None:
    """Record that this run began, then sleep ``seconds``."""
    task = jobq.current_task()
    assert task is not None
    with LOG.engine().begin() as conn:
        conn.execute(sa.insert(RUNS).values(task_id=task.id, queue=task.queue_id, pid=os.getpid()))
    time.sleep(seconds)
