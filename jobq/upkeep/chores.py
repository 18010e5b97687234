"""Upkeep: the lease that elects one worker per database, and the chores it runs."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

from jobq import locks
from jobq.app.store import Store
from jobq.core.workers import FORGET_AFTER
from jobq.db.durations import format_duration
from jobq.db.errors import JobqError
from jobq.upkeep.retention import DEFAULT_RETAIN, Retention, describe
from jobq.upkeep.vacuum import Vacuum

log = logging.getLogger("jobq.worker")

#: The name of the lease whose holder does the upkeep of its database.
UPKEEP_LOCK = "jobq upkeep"
#: Seconds the elected worker's lease lasts unrenewed, in rescue intervals: past that,
#: another worker takes the upkeep over (its holder died, or lost the database).
LEASE_INTERVALS = 4
#: Rescue intervals between the passes of an elected worker that has nothing running and
#: found nothing to do at its last pass: idle workers cost the database little.
IDLE_INTERVALS = 3
#: Rescue intervals between the tries of the other workers to take the lease over.
FOLLOWER_INTERVALS = 2
#: Seconds between the housekeeping chores (purge of expired leases, forgetting dead
#: workers), in rescue intervals: nothing waits for those.
HOUSEKEEPING_INTERVALS = 12


def upkeep_holder(store: Store) -> str | None:
    """The id of the worker that does the upkeep of ``store``'s database now (its lease
    unexpired), or None."""
    return locks.lease_owner(store, UPKEEP_LOCK)


class Upkeep:
    """What ``worker_id`` does for its database every ``interval`` seconds, if elected.

    ``failed(what, error)`` hears of a chore that failed (it is tried again next time);
    ``stats`` counts what was done (rescued, pruned, ...). Finished tasks are kept for
    ``retain`` s (math.inf: forever) unless their queue has a retention of its own.
    With ``vacuum``, jobq_tasks is vacuumed whenever its dead rows pile up (vacuum.py).
    """

    def __init__(
        self,
        store: Store,
        worker_id: str,
        interval: float,
        failed: Callable[[str, JobqError], None],
        stats: Counter[str],
        retain: float = DEFAULT_RETAIN,
        vacuum: bool = True,
    ) -> None:
        self.store = store
        self.worker_id = worker_id
        self.interval = interval
        self._failed = failed
        self._stats = stats
        # Owned by the worker's id: `jobq locks list` says who holds it.
        self.lease = locks.Lease(store, UPKEEP_LOCK, LEASE_INTERVALS * interval, owner=worker_id)
        self.retention = Retention(store, retain, failed, stats)
        self.vacuum = Vacuum(store, failed, stats, enabled=vacuum)
        #: Whether this worker did the upkeep at its last turn.
        self.elected = False
        self._next = 0.0
        self._next_housekeeping = 0.0

    def tick(self, now: float, busy: bool = True) -> None:
        """When due, take or renew the lease, and if held, do the chores: every
        ``interval`` s while ``busy`` (runs going) or while the chores find work, else
        every IDLE_INTERVALS; a worker not elected tries every FOLLOWER_INTERVALS. While
        elected, a batch of retention's when one is due."""
        if self.elected:
            self.retention.step(now)
            self.vacuum.step(now)
        if now < self._next:
            return
        self._next = now + FOLLOWER_INTERVALS * self.interval
        try:
            held = self.lease.acquire()
        except JobqError as error:
            self._failed("taking the upkeep lease", error)
            return
        if held != self.elected:
            self.elected = held
            if held:
                log.info(
                    "worker %s does the upkeep of this database (rescue, workflow sweeps, "
                    "purges, pruning finished tasks after %s) while it holds the %r lease",
                    self.worker_id, describe(self.retention.retain), UPKEEP_LOCK,
                )  # fmt: skip
            else:
                log.info("worker %s no longer does the upkeep: another took it", self.worker_id)
        if not held:
            return
        found = self._rescue()
        self._next = now + (1 if busy or found else IDLE_INTERVALS) * self.interval
        if now >= self._next_housekeeping:
            self._next_housekeeping = now + HOUSEKEEPING_INTERVALS * self.interval
            self._purge_leases()
            self._forget_workers()
            self._settle_fair_queues()

    def resign(self) -> None:
        """Give the lease up (the worker is stopping), so another takes over at once."""
        if not self.elected:
            return
        try:
            self.lease.release()
        except JobqError as error:
            log.warning("could not give up the upkeep lease: %s", error)
        self.elected = False

    def _rescue(self) -> bool:
        """Rescue runs whose lease expired and settle stuck workflow nodes; whether there
        was any to (or a chore failed: look again soon)."""
        try:
            rescued = self.store.rescue()
        except JobqError as error:
            self._failed("rescue", error)
            return True
        if rescued:
            self._stats["rescued"] += rescued
            log.info("rescued %d task(s) whose lease had expired", rescued)
        try:
            settled = self.store.sweep_workflows()
        except JobqError as error:
            self._failed("settling workflows", error)
            return True
        if settled:
            log.info("settled %d workflow node(s) that no end had settled", settled)
        return bool(rescued or settled)

    def _purge_leases(self) -> None:
        try:
            purged = locks.purge(self.store)
        except JobqError as error:
            self._failed("purging expired leases", error)
            return
        if purged:
            log.info("purged %d expired lease(s)", purged)

    def _settle_fair_queues(self) -> None:
        """Give each fair queue's rows written without its knowledge their keys, and wake
        the keys of rows made to wait again without an enqueue (jobq.limits.fair.settle)."""
        fair_queues = self.store.fair_queues
        try:
            settled = sum(fair_queues.settle(queue) for queue in fair_queues.shares())
        except JobqError as error:
            self._failed("settling fair queues", error)
            return
        if settled:
            log.info("settled %d row(s) and key(s) of fair queues", settled)

    def _forget_workers(self) -> None:
        """Drop the registry rows of workers unseen for FORGET_AFTER s: they died without
        unregistering, and `jobq status` would list them as stale forever."""
        try:
            forgotten = self.store.forget_workers(FORGET_AFTER)
        except JobqError as error:
            self._failed("forgetting dead workers", error)
            return
        if forgotten:
            log.info("forgot %d worker(s) unseen for %s", forgotten, format_duration(FORGET_AFTER))
