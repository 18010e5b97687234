"""Per-queue limits with real `jobq worker` processes, under both limiters.

The app is tests/apps/limited.py: every run records its start and end (wall clock) and
its capture time (the row's started_at, by the database's clock) in a side table, so
the tests measure what actually ran at once, and when runs started. Every test runs with
`--limiter sql` and `--limiter tigerbeetle` (a fresh real TigerBeetle server), on every
database.

Overlap is measured on the recorded [start, end) intervals, which lie inside the runs'
real ones (capture to recorded end): it can only understate how many held a slot.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import jobq
from jobq import Status
from tests.acceptance.test_cli import Cli
from tests.acceptance.test_worker_processes import wait_until
from tests.apps import limited
from tests.worker_processes import ROOT, Worker, Workers

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sql", "tigerbeetle"])
def limiter(request: pytest.FixtureRequest) -> list[str]:
    """The worker options selecting the limiter under test."""
    if request.param == "sql":
        return ["--limiter", "sql"]
    server = request.getfixturevalue("tigerbeetle")
    return [
        "--limiter", "tigerbeetle", "--tigerbeetle-addresses", server.address,
        "--tigerbeetle-cluster", "0",
    ]  # fmt: skip


@pytest.fixture
def store(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[jobq.Store]:
    """A Store on ``db_url`` (the app's too), with an empty runs table beside it."""
    monkeypatch.setenv("JOBQ_DATABASE_URL", db_url)
    limited.app.store = store = jobq.Store(db_url)
    limited.LOG.empty()
    yield store
    store.dispose()
    limited.LOG.dispose()


class LimitedWorkers(Workers):
    """Workers on the limited app with the test's limiter; ``hang`` makes its runs hang."""

    def __init__(self, db_url: str, limiter: list[str], directory: Path) -> None:
        super().__init__(
            "tests.apps.limited:app", db_url, directory, ["--log-level", "warning", *limiter]
        )

    def start(self, *options: str, hang: bool = False) -> Worker:  # type: ignore[override]
        return super().start(*options, env={"JOBQ_TEST_LIMITED_HANG": "1" if hang else None})


@pytest.fixture
def workers(db_url: str, limiter: list[str], tmp_path: Path) -> Iterator[LimitedWorkers]:
    started = LimitedWorkers(db_url, limiter, tmp_path)
    yield started
    started.kill_all()


def stop(*workers: Worker) -> None:
    """SIGTERM the workers, asserting each exits cleanly; dump stacks of any that hang."""
    for started in workers:
        started.process.send_signal(signal.SIGTERM)
    for started in workers:
        try:
            started.process.wait(timeout=45)
        except subprocess.TimeoutExpired:
            started.process.send_signal(signal.SIGABRT)  # faulthandler prints every stack
            started.process.wait(timeout=30)
            raise AssertionError(
                f"worker still running 45 s after SIGTERM:\n{started.stderr()}"
            ) from None
        stderr = started.stderr()
        assert started.process.returncode == 0, stderr
        assert "Traceback" not in stderr, stderr


def runs(queue: str | None = None) -> list[dict[str, Any]]:
    """The recorded runs (of ``queue``), in start order; ``captured`` in epoch seconds."""
    stmt = sa.select(limited.RUNS).order_by(limited.RUNS.c.started)
    if queue is not None:
        stmt = stmt.where(limited.RUNS.c.queue == queue)
    with limited.runs_engine().connect() as conn:
        found = [dict(row._mapping) for row in conn.execute(stmt)]
    for run in found:
        captured = jobq.db.tasks.as_utc(run["captured"])
        assert captured is not None
        run["captured"] = captured.timestamp()
    return found


def finished(queue: str | None = None) -> int:
    return sum(1 for run in runs(queue) if run["finished"] is not None)


Interval = tuple[float, float]


def intervals(recorded: Sequence[dict[str, Any]], unfinished_end: float = 1e18) -> list[Interval]:
    """[start, end) of each run; a run with no end lasts until ``unfinished_end``."""
    return [
        (run["started"], run["finished"] if run["finished"] is not None else unfinished_end)
        for run in recorded
    ]


def overlap(spans: Sequence[Interval], since: float = -1e18, until: float = 1e18) -> int:
    """The most intervals that share an instant in [since, until)."""
    instants = [since] + [start for start, _ in spans if since <= start < until]
    return max(sum(1 for start, end in spans if start <= t < end) for t in instants)


def most_in_window(times: Sequence[float], width: float) -> int:
    """The most of ``times`` inside one half-open window [t, t + width)."""
    return max(sum(1 for u in times if t <= u < t + width) for t in times)


def relative(times: Sequence[float]) -> str:
    """``times`` as seconds after the first, for a failure's message."""
    return " ".join(f"{t - times[0]:.3f}" for t in times)


def assert_each_ran_once(store: jobq.Store, ids: Sequence[int], recorded: list[dict]) -> None:
    """Every task is done, and ran to its end exactly once."""
    ends = Counter(run["task_id"] for run in recorded if run["finished"] is not None)
    assert set(ends) == set(ids), sorted(set(ids) ^ set(ends))
    assert max(ends.values()) == 1, ends.most_common(3)
    for task_id in ids:
        task = store.get(task_id)
        assert task is not None and task.status is Status.DONE, task


@pytest.mark.timeout(150)
def test_concurrency_limit_holds_across_four_workers(
    store: jobq.Store, workers: LimitedWorkers
) -> None:
    """Limit 3, 60 tasks of 0.2 s, 4 workers of 2 slots: never more than 3 at once, and 3
    at times (so a broken limit would show), and every task runs once. Two slots a worker:
    3 at once takes two workers, so the limit is shared (with 8 slots one worker could
    hold all 3, and on a loaded machine it did: the worker whose run ends captures again
    before the others' next poll)."""
    store.set_limit("limited", concurrency=3)
    started = [workers.start("--concurrency", "2") for _ in range(4)]
    try:
        # All four first: on a loaded machine the first to start drained the 4 s of work
        # alone before the others were up.
        wait_until(lambda: len(store.live_workers()) == 4, timeout=60)
        ids = limited.work.enqueue_many([{"seconds": 0.2}] * 60)
        wait_until(lambda: finished() == 60, timeout=90)
    finally:
        stop(*started)
    recorded = runs()
    assert_each_ran_once(store, ids, recorded)
    assert all(run["attempt"] == 1 for run in recorded), recorded
    assert overlap(intervals(recorded)) == 3
    assert len({run["pid"] for run in recorded}) > 1  # the limit is shared, not per worker


@pytest.mark.timeout(150)
def test_slots_of_a_killed_worker_come_back_when_its_leases_expire(
    store: jobq.Store, workers: LimitedWorkers
) -> None:
    """kill -9 a worker holding both slots of a queue limited to 2 (lease 2 s): another
    worker, already polling, starts nothing until the leases run out, then drains it."""
    store.set_limit("limited", concurrency=2)
    lease = limited.short_lease.definition.lease
    ids = limited.short_lease.enqueue_many([{"seconds": 0.3}] * 6)
    hanging = workers.start("--concurrency", "8", hang=True)
    wait_until(lambda: len(runs()) >= 2, timeout=60)
    healthy = workers.start("--concurrency", "8")
    try:
        wait_until(lambda: len(store.live_workers()) == 2, timeout=60)
        time.sleep(1.0)  # the healthy worker polls the full queue meanwhile
        assert len(runs()) == 2, runs()  # the hanging worker took no more than its slots
        killed_at = time.time()
        hanging.process.kill()
        hanging.process.wait(timeout=30)
        wait_until(lambda: finished() == 6, timeout=60)
    finally:
        stop(healthy)
    recorded = runs()
    killed = [run for run in recorded if run["pid"] == hanging.process.pid]
    later = [run for run in recorded if run["pid"] != hanging.process.pid]
    assert len(killed) == 2 and all(run["finished"] is None for run in killed), killed
    assert_each_ran_once(store, ids, recorded)
    # The killed runs ran again, as second attempts, once their leases expired.
    assert sorted(run["attempt"] for run in later) == [1] * 4 + [2] * 2, later
    # The slots stayed taken until the leases expired: the lease after the last heartbeat
    # (every lease/3), so 1.3 to 2 s after the kill. Measured; the bound is loose.
    first_later = min(run["started"] for run in later)
    print(f"first start after the kill: {first_later - killed_at:.2f} s (lease {lease:g} s)")
    assert first_later - killed_at >= lease * 2 / 3 - 0.2, (first_later - killed_at, recorded)
    # Counting the killed runs until the kill, never more than 2 at once, and 2 at times.
    assert overlap(intervals(recorded, unfinished_end=killed_at)) == 2
    assert overlap(intervals(later)) == 2


@pytest.mark.timeout(150)
def test_rate_limit_spaces_starts_across_three_workers(
    store: jobq.Store, workers: LimitedWorkers
) -> None:
    """Rate 10/2s, 40 quick tasks, 3 workers: no 2 s window holds more than 10 captures
    (by the database's clock), and the queue drains at that rate, no faster."""
    store.set_limit("limited", rate="10/2s")
    ids = limited.work.enqueue_many([{"seconds": 0.05}] * 40)
    started = [workers.start("--concurrency", "8") for _ in range(3)]
    try:
        wait_until(lambda: finished() == 40, timeout=90)
    finally:
        stop(*started)
    recorded = runs()
    assert_each_ran_once(store, ids, recorded)
    # Captured by the database's clock (this host's), then the code started soon after.
    assert all(-0.5 < run["started"] - run["captured"] < 5.0 for run in recorded), recorded
    captured = sorted(run["captured"] for run in recorded)
    assert most_in_window(captured, 2.0) == 10, f"captured at {relative(captured)}"
    # The code starts a little after capture, each by its own delay (0.3 s apart, seen on
    # a busy machine): windows of wall-clock starts are shorter by the spread of delays.
    lags = [run["started"] - run["captured"] for run in recorded]
    window = max(2.0 - (max(lags) - min(lags)), 0.5)
    wall = sorted(run["started"] for run in recorded)
    assert most_in_window(wall, window) <= 10, f"started at {relative(wall)} ({window:.2f} s)"
    # 40 starts at 10 per 2 s: at least 3 periods from the first to the last (a
    # consequence of the windows, checked on its own), and not much more.
    print(f"40 starts over {captured[-1] - captured[0]:.2f} s (database clock)")
    assert 6.0 <= captured[-1] - captured[0] <= 20.0, captured
    assert wall[-1] - wall[0] >= 5.8, wall


@pytest.mark.timeout(150)
def test_changing_a_limit_applies_to_running_workers(
    store: jobq.Store, workers: LimitedWorkers
) -> None:
    """Concurrency 1, raised to 4 (`jobq limits set`) then lowered to 1 (Store.set_limit)
    while 3 workers run: each change applies without a restart, a lowering as runs end."""
    store.set_limit("limited", concurrency=1)
    limited.work.enqueue_many([{"seconds": 0.5}] * 100)
    started = [workers.start("--concurrency", "4") for _ in range(3)]
    try:
        wait_until(lambda: len(runs()) >= 1, timeout=60)
        time.sleep(2.5)
        raised = time.time()
        cli = subprocess.run(
            [sys.executable, "-m", "jobq.cli", "limits", "set", "limited", "--concurrency", "4"],
            env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, capture_output=True,
            text=True, timeout=60,
        )  # fmt: skip
        assert cli.returncode == 0, cli.stderr
        deadline = time.monotonic() + 30  # (if it never gets there, the profile says so)
        while overlap(intervals(runs()), since=raised) < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)
        lowered = time.time()
        store.set_limit("limited", concurrency=1)
        # Workers see it within a second; the runs already going end within 0.5 s.
        settled = lowered + 1.0 + 0.5 + 1.5
        time.sleep(settled - lowered + 3.0)
        ended = time.time()
    finally:
        stop(*started)
    spans = intervals(runs())
    profile = {
        "before raise": overlap(spans, until=raised),
        "raised": overlap(spans, since=raised, until=lowered),
        "lowering": overlap(spans, since=lowered, until=settled),
        "lowered": overlap(spans, since=settled, until=ended),
    }
    print(f"most runs at once: {profile}")
    assert (profile["before raise"], profile["raised"], profile["lowered"]) == (1, 4, 1), profile
    assert profile["lowering"] <= 4, profile


@pytest.mark.timeout(150)
def test_a_full_limited_queue_does_not_hold_back_an_unlimited_one(
    store: jobq.Store, workers: LimitedWorkers
) -> None:
    """Limit 1 on a queue of 1 s tasks: the same workers run another queue's tasks at once,
    long before the limited queue drains."""
    limited.app.set_limit("limited", concurrency=1)
    limited.work.enqueue_many([{"seconds": 1.0}] * 8)
    free_ids = limited.free.enqueue_many([{"seconds": 0.1}] * 20)
    started = [workers.start("--concurrency", "4") for _ in range(2)]
    try:
        wait_until(lambda: finished("free") == 20, timeout=60)
        slow_started = len(runs("limited"))
    finally:
        stop(*started)
    free = runs("free")
    assert_each_ran_once(store, free_ids, free)
    # Done while the limited queue, 1 s per task, had barely begun (8 s to drain it).
    assert slow_started <= 5, runs("limited")
    assert max(run["finished"] for run in free) - min(run["started"] for run in free) < 5.0
    assert overlap(intervals(runs("limited"))) == 1


@pytest.mark.timeout(150)
@pytest.mark.parametrize("limited_too", [False, True], ids=["unlimited", "limited"])
def test_pausing_a_queue_stops_every_worker_taking_from_it_within_a_second(
    store: jobq.Store, workers: LimitedWorkers, db_url: str, tmp_path: Path, limited_too: bool
) -> None:
    """Two workers drain queues ``paused`` (limited or not) and ``other``; `jobq queues
    pause paused` stops both workers capturing from it within a second by the database's
    clock, while its running tasks end done and ``other`` drains on, and tasks enqueued
    to it meanwhile wait; `jobq queues list` and `jobq why` say so; resumed, it drains,
    every task run once."""
    if limited_too:
        store.set_limit("paused", concurrency=3)
    # Work still waiting when the pause lands: 36-52 of 150 had run by then on 8 slots,
    # 17-18 of 60 at the limit of 3 (measured). 40 at the limit leaves about as many
    # waiting as run; more only lengthens the drain after the resume, at ~7 tasks a second.
    paused_count = 40 if limited_too else 150
    paused_ids = limited.free.enqueue_many([{"seconds": 0.1}] * paused_count, _queue="paused")
    other_ids = limited.free.enqueue_many([{"seconds": 0.1}] * 60, _queue="other")
    started = [workers.start("--concurrency", "4") for _ in range(2)]
    cli = Cli(tmp_path)
    try:
        wait_until(lambda: len(runs("paused")) >= 6, timeout=60)
        paused = cli(db_url, "queues", "pause", "paused")
        assert (paused.returncode, paused.stdout) == (0, "queue 'paused' paused\n"), paused
        with store.engine.connect() as conn:
            paused_at = conn.execute(sa.select(store.dialect.now())).scalar_one()
        paused_at = jobq.db.tasks.as_utc(paused_at).timestamp()
        # Tasks enqueued after the pause wait too: on a loaded machine the CLI may start so
        # slowly that the queue drained before it paused, and nothing would be left waiting.
        paused_ids += limited.free.enqueue_many([{"seconds": 0.1}] * 20, _queue="paused")
        wait_until(lambda: finished("other") == len(other_ids), timeout=60)
        # Every run of the paused queue captured before the pause has ended by now.
        wait_until(lambda: all(run["finished"] for run in runs("paused")), timeout=30)
        before = runs("paused")
        late = [run for run in before if run["captured"] > paused_at + 1.0]
        assert late == [], (paused_at, late)
        left = [store.get(task_id) for task_id in paused_ids]
        waiting = [task for task in left if task.status is Status.QUEUED]
        assert waiting and all(task.attempt == 0 for task in waiting)
        ran = [task for task in left if task.status is not Status.QUEUED]
        assert {task.status for task in ran} == {Status.DONE}  # nothing released
        assert all(task.attempt == 1 for task in ran)

        listed = {q["queue"]: q for q in json.loads(cli(db_url, "queues", "list", "--json").stdout)}
        assert listed["paused"]["paused"] is True and listed["other"]["paused"] is False
        assert listed["paused"]["counts"]["queued"] == len(waiting)
        assert listed["paused"]["counts"]["done"] == len(ran)
        assert len(listed["paused"]["workers"]) == 2
        assert (listed["paused"]["limit"] is not None) is limited_too
        why = json.loads(cli(db_url, "why", str(waiting[0].id), "--json").stdout)
        assert why["reason"] == "queue_paused", why

        store.resume_queue("paused")
        wait_until(lambda: finished("paused") == len(paused_ids), timeout=90)
    finally:
        stop(*started)
    assert_each_ran_once(store, paused_ids + other_ids, runs())
