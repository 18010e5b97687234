"""The TigerBeetle side of the tigerbeetle limiter: calls with deadlines, accounts, funding.

Each limited queue has a slots account (and, for a rate, a starts account) that cannot
go below zero, funded to the limit from one operator account; their ids derive from the
queue's name, so every process finds the same ones. The funding follows the limits
stored in SQL: a move toward a limit is a transfer whose id derives from the limit's
generation and the account's posted totals, so two workers making the same move make it
once. A lowering takes only funds no running task holds, so the funding drops as slots
come back. (A worker that read a limit just before it changed may still move the funding
back to it; the next check, at the next capture, moves it again.)

TigerBeetle's client retries forever, so every call here has a deadline. A call that
misses it makes the ledger unavailable until that call returns.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import suppress
from typing import Any

from jobq.db.errors import InvalidOption, JobqError, MissingExtra, TigerBeetleUnavailable
from jobq.limits import Limit

try:
    import tigerbeetle as tb
    from tigerbeetle import client as tb_client
except ImportError:  # pragma: no cover - exercised only without the extra
    # None stands for the missing extra, which TigerBeetleLedger() checks before any use;
    # the ignore keeps the modules' own types for every other line.
    tb = tb_client = None  # type: ignore[assignment]

log = logging.getLogger("jobq.limits")

#: jobq's ledger and transfer codes: all its accounts share one ledger of their own.
LEDGER = 0x6A71  # "jq"
FUNDING, SLOT, START = 1, 2, 3
#: Seconds between two checks of an account already funded as its limit says.
RECHECK_EVERY = 5.0


def account_id(kind: str, queue: str = "") -> int:
    """The 128-bit id of jobq's ``kind`` account for ``queue``: the same in every process."""
    return _derived_id("account", kind, queue)


def _derived_id(*parts: object) -> int:
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=16).digest()
    value = int.from_bytes(digest, "big")
    return value if 0 < value < 2**128 - 1 else 1  # 0 and 2**128-1 are reserved


OPERATOR = account_id("operator")


def seconds(value: float) -> int:
    """A timeout in TigerBeetle's whole seconds, never shorter than asked."""
    return max(1, math.ceil(value))


class Ledger:
    """jobq's accounts in the TigerBeetle cluster ``cluster`` at ``addresses``.

    Every call waits at most ``deadline`` seconds; ``on_late_pending(ids)`` receives the
    pending transfers that a create_transfers call created after missing it.
    """

    def __init__(
        self,
        addresses: str,
        cluster: int,
        deadline: float,
        on_late_pending: Callable[[Iterable[int]], None],
    ) -> None:
        if tb is None:
            raise MissingExtra(feature="The tigerbeetle limiter", extra="tigerbeetle")
        if not isinstance(addresses, str) or not addresses.strip():
            raise InvalidOption(option="tigerbeetle-addresses", reason="no address given")
        if isinstance(cluster, bool) or not isinstance(cluster, int) or cluster < 0:
            raise InvalidOption(option="tigerbeetle-cluster", reason=f"{cluster!r} is not an id")
        self.addresses = addresses
        self.cluster = cluster
        self.deadline = deadline
        self._on_late_pending = on_late_pending
        try:
            self.client = tb.ClientSync(cluster_id=cluster, replica_addresses=addresses)
        except (tb_client.InitError, ValueError) as error:
            raise InvalidOption(
                option="tigerbeetle-addresses", reason=f"{addresses!r}: {error}"
            ) from None
        # One thread makes the calls, so that a call stuck past its deadline holds up no
        # one but the calls queued behind it (which we stop making until it returns).
        self._calls = ThreadPoolExecutor(1, thread_name_prefix="jobq-tigerbeetle")
        self._stuck: Future[Any] | None = None
        self._id_lock = threading.Lock()
        self._accounts: set[str] = set()
        #: (queue, account kind) -> (generation funded for, when to check again).
        self._funded: dict[tuple[str, str], tuple[int, float]] = {}

    @property
    def available(self) -> bool:
        """Whether TigerBeetle answered the last call in time (or has since)."""
        return self._stuck is None or self._stuck.done()

    def answering(self) -> bool:
        """Whether to call TigerBeetle now; says so once it answers again after a miss."""
        if not self.available:
            return False
        if self._stuck is not None:
            self._stuck = None
            log.warning("TigerBeetle answers again; capturing from limited queues")
        return True

    def call(
        self,
        function: Callable[..., Any],
        argument: Any,
        late: Callable[[Any], None] | None = None,
    ) -> Any:
        """``function(argument)`` on the call thread, or TigerBeetleUnavailable past the
        deadline; ``late(result)`` then runs if the call returns after all. By default a
        late create_transfers gives back the pending transfers it created."""
        if not self.available:
            raise self.unavailable()
        future = self._calls.submit(function, argument)
        try:
            return future.result(timeout=self.deadline)
        except FutureTimeout:
            self._stuck = future
            if late is None and function == self.client.create_transfers:
                late = lambda results: self._void_created(argument, results)  # noqa: E731
            if late is not None:
                future.add_done_callback(
                    lambda done: None if done.exception() else late(done.result())
                )
            raise self.unavailable() from None

    def _void_created(self, transfers: list[Any], results: list[Any]) -> None:
        self._on_late_pending(
            t.id for t, result in zip(transfers, results, strict=True)
            if result.status == tb.CreateTransferStatus.CREATED
            and t.flags & tb.TransferFlags.PENDING
        )  # fmt: skip

    def unavailable(self) -> TigerBeetleUnavailable:
        """The error saying TigerBeetle did not answer in time."""
        return TigerBeetleUnavailable(
            cluster=self.cluster, addresses=self.addresses, seconds=self.deadline
        )

    def new_id(self) -> int:
        """A fresh transfer id (a refused one can never be used again)."""
        # tb.id() keeps unsynchronised state, and the worker's threads share it.
        with self._id_lock:
            return tb.id()

    def close(self) -> None:
        """Close the client; a call stuck in it ends too."""
        if self.available:
            self._calls.shutdown()
            self.client.close()
            return
        # Closing the client fails the stuck call (ClientClosedError), which frees the
        # call thread: without that, the interpreter would wait for it forever at exit.
        with suppress(Exception):
            self.client.close()
        self._calls.shutdown(wait=False)

    # --- accounts and funding ----------------------------------------------------------

    def funding_due(self, limit: Limit) -> set[str]:
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

    def fund(self, limit: Limit) -> int:
        """How many runs may start now; first moves the accounts' funding toward ``limit``
        where due (``limit`` is then as stored now). Creates the accounts once."""
        now = time.monotonic()
        self.create_accounts(limit.queue)
        targets = {kind: target for kind, target in _targets(limit).items() if target is not None}
        due = self.funding_due(limit)
        found = self.call(
            self.client.lookup_accounts, [account_id(kind, limit.queue) for kind in targets]
        )
        accounts = {account.id: account for account in found}
        moves, free = [], 2**31
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
            for result in self.call(self.client.create_transfers, moves):
                done = result.status.name in ("CREATED", "EXISTS")
                if not done and not result.status.name.startswith("EXISTS_WITH_DIFFERENT"):
                    log.warning("queue %r: funding transfer %s", limit.queue, result.status.name)
        return max(free, 0)

    def create_accounts(self, queue: str) -> None:
        if queue in self._accounts:
            return
        flags = tb.AccountFlags.DEBITS_MUST_NOT_EXCEED_CREDITS
        accounts = [tb.Account(id=OPERATOR, ledger=LEDGER, code=FUNDING)] + [
            tb.Account(id=account_id(kind, queue), ledger=LEDGER, code=code, flags=flags)
            for kind, code in (("slots", SLOT), ("starts", START))
        ]
        results = self.call(self.client.create_accounts, accounts)
        for account, result in zip(accounts, results, strict=True):
            if result.status not in (tb.CreateAccountStatus.CREATED, tb.CreateAccountStatus.EXISTS):
                raise JobqError(
                    f"TigerBeetle refused jobq's account {account.id} for queue {queue!r}: "
                    f"{result.status.name} (does another application use ledger {LEDGER}?)"
                )
        self._accounts.add(queue)


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
