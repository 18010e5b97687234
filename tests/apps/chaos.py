"""The chaos suite's app: every run writes one side-effect row, in its own transaction.

- ``effect`` (queue ``default``) records (task id, attempt, pid) in EFFECTS, then
  sleeps a few milliseconds, so that a kill -9 often lands between the side effect
  and the fenced write of its outcome.
- ``limited_effect`` does the same on the queue ``limited`` (the test gives it a
  concurrency limit, so the limiter's slots are under the same faults).
- ``fair_effect`` does the same on the queue ``fair`` (made fair, its keys capped: the
  turns and caps of jobq.limits.fair under the same faults).
- ``leased_effect`` does the same while holding a Lease, to show that no lease is left
  outstanding once the killed holders' leases lapse.

jobq's own connections go to $JOBQ_DATABASE_URL (through a fault-injecting proxy, in
one scenario); side effects go to $CHAOS_EFFECTS_URL, the same database reached
directly, so that a dropped proxy connection cannot make a side effect's commit
ambiguous and the duplicates counted are jobq's alone.
"""

from __future__ import annotations

import os
import random
import time

import sqlalchemy as sa

import jobq

app = jobq.App()

#: Retries enough that a task whose runs are killed several times still ends done.
RETRIES = 20
#: Short leases so that a killed worker's tasks come back within seconds.
LEASE = 4

EFFECTS = sa.Table(
    "chaos_effects",
    sa.MetaData(),
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("task_id", sa.BigInteger, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
)

_engine: sa.Engine | None = None


def effects() -> sa.Engine:
    """The engine side effects are written with (direct to the database)."""
    global _engine
    if _engine is None:
        _engine = sa.create_engine(os.environ["CHAOS_EFFECTS_URL"], pool_pre_ping=True)
    return _engine


def _record_effect() -> None:
    task = jobq.current_task()
    assert task is not None
    with effects().begin() as conn:
        conn.execute(
            sa.insert(EFFECTS).values(task_id=task.id, attempt=task.attempt, pid=os.getpid())
        )
    time.sleep(random.uniform(0, 0.01))


@app.task(retries=RETRIES, lease=LEASE, backoff=jobq.FixedBackoff(0))
def effect(n: int) -> int:
    _record_effect()
    return n


@app.task(queue="limited", retries=RETRIES, lease=LEASE, backoff=jobq.FixedBackoff(0))
def limited_effect(n: int) -> int:
    _record_effect()
    return n


@app.task(queue="fair", retries=RETRIES, lease=LEASE, backoff=jobq.FixedBackoff(0))
def fair_effect(n: int) -> int:
    _record_effect()
    return n


@app.task(retries=RETRIES, lease=LEASE, backoff=jobq.FixedBackoff(0))
def leased_effect(n: int) -> int:
    # Enough names that runs seldom wait for each other, few enough that some do.
    with app.lease(f"chaos:{n % 64}", ttl=LEASE, wait=30):
        _record_effect()
    return n
