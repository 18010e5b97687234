"""The tigerbeetle limiter: one TigerBeetle slot per running task of a limited queue.

Seed 000's mutex as a semaphore. Each limited queue has a slots account (and, for a rate,
a starts account) that cannot go below zero, funded to the limit from one operator
account. A run holds a pending transfer of 1 out of the slots account whose timeout is
its lease: finishing voids it, a heartbeat swaps it for a fresh one (void and create,
linked), and a worker killed mid-run loses it when it times out. A start takes a pending
transfer of 1 out of the starts account with timeout = the rate's period, never voided:
it returns by itself once the period is over. EXCEEDS_CREDITS means the queue is full.

The limits themselves live in SQL (jobq_limits). A worker moves an account's funding to
its queue's limit as read from the database just before, with a transfer whose id
derives from the limit's generation and the account's posted totals, so that two
workers making the same move make it once. Lowering never takes a slot from a running
task: the funding drops as slots come back. (A worker that read the limit just before it
changed may still move the funding back to it; the next check, within a second, moves
it again.)

TigerBeetle's client retries forever, so every call here has a deadline. A call that
misses it makes the limiter unavailable until that call returns: the worker captures
nothing from limited queues meanwhile (it fails closed) and goes on with the others.
Imported only when a worker runs with ``--limiter tigerbeetle`` (the optional extra).
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from jobq.errors import InvalidOption, JobqError, MissingExtra, TigerBeetleUnavailable
from jobq.limits import Limit
from jobq.tasks import Task

try:
    import tigerbeetle as tb
    from tigerbeetle import client as tb_client
except ImportError:  # pragma: no cover - exercised only without the extra
    tb = tb_client = None

log = logging.getLogger("jobq.limits")

Fence = tuple[int, int]

#: jobq's ledger and transfer codes: all its accounts share one ledger of their own.
LEDGER = 0x6A71  # "jq"
FUNDING, SLOT, START = 1, 2, 3
#: Grants asked for in one call: each is up to two transfers, and a call holds 8,189.
MAX_GRANTS = 4000
#: Seconds between two checks of an account already funded as its limit says.
RECHECK_EVERY = 5.0
#: Seconds a queue that was full is left alone before asking for slots again.
FULL_BACKOFF = 0.05


def account_id(kind: str, queue: str = "") -> int:
    """The 128-bit id of jobq's ``kind`` account for ``queue``: the same in every process."""
    return _derived_id("account", kind, queue)


def _derived_id(*parts: object) -> int:
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=16).digest()
    value = int.from_bytes(digest, "big")
    return value if 0 < value < 2**128 - 1 else 1  # 0 and 2**128-1 are reserved


OPERATOR = account_id("operator")


@dataclass
class _Grant:
    """What one run may start with: a slot (for a concurrency) and/or a start (for a rate)."""

    queue: str
    slot: int | None
    start: int | None

    def ids(self) -> list[int]:
        return [i for i in (self.slot, self.start) if i is not None]


class TigerBeetleLimiter:
    """Limits enforced by a TigerBeetle cluster at ``addresses`` (``cluster`` id).

    Every call waits at most ``deadline`` seconds. ``stats`` counts slot_expired (a
    slot timed out before its run ended: the lease ran out) and slot_lost (a slot could
    not be renewed).
    """

    def __init__(self, addresses: str, cluster: int = 0, *, deadline: float = 2.0) -> None:
        if tb is None:
            raise MissingExtra(feature="The tigerbeetle limiter", extra="tigerbeetle")
        if not isinstance(addresses, str) or not addresses.strip():
            raise InvalidOption(option="tigerbeetle-addresses", reason="no address given")
        if isinstance(cluster, bool) or not isinstance(cluster, int) or cluster < 0:
            raise InvalidOption(option="tigerbeetle-cluster", reason=f"{cluster!r} is not an id")
        self.addresses = addresses
        self.cluster = cluster
        self.deadline = deadline
        try:
            self._client = tb.ClientSync(cluster_id=cluster, replica_addresses=addresses)
        except (tb_client.InitError, ValueError) as error:
            raise InvalidOption(
                option="tigerbeetle-addresses", reason=f"{addresses!r}: {error}"
            ) from None
        # One thread makes the calls, so that a call stuck past its deadline holds up no
        # one but the calls queued behind it (which we stop making until it returns).
        self._calls = ThreadPoolExecutor(1, thread_name_prefix="jobq-tigerbeetle")
        self._stuck: Future[Any] | None = None
        self._id_lock = threading.Lock()
        self._lock = threading.Lock()
        #: The slot each run holds: its pending transfer's id, and the run's queue.
        self._slots: dict[Fence, tuple[int, str]] = {}
        #: Pending transfers to void once TigerBeetle answers.
        self._voids: list[int] = []
        self._accounts: set[str] = set()
        #: (queue, account kind) -> (generation funded for, when to check again).
        self._funded: dict[tuple[str, str], tuple[int, float]] = {}
        self._full_until: dict[str, float] = {}
        self.stats: Counter[str] = Counter()

    def __repr__(self) -> str:
        return f"TigerBeetleLimiter(cluster {self.cluster} at {self.addresses})"

    @property
    def available(self) -> bool:
        """Whether TigerBeetle answered the last call in time (or has since)."""
        return self._stuck is None or self._stuck.done()

    # --- the Limiter interface ----------------------------------------------------------

    def capture(
        self,
        store: Any,
        limited: Mapping[str, Limit],
        wanted: int,
        *,
        worker_id: str,
        lease: float | None,
    ) -> list[Task]:
        """Take slots, then capture as many tasks as slots were granted; void the rest."""
        captured: list[Task] = []
        if not self._answering():
            return captured
        try:
            self._flush_voids()
            for queue, limit in limited.items():
                want = wanted - len(captured)
                if want <= 0:
                    break
                if time.monotonic() < self._full_until.get(queue, 0.0):
                    continue
                if self._funding_due(limit):
                    # The limit as stored now, not the Store's copy of up to a second ago:
                    # moving the funding back to an old limit would undo a change.
                    fresh = store.limits().get(queue)
                    if fresh is None:
                        continue  # cleared: the queue is unlimited from now on
                    limit = fresh
                # Ask only for what is free: TigerBeetle keeps every refused transfer.
                want = min(want, self._fund(limit), MAX_GRANTS)
                grants = self._acquire(limit, want, lease or DEFAULT_SLOT_SECONDS) if want else []
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
        transfers = []
        for _fence, old, queue, lease in held:
            transfers.append(tb.Transfer(
                id=self._new_id(), pending_id=old,
                flags=tb.TransferFlags.VOID_PENDING_TRANSFER | tb.TransferFlags.LINKED,
            ))  # fmt: skip
            transfers.append(self._slot_transfer(queue, lease))
        try:
            results = self._call(
                self._client.create_transfers, transfers,
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
        if self.available:
            self._calls.shutdown()
            self._client.close()
            return
        # Closing the client fails the stuck call (ClientClosedError), which frees the
        # call thread: without that, the interpreter would wait for it forever at exit.
        with suppress(Exception):
            self._client.close()
        self._calls.shutdown(wait=False)

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
                start = tb.Transfer(
                    id=self._new_id(), debit_account_id=account_id("starts", limit.queue),
                    credit_account_id=OPERATOR, amount=1, ledger=LEDGER, code=START,
                    flags=tb.TransferFlags.PENDING, timeout=_seconds(limit.rate.period),
                )  # fmt: skip
                transfers.append(start)
            if slot is not None and start is not None:
                slot.flags |= tb.TransferFlags.LINKED
            grants.append(_Grant(limit.queue, slot and slot.id, start and start.id))
        results = iter(self._call(self._client.create_transfers, transfers))
        granted = []
        for grant in grants:
            statuses = [next(results).status for _ in grant.ids()]
            if all(status == tb.CreateTransferStatus.CREATED for status in statuses):
                granted.append(grant)
            elif unexpected := [s.name for s in statuses if s not in _FULL]:
                log.error("queue %r: TigerBeetle refused a slot: %s", limit.queue, unexpected)
        return granted

    def _capture(
        self, store: Any, grants: list[_Grant], worker_id: str, lease: float | None
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
        if lease is None:
            # Slots were asked for before the rows' own leases were known.
            default = _seconds(DEFAULT_SLOT_SECONDS)
            self.renew([(t.fence, t.lease) for t in tasks if _seconds(t.lease) != default])
        with suppress(TigerBeetleUnavailable):  # the tasks are captured: hand them over
            self._flush_voids()
        return tasks

    def _slot_transfer(self, queue: str, lease: float) -> Any:
        return tb.Transfer(
            id=self._new_id(), debit_account_id=account_id("slots", queue),
            credit_account_id=OPERATOR, amount=1, ledger=LEDGER, code=SLOT,
            flags=tb.TransferFlags.PENDING, timeout=_seconds(lease),
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
        voids = [
            tb.Transfer(
                id=self._new_id(), pending_id=pending, flags=tb.TransferFlags.VOID_PENDING_TRANSFER
            )
            for pending in ids
        ]
        try:
            results = self._call(self._client.create_transfers, voids)
        except TigerBeetleUnavailable:
            self._void_later(ids)
            raise
        for pending, result in zip(ids, results, strict=True):
            if result.status == tb.CreateTransferStatus.PENDING_TRANSFER_EXPIRED:
                self.stats["slot_expired"] += 1
            elif result.status not in _VOIDED:
                log.warning("voiding TigerBeetle transfer %d: %s", pending, result.status.name)

    # --- accounts and funding ----------------------------------------------------------

    def _funding_due(self, limit: Limit) -> set[str]:
        """The queue's accounts whose funding to check against ``limit`` now."""
        now = time.monotonic()
        return {
            kind for kind, target in _targets(limit).items()
            if target is not None
            and (
                (funded := self._funded.get((limit.queue, kind))) is None
                or funded[0] != limit.generation
                or now >= funded[1]
            )
        }  # fmt: skip

    def _fund(self, limit: Limit) -> int:
        """How many runs may start now; first moves the accounts' funding toward ``limit``
        where due (``limit`` is then as stored now). Creates the accounts once."""
        now = time.monotonic()
        self._create_accounts(limit.queue)
        targets = {kind: target for kind, target in _targets(limit).items() if target is not None}
        due = self._funding_due(limit)
        found = self._call(
            self._client.lookup_accounts, [account_id(kind, limit.queue) for kind in targets]
        )
        accounts = {account.id: account for account in found}
        moves, free = [], MAX_GRANTS
        for kind, target in targets.items():
            account = accounts[account_id(kind, limit.queue)]
            funded = account.credits_posted - account.debits_posted
            if kind in due:
                move = _funding_move(kind, limit, account, target)
                if move is not None:
                    moves.append(move)
                    funded += move.amount if move.credit_account_id == account.id else -move.amount
                # Settled: look again now and then, in case a worker that read an older
                # limit moved it meanwhile. Not yet (a lowering waits for slots to come
                # back): at every capture, before any slot is handed out.
                again = now + RECHECK_EVERY if funded == target else now
                self._funded[(limit.queue, kind)] = (limit.generation, again)
            free = min(free, funded - account.debits_pending)
        if moves:
            for result in self._call(self._client.create_transfers, moves):
                done = result.status.name in ("CREATED", "EXISTS")
                if not done and not result.status.name.startswith("EXISTS_WITH_DIFFERENT"):
                    log.warning("queue %r: funding transfer %s", limit.queue, result.status.name)
        return max(free, 0)

    def _create_accounts(self, queue: str) -> None:
        if queue in self._accounts:
            return
        flags = tb.AccountFlags.DEBITS_MUST_NOT_EXCEED_CREDITS
        accounts = [tb.Account(id=OPERATOR, ledger=LEDGER, code=FUNDING)] + [
            tb.Account(id=account_id(kind, queue), ledger=LEDGER, code=code, flags=flags)
            for kind, code in (("slots", SLOT), ("starts", START))
        ]
        results = self._call(self._client.create_accounts, accounts)
        for account, result in zip(accounts, results, strict=True):
            if result.status not in (tb.CreateAccountStatus.CREATED, tb.CreateAccountStatus.EXISTS):
                raise JobqError(
                    f"TigerBeetle refused jobq's account {account.id} for queue {queue!r}: "
                    f"{result.status.name} (does another application use ledger {LEDGER}?)"
                )
        self._accounts.add(queue)

    # --- calls with a deadline ----------------------------------------------------------

    def _answering(self) -> bool:
        """Whether to call TigerBeetle now; says so once it answers again after a miss."""
        if not self.available:
            return False
        if self._stuck is not None:
            self._stuck = None
            log.warning("TigerBeetle answers again; capturing from limited queues")
        return True

    def _call(
        self,
        function: Callable[..., Any],
        argument: Any,
        late: Callable[[Any], None] | None = None,
    ) -> Any:
        """``function(argument)`` on the call thread, or TigerBeetleUnavailable past the
        deadline; ``late(result)`` then runs if the call returns after all. By default a
        late create_transfers gives back the pending transfers it created."""
        if not self.available:
            raise self._unavailable()
        future = self._calls.submit(function, argument)
        try:
            return future.result(timeout=self.deadline)
        except FutureTimeout:
            self._stuck = future
            if late is None and function == self._client.create_transfers:
                late = lambda results: self._void_created(argument, results)  # noqa: E731
            if late is not None:
                future.add_done_callback(
                    lambda done: None if done.exception() else late(done.result())
                )
            raise self._unavailable() from None

    def _void_created(self, transfers: list[Any], results: list[Any]) -> None:
        """Void the pending transfers that a late create_transfers call created."""
        self._void_later(
            t.id for t, result in zip(transfers, results, strict=True)
            if result.status == tb.CreateTransferStatus.CREATED
            and t.flags & tb.TransferFlags.PENDING
        )  # fmt: skip

    def _unavailable(self) -> TigerBeetleUnavailable:
        return TigerBeetleUnavailable(
            cluster=self.cluster, addresses=self.addresses, seconds=self.deadline
        )

    def _new_id(self) -> int:
        # tb.id() keeps unsynchronised state, and the worker's threads share it.
        with self._id_lock:
            return tb.id()


#: Seconds of the slots asked for when the worker gives no lease: the captured rows' own
#: leases are not known yet (slots of a different length are swapped right after).
DEFAULT_SLOT_SECONDS = 30.0

if tb is not None:
    _FULL = (tb.CreateTransferStatus.EXCEEDS_CREDITS, tb.CreateTransferStatus.LINKED_EVENT_FAILED)
    _VOIDED = (
        tb.CreateTransferStatus.CREATED, tb.CreateTransferStatus.PENDING_TRANSFER_ALREADY_VOIDED,
    )  # fmt: skip


def _seconds(value: float) -> int:
    """A timeout in TigerBeetle's whole seconds, never shorter than asked."""
    return max(1, math.ceil(value))


def _targets(limit: Limit) -> dict[str, int | None]:
    """What each of the queue's accounts should be funded to: None if it is not used."""
    return {"slots": limit.concurrency, "starts": limit.rate.count if limit.rate else None}


def _funding_move(kind: str, limit: Limit, account: Any, target: int) -> Any | None:
    """The transfer moving ``account``'s funding toward ``target``, or None if it is there.

    Its id derives from the limit's generation and the account's posted totals, which
    only funding moves change: workers seeing the same state make the same move, once.
    A lowering takes only what no running task holds (a balancing debit), and is made
    only when there is some, so it never takes a slot away.
    """
    funded = account.credits_posted - account.debits_posted
    if funded == target:
        return None
    state = (limit.generation, kind, account.credits_posted, account.debits_posted)
    if funded < target:
        return tb.Transfer(
            id=_derived_id("raise", *state), debit_account_id=OPERATOR,
            credit_account_id=account.id, amount=target - funded, ledger=LEDGER, code=FUNDING,
        )  # fmt: skip
    free = funded - account.debits_pending
    if free <= 0:
        return None
    return tb.Transfer(
        id=_derived_id("lower", *state, account.debits_pending), debit_account_id=account.id,
        credit_account_id=OPERATOR, amount=min(funded - target, free), ledger=LEDGER,
        code=FUNDING, flags=tb.TransferFlags.BALANCING_DEBIT,
    )  # fmt: skip
