"""The tigerbeetle limiter against a real TigerBeetle server (one replica, a fresh data file).

Each TigerBeetleLimiter stands for one worker. The ledger is read with a client of the
test's own: for an account, credits_posted - debits_posted is its funding (the limit)
and debits_pending the slots (or starts) held now. Captures that assert "nothing" wait
out FULL_BACKOFF first, so that the limiter really asks TigerBeetle rather than skipping a
queue it just found full.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import random
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest

import jobq
from jobq import Status
from jobq.db.errors import InvalidOption
from jobq.limits import tigerbeetle as tbl
from jobq.limits.tigerbeetle import TigerBeetleLimiter
from jobq.limits.tigerbeetle_ledger import FUNDING
from tests.tigerbeetle_server import Server, free_port

tb = pytest.importorskip("tigerbeetle", reason="the tigerbeetle client is not installed")

pytestmark = pytest.mark.timeout(120)

#: Most tests are about TigerBeetle, not SQL: SQLite is enough for them.
SQLITE = pytest.mark.parametrize("backend", ["sqlite"])
ROOT = Path(__file__).resolve().parents[2]


# --- helpers ------------------------------------------------------------------------


class Ledger:
    """Reads jobq's accounts with a client of its own."""

    def __init__(self, address: str) -> None:
        self.client = tb.ClientSync(cluster_id=0, replica_addresses=address)

    def account(self, kind: str, queue: str) -> Any:
        found = self.client.lookup_accounts([tbl.account_id(kind, queue)])
        assert len(found) == 1, f"no {kind} account for queue {queue!r}"
        return found[0]

    def funding(self, kind: str, queue: str) -> int:
        account = self.account(kind, queue)
        return int(account.credits_posted - account.debits_posted)

    def held(self, kind: str, queue: str) -> int:
        return int(self.account(kind, queue).debits_pending)

    def funding_transfers(self, kind: str, queue: str) -> list[Any]:
        flags = tb.AccountFilterFlags.DEBITS | tb.AccountFilterFlags.CREDITS
        only = tb.AccountFilter(
            account_id=tbl.account_id(kind, queue), user_data_128=0, user_data_64=0,
            user_data_32=0, code=FUNDING, timestamp_min=0, timestamp_max=0, limit=1000,
            flags=flags,
        )  # fmt: skip
        return list(self.client.get_account_transfers(only))


@pytest.fixture
def ledger(tigerbeetle: Server) -> Iterator[Ledger]:
    reader = Ledger(tigerbeetle.address)
    yield reader
    reader.client.close()


def shut(limiter: TigerBeetleLimiter) -> None:
    """Close ``limiter``, and wait for a call stuck in its client to end (close ends it)."""
    limiter.close()
    stuck = limiter._ledger._stuck
    if stuck is not None:
        with suppress(Exception):
            stuck.exception(timeout=10)


@pytest.fixture
def limiters() -> Iterator[Callable[..., TigerBeetleLimiter]]:
    """Makes limiters (one per worker); closes them all after the test."""
    made: list[TigerBeetleLimiter] = []

    def make(address: str, deadline: float = 2.0) -> TigerBeetleLimiter:
        limiter = TigerBeetleLimiter(address, deadline=deadline)
        made.append(limiter)
        return limiter

    yield make
    for limiter in made:
        shut(limiter)


@pytest.fixture
def store2(db_url: str) -> Iterator[jobq.Store]:
    """A second worker's Store on the same database."""
    second = jobq.Store(db_url)
    yield second
    second.dispose()


def enqueue(store: jobq.Store, queue: str, n: int, **options: Any) -> list[int]:
    return [store.enqueue("noop", {"i": i}, queue=queue, **options) for i in range(n)]


def capture(
    store: jobq.Store,
    limiter: TigerBeetleLimiter,
    n: int,
    *,
    lease: float | None = 30.0,
    worker: str = "w",
) -> list[jobq.Task]:
    """store.capture through ``limiter``, once any backoff on a full queue is over."""
    time.sleep(tbl.FULL_BACKOFF + 0.02)
    return store.capture(n, worker_id=worker, limiter=limiter, lease=lease)


def of(tasks: list[jobq.Task], queue: str) -> list[jobq.Task]:
    return [t for t in tasks if t.queue_id == queue]


def finish(store: jobq.Store, limiter: TigerBeetleLimiter, tasks: list[jobq.Task]) -> None:
    """End the runs (done), then give their slots back, as a worker does."""
    for task in tasks:
        assert store.set_status(task.id, task.attempt, Status.DONE)
    limiter.release([task.fence for task in tasks])


def running(store: jobq.Store, queue: str) -> int:
    """Runs of ``queue`` in progress with a live lease, as the database sees them."""
    return store.limit_usage().get(queue, (0, 0))[0]


def in_progress(store: jobq.Store, queue: str) -> int:
    return store.counts().get((queue, Status.IN_PROGRESS), 0)


def wait_for(condition: Callable[[], Any], seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.05)
    return value


def restart(server: Server) -> None:
    """Start ``server`` again if it was stopped (never a second one on its data file)."""
    if server.process is None:
        server.start()


def errors_naming(caplog: pytest.LogCaptureFixture, address: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "jobq.limits" and r.levelno == logging.ERROR and address in r.getMessage()
    ]


# --- concurrency ----------------------------------------------------------------------


def test_concurrency_holds_across_two_limiters_and_release_frees_slots(
    store: jobq.Store, store2: jobq.Store, tigerbeetle: Server, ledger: Ledger, limiters: Any
) -> None:
    store.set_limit("q", concurrency=3)
    enqueue(store, "q", 8)
    enqueue(store, "free", 2)
    a, b = limiters(tigerbeetle.address), limiters(tigerbeetle.address)

    first = capture(store, a, 2, worker="a")
    assert [t.queue_id for t in first] == ["q", "q"]
    second = capture(store2, b, 5, worker="b")
    # One slot was left; the unlimited queue is captured as usual, next to it.
    assert sorted(t.queue_id for t in second) == ["free", "free", "q"]
    assert of(capture(store, a, 5, worker="a"), "q") == []
    assert of(capture(store2, b, 5, worker="b"), "q") == []
    assert ledger.funding("slots", "q") == 3
    assert ledger.held("slots", "q") == 3 == running(store, "q") == in_progress(store, "q")

    finish(store, a, first[:1])
    assert ledger.held("slots", "q") == 2
    more = capture(store2, b, 5, worker="b")
    assert [t.queue_id for t in more] == ["q"]
    assert ledger.held("slots", "q") == 3 == in_progress(store, "q")
    assert capture(store, a, 5, worker="a") == []

    finish(store, a, first[1:])
    finish(store2, b, of(second, "q") + more)
    assert ledger.held("slots", "q") == 0
    assert in_progress(store, "q") == 0
    assert len(capture(store, a, 5, worker="a")) == 3
    assert ledger.funding("slots", "q") == 3  # releasing and capturing moved no funding


def _worker_process(url: str, address: str, seconds: float, start: Any, out: str) -> None:
    """A worker: capture 1..3 through a limiter of its own, end runs at random, record them.

    Each run's interval starts after its capture returned and ends before its slot is
    released: inside the time the slot was held.
    """
    store = jobq.Store(url)
    limiter = TigerBeetleLimiter(address)
    rng = random.Random()
    held: list[tuple[jobq.Task, float]] = []
    runs: list[tuple[float, float]] = []

    def end(task: jobq.Task, since: float) -> None:
        store.set_status(task.id, task.attempt, Status.DONE)
        runs.append((since, time.monotonic()))
        limiter.release([task.fence])

    start.wait()
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        got = store.capture(rng.randint(1, 3), worker_id=f"p{os.getpid()}", limiter=limiter)
        now = time.monotonic()
        held += [(task, now) for task in got]
        keep = []
        for task, since in held:
            if rng.random() < 0.4:
                end(task, since)
            else:
                keep.append((task, since))
        held = keep
        time.sleep(rng.uniform(0, 0.02))
    for task, since in held:
        end(task, since)
    limiter.close()
    store.dispose()
    Path(out).write_text(json.dumps(runs))


@SQLITE
def test_no_more_than_the_concurrency_run_at_once_across_worker_processes(
    store: jobq.Store, db_url: str, tigerbeetle: Server, ledger: Ledger, tmp_path: Path
) -> None:
    store.set_limit("q", concurrency=3)
    enqueue(store, "q", 400)
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    outs = [str(tmp_path / f"runs{i}.json") for i in range(2)]
    procs = [
        ctx.Process(target=_worker_process, args=(db_url, tigerbeetle.address, 3.0, start, out))
        for out in outs
    ]
    for proc in procs:
        proc.start()
    start.set()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    runs = [run for out in outs for run in json.loads(Path(out).read_text())]
    assert len(runs) >= 10, "the workers made hardly any progress"
    events = sorted([(t0, 1) for t0, _ in runs] + [(t1, -1) for _, t1 in runs])
    at_once = peak = 0
    for _, step in events:
        at_once += step
        peak = max(peak, at_once)
    assert peak <= 3
    assert ledger.held("slots", "q") == 0
    assert ledger.funding("slots", "q") == 3


@SQLITE
def test_unused_grants_are_voided(
    store: jobq.Store, tigerbeetle: Server, ledger: Ledger, limiters: Any
) -> None:
    store.set_limit("q", concurrency=5, rate="3/1m")
    enqueue(store, "q", 2)
    limiter = limiters(tigerbeetle.address)
    got = capture(store, limiter, 5)
    assert len(got) == 2
    assert ledger.held("slots", "q") == 2
    assert ledger.held("starts", "q") == 2  # the three starts not used came back too
    finish(store, limiter, got)
    assert ledger.held("slots", "q") == 0
    assert ledger.held("starts", "q") == 2  # a start is spent by its run: never voided

    # One start left: the slots linked to the starts refused are not taken either.
    enqueue(store, "q", 3)
    assert len(capture(store, limiter, 5)) == 1
    assert (ledger.held("slots", "q"), ledger.held("starts", "q")) == (1, 3)
    assert capture(store, limiter, 5) == []
    assert (ledger.held("slots", "q"), ledger.held("starts", "q")) == (1, 3)


# --- rate ------------------------------------------------------------------------------


def test_rate_allows_n_starts_per_period_across_limiters_and_they_come_back(
    store: jobq.Store, store2: jobq.Store, tigerbeetle: Server, ledger: Ledger, limiters: Any
) -> None:
    period, count = 1.0, 3
    store.set_limit("q", rate=f"{count}/1s")
    enqueue(store, "q", 100)
    pairs = [(store, limiters(tigerbeetle.address)), (store2, limiters(tigerbeetle.address))]

    # One capture at a time, alternating workers: the starts are in a known order, and
    # each took place (on TigerBeetle's clock) between its capture's before and after.
    starts: list[tuple[float, float]] = []
    began = time.monotonic()
    turn = 0
    while time.monotonic() - began < 3.5:
        worker_store, limiter = pairs[turn % 2]
        turn += 1
        before = time.monotonic()
        got = worker_store.capture(2, worker_id=f"w{turn % 2}", limiter=limiter, lease=30)
        after = time.monotonic()
        starts += [(before, after)] * len(got)
        finish(worker_store, limiter, got)
        time.sleep(0.02)

    assert starts, "no start at all"
    assert len(starts) >= 2 * count, "the starts did not come back after their period"
    # The (k+count)-th start waited until the k-th one's period was over.
    for k in range(len(starts) - count):
        assert starts[k + count][1] - starts[k][0] >= period - 0.05, (k, starts)
    # ... and came back not much later.
    assert starts[count][1] - starts[0][1] <= period + 3.0
    assert ledger.funding("starts", "q") == count
    assert ledger.held("starts", "q") <= count
    wait_for(lambda: ledger.held("starts", "q") == 0, 5, "every start expired")


# --- setting up, and changing the limit ----------------------------------------------------


@SQLITE
def test_a_second_limiter_initialising_the_same_queue_changes_no_funding(
    store: jobq.Store, store2: jobq.Store, tigerbeetle: Server, ledger: Ledger, limiters: Any
) -> None:
    store.set_limit("q", concurrency=3, rate="5/1m")
    enqueue(store, "q", 1)
    first = capture(store, limiters(tigerbeetle.address), 1)
    assert len(first) == 1
    posted = {
        kind: (ledger.account(kind, "q").credits_posted, ledger.account(kind, "q").debits_posted)
        for kind in ("slots", "starts")
    }
    assert ledger.funding("slots", "q") == 3
    assert ledger.funding("starts", "q") == 5

    # A fresh process state; then the same limit set again (a new generation, same values).
    assert capture(store2, limiters(tigerbeetle.address), 1) == []
    store.set_limit("q", concurrency=3, rate="5/1m")
    store2._limits_cache = None
    assert capture(store2, limiters(tigerbeetle.address), 1) == []
    for kind in ("slots", "starts"):
        account = ledger.account(kind, "q")
        assert (account.credits_posted, account.debits_posted) == posted[kind]
        assert len(ledger.funding_transfers(kind, "q")) == 1
    assert ledger.held("slots", "q") == 1  # the first run's slot, untouched

    # Another process derives the same account ids.
    code = (
        "from jobq.limits.tigerbeetle import account_id as a; "
        "print(a('slots', 'q'), a('starts', 'q'), a('operator'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert [int(i) for i in out] == [
        tbl.account_id("slots", "q"), tbl.account_id("starts", "q"), tbl.OPERATOR,
    ]  # fmt: skip
    assert len({tbl.account_id("slots", "q"), tbl.account_id("slots", "r")}) == 2


@SQLITE
def test_limiters_initialising_a_queue_at_once_fund_it_once(
    store: jobq.Store, tigerbeetle: Server, ledger: Ledger, limiters: Any
) -> None:
    store.set_limit("q", concurrency=4, rate="7/1m")
    fresh = [limiters(tigerbeetle.address) for _ in range(4)]
    barrier = threading.Barrier(len(fresh))
    failures: list[BaseException] = []

    def initialise(limiter: TigerBeetleLimiter) -> None:
        worker_store = jobq.Store(store.engine)
        try:
            barrier.wait()
            worker_store.capture(2, worker_id="w", limiter=limiter, lease=30)
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=initialise, args=(limiter,)) for limiter in fresh]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert failures == []
    assert ledger.funding("slots", "q") == 4
    assert ledger.funding("starts", "q") == 7
    assert len(ledger.funding_transfers("slots", "q")) == 1
    assert len(ledger.funding_transfers("starts", "q")) == 1


@SQLITE
def test_raising_the_concurrency_lets_more_run(
    store: jobq.Store, store2: jobq.Store, tigerbeetle: Server, ledger: Ledger, limiters: Any
) -> None:
    store.set_limit("q", concurrency=2)
    enqueue(store, "q", 6)
    a, b = limiters(tigerbeetle.address), limiters(tigerbeetle.address)
    assert len(capture(store, a, 5)) == 2
    assert capture(store2, b, 5) == []

    store.set_limit("q", concurrency=4)
    store2._limits_cache = None
    assert len(capture(store2, b, 5)) == 2
    assert capture(store, a, 5) == []
    assert ledger.funding("slots", "q") == 4
    assert ledger.held("slots", "q") == 4 == in_progress(store, "q")


@SQLITE
def test_lowering_while_every_slot_is_held_fails_no_run_and_lets_none_start(
    store: jobq.Store, tigerbeetle: Server, ledger: Ledger, limiters: Any
) -> None:
    store.set_limit("q", concurrency=3)
    enqueue(store, "q", 6)
    limiter = limiters(tigerbeetle.address)
    held = capture(store, limiter, 3)
    assert len(held) == 3

    store.set_limit("q", concurrency=1)
    assert capture(store, limiter, 5) == []
    # The running tasks keep their slots; the funding cannot drop below them yet.
    assert ledger.held("slots", "q") == 3
    assert ledger.funding("slots", "q") == 3
    assert all(store.get(t.id).status is Status.IN_PROGRESS for t in held)  # type: ignore[union-attr]

    finish(store, limiter, held[:1])
    assert capture(store, limiter, 5) == [], "a run started while 2 ran under a limit of 1"
    finish(store, limiter, held[1:2])
    assert capture(store, limiter, 5) == [], "a run started while 1 ran under a limit of 1"
    assert ledger.funding("slots", "q") == 1

    finish(store, limiter, held[2:])
    assert len(capture(store, limiter, 5)) == 1
    assert ledger.funding("slots", "q") == 1


@SQLITE
def test_lowering_takes_the_free_funds_at_once_and_the_rest_as_runs_end(
    store: jobq.Store, tigerbeetle: Server, ledger: Ledger, limiters: Any
) -> None:
    store.set_limit("q", concurrency=4)
    enqueue(store, "q", 6)
    limiter = limiters(tigerbeetle.address)
    held = capture(store, limiter, 2)
    assert len(held) == 2

    store.set_limit("q", concurrency=1)
    assert capture(store, limiter, 5) == []
    assert ledger.funding("slots", "q") == 2  # the two free slots, and no held one
    assert ledger.held("slots", "q") == 2

    finish(store, limiter, held[:1])
    assert capture(store, limiter, 5) == [], "a run started while 1 ran under a limit of 1"
    assert ledger.funding("slots", "q") == 1
    finish(store, limiter, held[1:])
    assert len(capture(store, limiter, 5)) == 1


# --- renewing slots ------------------------------------------------------------------------


@SQLITE
def test_renew_keeps_a_slot_past_its_lease_and_a_slot_not_renewed_expires(
    store: jobq.Store, store2: jobq.Store, tigerbeetle: Server, ledger: Ledger, limiters: Any
) -> None:
    store.set_limit("q", concurrency=1)
    enqueue(store, "q", 4)
    a, b = limiters(tigerbeetle.address), limiters(tigerbeetle.address)
    [task] = capture(store, a, 1, lease=1)
    began = time.monotonic()
    while time.monotonic() - began < 3.0:
        time.sleep(0.2)
        assert store.heartbeat("w", [task.fence], lease=1) == {task.id}
        a.renew([(task.fence, 1.0)])
        assert ledger.held("slots", "q") == 1  # swapped: never two, never none
    assert capture(store2, b, 1, lease=30) == []  # still held: past its first 1 s timeout
    finish(store, a, [task])
    assert ledger.held("slots", "q") == 0
    assert a.stats["slot_expired"] == 0
    assert a.stats["slot_lost"] == 0

    # Not renewed, a slot expires after its lease (the row's lease is renewed: it runs on,
    # slot or no slot); the queue is free for others again.
    [late] = capture(store, a, 1, lease=1)
    assert store.heartbeat("w", [late.fence], lease=60) == {late.id}
    wait_for(lambda: ledger.held("slots", "q") == 0, 6, "the slot expired")
    [other] = capture(store2, b, 1, lease=30)
    finish(store, a, [late])
    assert a.stats["slot_expired"] == 1
    finish(store2, b, [other])
    assert b.stats["slot_expired"] == 0


@SQLITE
def test_renewing_an_expired_slot_counts_it_lost(
    store: jobq.Store, tigerbeetle: Server, ledger: Ledger, limiters: Any
) -> None:
    store.set_limit("q", concurrency=1)
    enqueue(store, "q", 2)
    limiter = limiters(tigerbeetle.address)
    [task] = capture(store, limiter, 1, lease=1)
    wait_for(lambda: ledger.held("slots", "q") == 0, 6, "the slot expired")
    limiter.renew([(task.fence, 1.0)])
    assert limiter.stats["slot_lost"] == 1
    assert ledger.held("slots", "q") == 0  # the renewal took no slot
    finish(store, limiter, [task])
    assert ledger.held("slots", "q") == 0


@SQLITE
def test_without_a_lease_the_slot_lasts_the_rows_own_lease(
    store: jobq.Store, tigerbeetle: Server, ledger: Ledger, limiters: Any
) -> None:
    store.set_limit("q", concurrency=1)
    enqueue(store, "q", 1, lease=2)
    limiter = limiters(tigerbeetle.address)
    [task] = capture(store, limiter, 1, lease=None)
    assert task.lease == 2
    assert ledger.held("slots", "q") == 1
    # Asked for with DEFAULT_SLOT_SECONDS (30 s), swapped for one of the row's 2 s.
    wait_for(lambda: ledger.held("slots", "q") == 0, 8, "the slot expired with the row's lease")


# --- TigerBeetle gone ---------------------------------------------------------------------


@SQLITE
def test_a_stopped_server_fails_closed_and_capture_resumes_after_a_restart(
    store: jobq.Store,
    tigerbeetle: Server,
    ledger: Ledger,
    limiters: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="jobq.limits")
    store.set_limit("q", concurrency=2)
    enqueue(store, "q", 6)
    enqueue(store, "free", 3)
    limiter = limiters(tigerbeetle.address)
    held = capture(store, limiter, 1)
    assert [t.queue_id for t in held] == ["q"]
    limiter.deadline = 0.5  # the first call (the client's registration) may take longer

    tigerbeetle.stop()
    try:
        got = capture(store, limiter, 4)
        assert sorted(t.queue_id for t in got) == ["free"] * 3
        assert not limiter.available
        assert errors_naming(caplog, tigerbeetle.address), caplog.text
        assert "cluster 0" in errors_naming(caplog, tigerbeetle.address)[0]
        enqueue(store, "free", 1)
        before = time.monotonic()
        assert [t.queue_id for t in capture(store, limiter, 4)] == ["free"]
        assert time.monotonic() - before < 0.5 + tbl.FULL_BACKOFF  # no deadline waited
        finish(store, limiter, held)  # its slot is voided once TigerBeetle answers
        assert in_progress(store, "q") == 0
        assert any("freed later" in r.getMessage() for r in caplog.records), caplog.text
    finally:
        restart(tigerbeetle)

    resumed: list[jobq.Task] = []

    def some_captured() -> bool:
        resumed.extend(of(capture(store, limiter, 4), "q"))
        assert in_progress(store, "q") <= 2
        return bool(resumed)

    wait_for(some_captured, 30, "capture from q resumed")
    assert any("answers again" in r.getMessage() for r in caplog.records), caplog.text
    resumed += of(capture(store, limiter, 4), "q")
    resumed += of(capture(store, limiter, 4), "q")
    assert len(resumed) == 2 == in_progress(store, "q")  # no more than the limit ever ran
    limiter.release([])  # flushes what is left to void
    assert ledger.held("slots", "q") == 2
    assert ledger.funding("slots", "q") == 2


@SQLITE
def test_tasks_captured_just_before_tigerbeetle_stops_answering_are_not_lost(
    store: jobq.Store, tigerbeetle: Server, limiters: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows are in_progress for this worker: capture must hand them over."""
    store.set_limit("q", concurrency=5)
    limiter = limiters(tigerbeetle.address)
    assert capture(store, limiter, 5) == []  # accounts set up, client registered
    limiter.deadline = 0.5
    ids = enqueue(store, "q", 2)
    real = store.capture_from_limited_queue

    def then_the_server_stops(*args: Any, **kwargs: Any) -> list[jobq.Task]:
        tasks = real(*args, **kwargs)
        tigerbeetle.stop()  # before the three grants left over are voided
        return tasks

    monkeypatch.setattr(store, "capture_from_limited_queue", then_the_server_stops)
    try:
        got = capture(store, limiter, 5)
        rows = [store.get(i) for i in ids]
        assert all(row.status is Status.IN_PROGRESS for row in rows)  # type: ignore[union-attr]
        assert sorted(t.id for t in got) == ids, "captured rows were not handed to the worker"
    finally:
        restart(tigerbeetle)


@SQLITE
def test_a_renewal_answered_after_its_deadline_leaves_the_run_its_slot(
    store: jobq.Store, store2: jobq.Store, tigerbeetle: Server, ledger: Ledger, limiters: Any
) -> None:
    """The late renewal voided the old slot and took a new one: the run must keep it."""
    store.set_limit("q", concurrency=1)
    enqueue(store, "q", 2)
    a, b = limiters(tigerbeetle.address), limiters(tigerbeetle.address)
    [task] = capture(store, a, 1)
    a.deadline = 0.5
    tigerbeetle.stop()
    try:
        a.renew([(task.fence, 30.0)])  # misses its deadline; sent again after the restart
        assert not a.available
    finally:
        restart(tigerbeetle)
    wait_for(lambda: a.available, 30, "the renewal answered")
    a.release([])  # flushes whatever the limiter still has to void
    assert ledger.held("slots", "q") == 1, "the running task lost its slot"
    assert capture(store2, b, 1, worker="b") == [], "2 runs under a concurrency of 1"
    finish(store, a, [task])
    assert ledger.held("slots", "q") == 0


@SQLITE
def test_a_capture_wanting_more_than_one_tigerbeetle_batch_takes_up_to_the_limit(
    store: jobq.Store, tigerbeetle: Server, ledger: Ledger, limiters: Any
) -> None:
    """A slot and a start per grant: 5000 grants are 10000 transfers, past a batch's 8189."""
    store.set_limit("q", concurrency=3, rate="100/1m")
    enqueue(store, "q", 5)
    limiter = limiters(tigerbeetle.address)
    got = capture(store, limiter, 5000)
    assert len(got) == 3
    assert ledger.held("slots", "q") == 3


@SQLITE
def test_a_limiter_where_nothing_listens_fails_closed(
    store: jobq.Store, limiters: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="jobq.limits")
    address = f"127.0.0.1:{free_port()}"
    store.set_limit("q", concurrency=2)
    enqueue(store, "q", 2)
    enqueue(store, "free", 2)
    limiter = limiters(address, deadline=0.5)
    got = capture(store, limiter, 5)
    assert sorted(t.queue_id for t in got) == ["free", "free"]
    assert errors_naming(caplog, address)
    assert not limiter.available
    assert capture(store, limiter, 5) == []
    assert in_progress(store, "q") == 0


@pytest.mark.parametrize("address", ["not an address", "127.0.0.1:99999", "", "   "])
def test_an_invalid_address_is_an_invalid_option(address: str) -> None:
    with pytest.raises(InvalidOption, match="tigerbeetle-addresses"):
        TigerBeetleLimiter(address)


def test_an_invalid_cluster_is_an_invalid_option() -> None:
    with pytest.raises(InvalidOption, match="tigerbeetle-cluster"):
        TigerBeetleLimiter("127.0.0.1:3000", cluster=-1)


@SQLITE
def test_a_process_whose_tigerbeetle_is_gone_exits_after_closing_its_limiter(
    db_url: str, tmp_path: Path
) -> None:
    """A worker stopping while TigerBeetle is unreachable closes its limiter, then exits."""
    script = tmp_path / "worker.py"
    script.write_text(
        textwrap.dedent(f"""
        import jobq
        from jobq.limits.tigerbeetle import TigerBeetleLimiter

        store = jobq.Store({db_url!r})
        store.set_limit("q", concurrency=1)
        store.enqueue("noop", queue="q")
        limiter = TigerBeetleLimiter("127.0.0.1:{free_port()}", deadline=0.5)
        assert store.capture(1, worker_id="w", limiter=limiter) == []
        limiter.close()
        store.dispose()
        print("closed", flush=True)
        """)
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(
        [sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    ) as proc:
        assert proc.stdout is not None
        try:
            assert proc.stdout.readline() == b"closed\n"
            assert proc.wait(timeout=10) == 0
        except subprocess.TimeoutExpired:
            pytest.fail("the process did not exit within 10 s of closing its limiter")
        finally:
            proc.kill()


# --- limits cleared ---------------------------------------------------------------------


@SQLITE
def test_a_cleared_limit_lets_the_queue_capture_as_unlimited(
    store: jobq.Store, tigerbeetle: Server, ledger: Ledger, limiters: Any
) -> None:
    store.set_limit("q", concurrency=1)
    enqueue(store, "q", 5)
    limiter = limiters(tigerbeetle.address)
    first = capture(store, limiter, 5)
    assert len(first) == 1
    assert capture(store, limiter, 5) == []

    assert store.clear_limit("q")
    rest = capture(store, limiter, 5)
    assert [t.queue_id for t in rest] == ["q"] * 4
    assert ledger.held("slots", "q") == 1  # only the run captured under the limit
    finish(store, limiter, first + rest)
    assert ledger.held("slots", "q") == 0
