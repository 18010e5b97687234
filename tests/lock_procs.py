"""Bodies of the OS processes that contend for one lock (importable under spawn).

Each process records what it did as rows of ``lock_intervals`` in the test database:
(process index, enter, exit) in time.time_ns(), one clock for every process on the machine.
"""

from __future__ import annotations

import random
import time
from typing import Any

import sqlalchemy as sa

import jobq

metadata = sa.MetaData()

#: One row per turn a process had holding the lock (a TimeoutLock success: enter == exit).
intervals = sa.Table(
    "lock_intervals",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("proc", sa.Integer, nullable=False),
    sa.Column("enter_ns", sa.BigInteger, nullable=False),
    sa.Column("exit_ns", sa.BigInteger, nullable=False),
)

#: How long a process holds the lock on each turn, in seconds.
HOLD = (0.02, 0.05)
#: The ttl of the leases in the "lease-expiry" form: much longer than HOLD.
EXPIRY_TTL = 0.3


def make_lock(store: jobq.Store, kind: str, name: str) -> Any:
    """The lock object one process uses for all its turns."""
    if kind == "mutex":
        return jobq.Mutex(store, name)
    if kind in ("lease", "lease-expiry"):
        return jobq.Lease(store, name, EXPIRY_TTL if kind == "lease-expiry" else 30.0)
    if kind == "advisory":
        return jobq.AdvisoryLock(store, name)
    if kind == "advisory-session":
        return jobq.AdvisoryLock(store, name, session=True)
    raise ValueError(f"unknown lock kind {kind!r}")


def record(engine: sa.Engine, proc: int, enter_ns: int, exit_ns: int) -> None:
    with engine.begin() as conn:
        conn.execute(sa.insert(intervals).values(proc=proc, enter_ns=enter_ns, exit_ns=exit_ns))


def take_turns(
    url: str, kind: str, name: str, proc: int, turns: int, seconds: float, start: Any
) -> None:
    """Take the lock ``turns`` times (or until ``seconds`` pass), holding it 20-50 ms each.

    Every lock is given back by release(), except in the "lease-expiry" form, where the
    holder walks away and the next process must take the expired lease over; it rests a
    full ttl before trying again, so it cannot simply extend its own lease.
    """
    store = jobq.Store(url)
    lock = make_lock(store, kind, name)
    rng = random.Random(proc)
    start.wait()
    deadline = time.monotonic() + seconds
    done = 0
    while done < turns and time.monotonic() < deadline:
        if not lock.acquire(wait=0.2):
            continue
        enter_ns = time.time_ns()
        time.sleep(rng.uniform(*HOLD))
        exit_ns = time.time_ns()
        if kind == "lease-expiry":
            rest = EXPIRY_TTL + 0.05
        else:
            if not lock.release():
                raise AssertionError(f"process {proc}: release() of a held {kind} was False")
            rest = rng.uniform(0, 0.01)
        record(store.engine, proc, enter_ns, exit_ns)
        done += 1
        time.sleep(rest)
    store.dispose()


def hammer_timeout_lock(
    url: str, name: str, proc: int, timeout: float, seconds: float, start: Any
) -> None:
    """Try one TimeoutLock every 5-20 ms for ``seconds``, recording each success as the
    moments just before and just after its acquire() (it was taken between the two)."""
    store = jobq.Store(url)
    lock = jobq.TimeoutLock(store, name, timeout)
    rng = random.Random(proc)
    start.wait()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        before = time.time_ns()
        if lock.acquire():
            record(store.engine, proc, before, time.time_ns())
        time.sleep(rng.uniform(0.005, 0.02))
    store.dispose()
