"""The tigerbeetle limiter: one TigerBeetle slot per running task of a limited queue.

Seed 000's mutex as a semaphore. Each limited queue has a slots account (and, for a rate,
a starts account) that cannot go below zero, funded to the limit from one operator
account. A run holds a pending transfer of 1 out of the slots account whose timeout is
its lease: finishing voids it, a heartbeat swaps it for a fresh one (void and create,
linked), and a worker killed mid-run loses it when it times out. A start takes a pending
transfer of 1 out of the starts account with timeout = the rate's period, never voided:
it returns by itself once the period is over. EXCEEDS_CREDITS means the queue is full.

The accounts, their funding (which follows the limits stored in SQL) and the calls with
deadlines are jobq.limits.tigerbeetle_ledger's.

TigerBeetle's client retries forever, so every call here has a deadline. A call that
misses it makes the limiter unavailable until that call returns: the worker captures
nothing from limited queues meanwhile (it fails closed) and goes on with the others.
Imported only when a worker runs with ``--limiter tigerbeetle`` (the optional extra).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from jobq.db.errors import TigerBeetleUnavailable
from jobq.db.tasks import NO_NAMED_LEASES, Leases, Task
from jobq.limits import Limit
from jobq.limits.tigerbeetle_ledger import (
    LEDGER,
    OPERATOR,
    SLOT,
    START,
    Ledger,
    account_id,
    seconds,
    tb,
)

__all__ = ["OPERATOR", "TigerBeetleLimiter", "account_id"]

log = logging.getLogger("jobq.limits")

Fence = tuple[int, int]

#: Grants asked for in one call: each is up to two transfers, and a call holds 8,189.
MAX_GRANTS = 4000
#: Seconds a queue that was full is left alone before asking for slots again.
FULL_BACKOFF = 0.05


@dataclass
class _Grant:
    """What one run may start with: a slot (for a concurrency) and/or a start (for a rate)."""

    queue: str
    slot: int | None
    start: int | None
    #: The rate's period, with a start.
    period: float | None = None

    def ids(self) -> list[int]:
        return [i for i in (self.slot, self.start) if i is not None]


class TigerBeetleLimiter:
    """Limits enforced by a TigerBeetle cluster at ``addresses`` (``cluster`` id).

    Every call waits at most ``deadline`` seconds. ``stats`` counts slot_expired (a
    slot timed out before its run ended: the lease ran out) and slot_lost (a slot could
    not be renewed).
    """

    def __init__(self, addresses: str, cluster: int = 0, *, deadline: float = 2.0) -> None:
        self._ledger = Ledger(addresses, cluster, deadline, self._void_later)
        self.addresses = addresses
        self.cluster = cluster
        self.deadline = deadline
        self._lock = threading.Lock()
        #: The slot each run holds: its pending transfer's id, and the run's queue.
        self._slots: dict[Fence, tuple[int, str]] = {}
        #: Pending transfers to void once TigerBeetle answers.
        self._voids: list[int] = []
        self._full_until: dict[str, float] = {}
        self.stats: Counter[str] = Counter()

    def __repr__(self) -> str:
        return f"TigerBeetleLimiter(cluster {self.cluster} at {self.addresses})"

    @property
    def available(self) -> bool:
        """Whether TigerBeetle answered the last call in time (or has since)."""
        return self._ledger.available

    # --- the Limiter interface ----------------------------------------------------------

    def capture(
        self,
        store: Any,
        limited: Mapping[str, Limit],
        wanted: int,
        *,
        worker_id: str,
        lease: float | Leases | None,
    ) -> list[Task]:
        """Take slots, then capture as many tasks as slots were granted; void the rest."""
        captured: list[Task] = []
        if not self._ledger.answering():
            return captured
        try:
            self._flush_voids()
            for queue, limit in limited.items():
                want = wanted - len(captured)
                if want <= 0:
                    break
                if time.monotonic() < self._full_until.get(queue, 0.0):
                    continue
                if self._ledger.funding_due(limit):
                    # The limit as stored now, not the Store's copy of up to a second ago:
                    # moving the funding back to an old limit would undo a change.
                    fresh = store.limits().get(queue)
                    if fresh is None:
                        continue  # cleared: the queue is unlimited from now on
                    limit = fresh
                # Ask only for what is free: TigerBeetle keeps every refused transfer.
                want = min(want, self._ledger.fund(limit), MAX_GRANTS)
                slot_seconds = DEFAULT_SLOT_SECONDS if _per_row(lease) else float(lease)  # type: ignore[arg-type]
                grants = self._acquire(limit, want, slot_seconds) if want else []
                if not grants:
                    self._full_until[queue] = time.monotonic() + FULL_BACKOFF
                if grants:
                    captured += self._capture(store, grants, worker_id, lease)
        except TigerBeetleUnavailable as error:
            log.error(
                "%s; not capturing from limited queues %s until it answers",
                error, ", ".join(sorted(limited)),
            )  # fmt: skip
        return captured

    def release(self, fences: Iterable[Fence]) -> None:
        """Void the slots of runs that ended (one that had expired is counted)."""
        with self._lock:
            ids = [slot[0] for fence in fences if (slot := self._slots.pop(fence, None))]
            self._voids += ids
        try:
            self._flush_voids()
        except TigerBeetleUnavailable as error:
            log.warning("%s; %d slot(s) will be freed later", error, len(self._voids))

    def renew(self, runs: Iterable[tuple[Fence, float]]) -> None:
        """Swap each run's slot for a fresh one of its lease: void and create, linked."""
        with self._lock:
            held = [
                (fence, *self._slots[fence], lease) for fence, lease in runs if fence in self._slots
            ]
        if not held or not self.available:
            return
        transfers = [
            t for _fence, old, queue, lease in held
            for t in self._replacing(old, self._slot_transfer(queue, lease))
        ]  # fmt: skip
        try:
            results = self._ledger.call(
                self._ledger.client.create_transfers, transfers,
                late=lambda results: self._renewed(held, transfers, results, late=True),
            )  # fmt: skip
        except TigerBeetleUnavailable as error:
            log.warning("%s; could not renew %d slot(s)", error, len(held))
            return
        self._renewed(held, transfers, results)

    def _renewed(
        self, held: list[Any], transfers: list[Any], results: list[Any], late: bool = False
    ) -> None:
        """Record the outcome of renewing ``held`` with ``transfers`` (pairs: void, new)."""
        for index, (fence, _old, queue, _lease) in enumerate(held):
            void, new = results[2 * index : 2 * index + 2]
            if new.status == tb.CreateTransferStatus.CREATED:
                self._swap(fence, transfers[2 * index + 1].id, queue)
                continue
            if late and void.status == tb.CreateTransferStatus.PENDING_TRANSFER_ALREADY_VOIDED:
                continue  # released while the renewal was stuck
            with self._lock:
                self._slots.pop(fence, None)
            self.stats["slot_lost"] += 1
            log.warning(
                "task %d attempt %d: its TigerBeetle slot could not be renewed (%s); it "
                "runs on without one", fence[0], fence[1], void.status.name,
            )  # fmt: skip

    def close(self) -> None:
        """Void what can be voided, then close the client; a call stuck in it ends too."""
        with suppress(TigerBeetleUnavailable):
            self._flush_voids()
        self._ledger.close()

    # --- slots ----------------------------------------------------------------------

    def _acquire(self, limit: Limit, want: int, lease: float) -> list[_Grant]:
        """Up to ``want`` grants, each a slot and/or a start taken together (linked)."""
        grants, transfers = [], []
        for _ in range(want):
            slot = start = None
            if limit.concurrency is not None:
                slot = self._slot_transfer(limit.queue, lease)
                transfers.append(slot)
            if limit.rate is not None:
                start = self._start_transfer(limit.queue, limit.rate.period)
                transfers.append(start)
            if slot is not None and start is not None:
                slot.flags |= tb.TransferFlags.LINKED
            period = limit.rate.period if limit.rate else None
            grants.append(_Grant(limit.queue, slot and slot.id, start and start.id, period))
        results = iter(self._ledger.call(self._ledger.client.create_transfers, transfers))
        granted = []
        for grant in grants:
            statuses = [next(results).status for _ in grant.ids()]
            if all(status == tb.CreateTransferStatus.CREATED for status in statuses):
                granted.append(grant)
            elif unexpected := [s.name for s in statuses if s not in _FULL]:
                log.error("queue %r: TigerBeetle refused a slot: %s", limit.queue, unexpected)
        return granted

    def _capture(
        self, store: Any, grants: list[_Grant], worker_id: str, lease: float | Leases | None
    ) -> list[Task]:
        """Capture one task per grant; bind each to its slot and void the grants left over."""
        try:
            tasks: list[Task] = store.capture_from_limited_queue(
                grants[0].queue, len(grants), worker_id=worker_id, lease=lease
            )
        except BaseException:
            self._void_later(i for grant in grants for i in grant.ids())
            raise
        with self._lock:
            for task, grant in zip(tasks, grants, strict=False):
                if grant.slot is not None:
                    self._slots[task.fence] = (grant.slot, grant.queue)
        # A start is spent by its task and never voided; unused grants give both back.
        self._void_later(i for grant in grants[len(tasks) :] for i in grant.ids())
        with suppress(TigerBeetleUnavailable):  # the tasks are captured: hand them over
            self._restart_periods([grant for grant in grants[: len(tasks)] if grant.start])
        if _per_row(lease):
            # Slots were asked for before the rows' own leases were known.
            leases = lease if isinstance(lease, Leases) else NO_NAMED_LEASES
            default = seconds(DEFAULT_SLOT_SECONDS)
            runs = [(t.fence, leases.of(t)) for t in tasks]
            self.renew([run for run in runs if seconds(run[1]) != default])
        with suppress(TigerBeetleUnavailable):  # the tasks are captured: hand them over
            self._flush_voids()
        return tasks

    def _restart_periods(self, grants: list[_Grant]) -> None:
        """Swap each granted start for a fresh one, so that its period runs from now.

        The tasks were captured after their starts were granted: a period counted from
        the grant could end before the next start's, letting more than the rate start in
        one window of captures. Void and create are linked, as in renew.
        """
        if not grants:
            return
        transfers = []
        for grant in grants:
            assert grant.start is not None and grant.period is not None
            fresh = self._start_transfer(grant.queue, grant.period)
            transfers += self._replacing(grant.start, fresh)
        results = self._ledger.call(self._ledger.client.create_transfers, transfers)
        for void, new in zip(results[::2], results[1::2], strict=True):
            if new.status != tb.CreateTransferStatus.CREATED:
                self.stats["start_not_restarted"] += 1
                log.warning("a rate start kept its grant time: %s", void.status.name)

    def _replacing(self, pending: int, new: Any) -> list[Any]:
        """Void ``pending`` and create ``new`` in its place, linked: both happen, or neither."""
        void = tb.Transfer(
            id=self._ledger.new_id(), pending_id=pending,
            flags=tb.TransferFlags.VOID_PENDING_TRANSFER | tb.TransferFlags.LINKED,
        )  # fmt: skip
        return [void, new]

    def _start_transfer(self, queue: str, period: float) -> Any:
        return tb.Transfer(
            id=self._ledger.new_id(), debit_account_id=account_id("starts", queue),
            credit_account_id=OPERATOR, amount=1, ledger=LEDGER, code=START,
            flags=tb.TransferFlags.PENDING, timeout=seconds(period),
        )  # fmt: skip

    def _slot_transfer(self, queue: str, lease: float) -> Any:
        return tb.Transfer(
            id=self._ledger.new_id(), debit_account_id=account_id("slots", queue),
            credit_account_id=OPERATOR, amount=1, ledger=LEDGER, code=SLOT,
            flags=tb.TransferFlags.PENDING, timeout=seconds(lease),
        )  # fmt: skip

    def _swap(self, fence: Fence, slot: int, queue: str) -> None:
        """``fence`` holds ``slot`` now; voided at once if the run was released meanwhile."""
        with self._lock:
            if fence in self._slots:
                self._slots[fence] = (slot, queue)
            else:
                self._voids.append(slot)

    def _void_later(self, ids: Iterable[int]) -> None:
        with self._lock:
            self._voids.extend(ids)

    def _flush_voids(self) -> None:
        with self._lock:
            ids, self._voids = self._voids, []
        if not ids:
            return
        void = tb.TransferFlags.VOID_PENDING_TRANSFER
        voids = [tb.Transfer(id=self._ledger.new_id(), pending_id=p, flags=void) for p in ids]
        try:
            results = self._ledger.call(self._ledger.client.create_transfers, voids)
        except TigerBeetleUnavailable:
            self._void_later(ids)
            raise
        for pending, result in zip(ids, results, strict=True):
            if result.status == tb.CreateTransferStatus.PENDING_TRANSFER_EXPIRED:
                self.stats["slot_expired"] += 1
            elif result.status not in _VOIDED:
                log.warning("voiding TigerBeetle transfer %d: %s", pending, result.status.name)


#: Seconds of the slots asked for when the worker gives no lease: the captured rows' own
#: leases are not known yet (slots of a different length are swapped right after).
DEFAULT_SLOT_SECONDS = 30.0

if tb is not None:
    _FULL = (tb.CreateTransferStatus.EXCEEDS_CREDITS, tb.CreateTransferStatus.LINKED_EVENT_FAILED)
    _VOIDED = (
        tb.CreateTransferStatus.CREATED, tb.CreateTransferStatus.PENDING_TRANSFER_ALREADY_VOIDED,
    )  # fmt: skip


def _per_row(lease: float | Leases | None) -> bool:
    """Whether each captured row has a lease of its own (else one ``lease`` for all)."""
    return lease is None or isinstance(lease, Leases)
