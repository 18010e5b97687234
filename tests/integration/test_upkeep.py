"""The upkeep election on every database: of the workers of one database, one holds the
``jobq upkeep`` lease and does the chores; when it stops, or dies, another takes over."""

from __future__ import annotations

import time
from collections import Counter

import jobq
from jobq import Status
from jobq.db.errors import JobqError
from jobq.upkeep import Upkeep, upkeep_holder
from tests.acceptance.test_worker_processes import wait_until

#: Seconds between ticks here: the lease lasts three of them unrenewed.
INTERVAL = 0.2


def upkeep(store: jobq.Store, worker_id: str, stats: Counter[str]) -> Upkeep:
    def failed(what: str, error: JobqError) -> None:
        raise AssertionError(f"{worker_id}: {what} failed: {error}")

    return Upkeep(store, worker_id, INTERVAL, failed, stats)


def test_one_worker_does_the_upkeep_and_another_takes_over(store: jobq.Store) -> None:
    stats: Counter[str] = Counter()
    a, b = upkeep(store, "a", stats), upkeep(store, "b", stats)
    ticked(a)
    ticked(b)
    assert (a.elected, b.elected, upkeep_holder(store)) == (True, False, "a")

    # Only the elected one rescues: a run whose 0.05 s lease expires is rescued by a.
    store.enqueue("t", {}, retries=1)
    (task,) = store.capture(1, worker_id="gone", lease=0.05)
    wait_until(lambda: ticked(b) and ticked(a) and stats["rescued"] == 1)
    assert store.get(task.id).status is Status.FAILED  # type: ignore[union-attr]

    # a stops: it gives the lease up, and b takes it at its next tick.
    a.resign()
    assert upkeep_holder(store) is None
    ticked(b)
    assert (a.elected, b.elected, upkeep_holder(store)) == (False, True, "b")

    # b dies (it ticks no more): a takes over once b's lease expired (3 intervals).
    wait_until(lambda: ticked(a) and a.elected)
    assert upkeep_holder(store) == "a"
    ticked(b)
    assert not b.elected  # it knows: its renewal failed


#: A clock for the ticks that runs an hour on at each: every tick is due.
_CLOCK = [time.monotonic()]


def ticked(upkeep: Upkeep) -> bool:
    """Tick ``upkeep``, whenever its last tick was; True."""
    _CLOCK[0] += 3600
    upkeep.tick(_CLOCK[0])
    return True
