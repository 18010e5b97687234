"""Mutual exclusion of jobq.locks, proven with real OS processes contending for one lock.

Each process writes its turns holding the lock into ``lock_intervals`` (see
tests/lock_procs.py); no two turns may overlap, and every process must get a turn.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import pytest
import sqlalchemy as sa

import jobq
from jobq.dialects.schema import locks
from jobq.locks import advisory_key
from tests import lock_procs, shared_database
from tests.lock_procs import intervals
from tests.procs import run_processes

#: One migrated database per backend for the module, emptied before each test.
backend, shared_url, db_url = shared_database.FIXTURES

pytestmark = pytest.mark.slow

PROCESSES = 4
TURNS = 5


@pytest.fixture
def engine(db_url: str) -> Iterator[sa.Engine]:
    """An engine on the test database with an empty lock_intervals table, dropped after."""
    engine = sa.create_engine(db_url)
    lock_procs.metadata.drop_all(engine)
    lock_procs.metadata.create_all(engine)
    yield engine
    lock_procs.metadata.drop_all(engine)
    engine.dispose()


@pytest.fixture
def lock_name() -> str:
    """A name no other test session uses: advisory locks span the whole database."""
    return f"contended-{uuid.uuid4().hex}"


def recorded(engine: sa.Engine) -> list[tuple[int, int, int]]:
    """(proc, enter_ns, exit_ns) of every recorded turn, in order of entry."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(intervals.c.proc, intervals.c.enter_ns, intervals.c.exit_ns).order_by(
                intervals.c.enter_ns, intervals.c.id
            )
        )
        return [(proc, enter, exit_) for proc, enter, exit_ in rows]


def assert_turns_are_exclusive(turns: list[tuple[int, int, int]]) -> None:
    """Sorted by entry, every turn starts after the one before it ended; all took part."""
    assert all(enter < exit_ for _, enter, exit_ in turns)
    for (before, _, left), (after, entered, _) in pairwise(turns):
        assert entered >= left, (
            f"process {after} entered {(left - entered) / 1e6:.1f} ms before process {before} left"
        )
    per_process = Counter(proc for proc, _, _ in turns)
    assert set(per_process) == set(range(PROCESSES)), f"turns per process: {per_process}"


def contend(
    store: jobq.Store, db_url: str, engine: sa.Engine, name: str, kind: str, turns: int
) -> sa.Row[Any] | None:
    """Four processes take ``turns`` turns each on lock ``name`` of ``kind``; check the turns
    were exclusive and shared, and return the lock's jobq_locks row at the end."""
    run_processes(
        lock_procs.take_turns,
        [(db_url, kind, name, proc, turns, 20.0) for proc in range(PROCESSES)],
    )
    taken = recorded(engine)
    assert_turns_are_exclusive(taken)
    assert len(taken) == PROCESSES * turns
    with store.engine.connect() as conn:
        return conn.execute(sa.select(locks).where(locks.c.name == name)).first()


def test_processes_contending_for_a_mutex_never_hold_it_together(
    store: jobq.Store, db_url: str, engine: sa.Engine, lock_name: str
) -> None:
    """Four processes take turns on one Mutex: no overlap, every process gets turns."""
    row = contend(store, db_url, engine, lock_name, "mutex", TURNS)
    assert row is not None and row.acquired is False, "the mutex was left held"


@pytest.mark.parametrize(("kind", "turns"), [("lease", TURNS), ("lease-expiry", 3)])
def test_processes_contending_for_a_lease_never_hold_it_together(
    store: jobq.Store, db_url: str, engine: sa.Engine, lock_name: str, kind: str, turns: int
) -> None:
    """Four processes take turns on one Lease: no overlap, every process gets turns.

    "lease-expiry" holders never release: each turn ends with the lease running out and
    the next process taking the expired row over (the compare-and-swap on its expiry).
    """
    row = contend(store, db_url, engine, lock_name, kind, turns)
    if kind == "lease":
        assert row is None, "a released lease left its row behind"
    else:
        assert row is not None and row.kind == "lease"


@pytest.mark.parametrize("backend", ["postgresql"], scope="module")
@pytest.mark.parametrize("kind", ["advisory", "advisory-session"])
def test_processes_contending_for_an_advisory_lock_never_hold_it_together(
    store: jobq.Store, db_url: str, engine: sa.Engine, lock_name: str, kind: str
) -> None:
    """Four processes take turns on one AdvisoryLock, transaction-scoped or session: no
    overlap, every process gets turns, and it is free at the end."""
    assert contend(store, db_url, engine, lock_name, kind, TURNS) is None
    with store.engine.connect() as conn:
        free = conn.execute(
            sa.text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": advisory_key(lock_name)}
        ).scalar()
    assert free is True, "the advisory lock was left held"


def test_processes_hammering_a_timeout_lock_succeed_once_per_timeout(
    db_url: str, engine: sa.Engine, lock_name: str
) -> None:
    """Four processes try a 1 s TimeoutLock every few ms for 3 s: it is acquired at least
    3 times, each success at least a second after the one before. A success is known only
    to lie between the moments before and after its acquire(); on a busy machine a call
    can take a while, so each gap checked is the widest it could have been."""
    timeout, seconds, slack_ns = 1.0, 3.0, 50_000_000
    run_processes(
        lock_procs.hammer_timeout_lock,
        [(db_url, lock_name, proc, timeout, seconds) for proc in range(PROCESSES)],
    )
    successes = [(before, after) for _, before, after in recorded(engine)]
    assert len(successes) >= 3, successes
    gaps = [later_after - before for (before, _), (_, later_after) in pairwise(successes)]
    assert all(gap >= timeout * 1e9 - slack_ns for gap in gaps), [g / 1e9 for g in gaps]
