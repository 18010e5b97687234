"""A test app: tasks that succeed, fail, retry, time out, and record side effects.

Its database URL comes from $JOBQ_DATABASE_URL, as a deployed worker's would.
"""

from __future__ import annotations

import asyncio
import os
import time

import sqlalchemy as sa

import jobq
from jobq.core.retry import FixedBackoff

app = jobq.App()
NOW = FixedBackoff(0)

_effects_engine: sa.Engine | None = None


def effects() -> sa.Engine:
    """The engine side effects are written with (the same database, another table)."""
    global _effects_engine
    if _effects_engine is None:
        _effects_engine = sa.create_engine(os.environ["JOBQ_DATABASE_URL"])
    return _effects_engine


EFFECTS = sa.Table(
    "test_side_effects",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("task", sa.Integer, nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
)


@app.task(retries=2, backoff=NOW)
def work(n: int, fail_times: int = 0, key: int = 0) -> int:
    """Succeeds, unless this is one of its first ``fail_times`` attempts."""
    with effects().begin() as conn:
        tries = conn.execute(
            sa.select(sa.func.count()).select_from(EFFECTS).where(EFFECTS.c.task == key)
        ).scalar_one()
        conn.execute(sa.insert(EFFECTS).values(task=key, pid=os.getpid()))
    if tries < fail_times:
        raise RuntimeError(f"attempt {tries + 1} of {n} fails")
    return n * 2


@app.task(retries=1, backoff=NOW)
def retry_once(n: int) -> str:
    with effects().begin() as conn:
        tries = conn.execute(
            sa.select(sa.func.count()).select_from(EFFECTS).where(EFFECTS.c.task == -n)
        ).scalar_one()
        conn.execute(sa.insert(EFFECTS).values(task=-n, pid=os.getpid()))
    if tries == 0:
        raise jobq.Retry(delay=0, reason="not yet")
    return "second time lucky"


@app.task(retries=0)
def sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@app.task(retries=0, timeout=0.5)
def too_slow(seconds: float) -> None:
    time.sleep(seconds)


@app.task(retries=0, timeout=0.5)
async def too_slow_async(seconds: float) -> None:
    await asyncio.sleep(seconds)


@app.task
async def double(n: int) -> int:
    await asyncio.sleep(0)
    return n * 2


def create_effects_table() -> None:
    EFFECTS.create(effects(), checkfirst=True)


#: When each run of ``ledger`` started and ended (time.time_ns()), to check for overlaps.
INTERVALS = sa.Table(
    "test_lock_intervals",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("holder", sa.BigInteger, nullable=False),
    sa.Column("n", sa.BigInteger, nullable=False),
    sa.Column("pid", sa.BigInteger, nullable=False),
    sa.Column("entered", sa.BigInteger, nullable=False),
    sa.Column("exited", sa.BigInteger, nullable=False),
)


@app.task(lock="ledger:{holder}", retries=0)
def ledger(holder: int, n: int) -> None:
    """Holds its holder's lock key for 20 ms and records when it entered and left."""
    entered = time.time_ns()
    time.sleep(0.02)
    exited = time.time_ns()
    with effects().begin() as conn:
        conn.execute(
            sa.insert(INTERVALS).values(
                holder=holder, n=n, pid=os.getpid(), entered=entered, exited=exited
            )
        )


def create_intervals_table() -> None:
    INTERVALS.create(effects(), checkfirst=True)


@app.task(retries=0)
def returns(value: str) -> object:
    """Returns a value that JSON cannot hold when asked to (a set, a datetime)."""
    import datetime

    return {"set": {1, 2}, "datetime": datetime.datetime.now(), "ok": value}[value]


@app.task(retries=0)
async def returns_async(value: str) -> object:
    return {"set": {1, 2}, "ok": value}[value]


@app.task(retries=1)
def retry_after(delay: float) -> str:
    """Asks, on its first attempt, to be retried after ``delay`` seconds; then is done."""
    task = jobq.current_task()
    if task is not None and task.attempt == 1:
        raise jobq.Retry(delay=delay, reason=f"again in {delay:g} s")
    return "done at last"
