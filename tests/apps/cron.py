"""A test app with cron schedules, chosen by $JOBQ_TEST_CRON so a test can redefine them.

- ``ticks`` (default): ``tick`` every second, each run recording its tick in RUNS; with
  $JOBQ_TEST_CRON_HANG set, a run hangs after recording its start (to be killed).
- ``v1`` / ``v2``: schedule ``report`` hourly, then at another minute with other kwargs.
- ``none``: no schedules.
- ``bad``: a schedule whose expression has a bad sixth field (seconds, last).

Its database URL comes from $JOBQ_DATABASE_URL, as a deployed worker's would.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

import sqlalchemy as sa

import jobq
from jobq.dialects.types import Moment
from tests.apps.run_log import RunLog

app = jobq.App()
VARIANT = os.environ.get("JOBQ_TEST_CRON", "ticks")

RUNS = sa.Table(
    "test_cron_runs",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("task_id", sa.BigInteger, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    # The tick the run is for: its row's run_at when captured.
    sa.Column("tick", Moment, nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("started", sa.Double(), nullable=False),
    sa.Column("finished", sa.Double(), nullable=True),
)

LOG = RunLog(RUNS)
runs_engine = LOG.engine


@app.task(retries=0, lease=2)
def tick() -> None:
    """Record this run's tick, start and end."""
    task = jobq.current_task()
    assert task is not None
    with runs_engine().begin() as conn:
        run_id = conn.execute(
            sa.insert(RUNS).values(
                task_id=task.id, attempt=task.attempt, tick=task.run_at.astimezone(UTC),
                pid=os.getpid(), started=time.time(),
            )
        ).inserted_primary_key[0]  # fmt: skip
    if os.environ.get("JOBQ_TEST_CRON_HANG"):
        time.sleep(3600)
    with runs_engine().begin() as conn:
        conn.execute(sa.update(RUNS).where(RUNS.c.id == run_id).values(finished=time.time()))


@app.task(retries=1)
def report(kind: str) -> str:
    return f"{kind} at {datetime.now(UTC).isoformat()}"


if VARIANT == "ticks":
    app.periodic(cron="* * * * * *")(tick)
elif VARIANT == "v1":
    app.periodic(cron="0 * * * *", kwargs={"kind": "hourly"})(report)
elif VARIANT == "v2":
    app.periodic(cron="30 * * * *", timezone="Europe/Paris", kwargs={"kind": "half past"})(report)
elif VARIANT == "bad":
    app.periodic(cron="* * * * * 61")(tick)
