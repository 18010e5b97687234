"""The Runner's slots: ``concurrency`` runs at a time, sync and async alike; runs handed
over beyond that (captured ahead) wait in line, in order, and a run still in line never
starts once it is cancelled or released. Real threads and a real event loop, no database."""

from __future__ import annotations

import asyncio
import queue
import threading
from datetime import UTC, datetime

import pytest

from jobq import Status
from jobq.core.registry import TaskDefinition
from jobq.db.tasks import CANCEL_REQUESTED, Task
from jobq.worker import executor
from jobq.worker.ahead import AHEAD_PER_SLOT, AHEAD_SECONDS, RATE_WINDOW, CaptureAhead
from jobq.worker.executor import Outcome
from jobq.worker.runner import CANCELLED, Run, Runner

WAIT = 10.0  # s: a bound on waits for conditions, never reached when all is well

_gates: dict[int, threading.Event] = {}
_started: queue.SimpleQueue[int] = queue.SimpleQueue()


def held(n: int) -> int:
    """Runs until the test opens its gate."""
    _started.put(n)
    assert _gates[n].wait(WAIT)
    return n


async def held_async(n: int) -> int:
    _started.put(n)
    while not _gates[n].is_set():
        await asyncio.sleep(0.001)
    return n


HELD = TaskDefinition(name="held", func=held, timeout=60)
HELD_ASYNC = TaskDefinition(name="held_async", func=held_async, timeout=60)


def run_of(n: int, definition: TaskDefinition) -> Run:
    now = datetime.now(UTC)
    task = Task(
        n, "default", definition.name, {"n": n}, Status.IN_PROGRESS, 0, now, 0, 1, None,
        None, "test", now, None, None, None, None, False, now, now, None,
    )  # fmt: skip
    _gates[n] = threading.Event()
    return Run.of(task, definition)


class Ends:
    """The runner's finish callback: the outcomes, in the order they came."""

    def __init__(self) -> None:
        self.outcomes: queue.SimpleQueue[tuple[int, Outcome]] = queue.SimpleQueue()

    def __call__(self, run: Run, outcome: Outcome) -> None:
        self.outcomes.put((run.task.id, outcome))

    def next(self) -> tuple[int, Outcome]:
        return self.outcomes.get(timeout=WAIT)


def started(count: int) -> list[int]:
    return sorted(_started.get(timeout=WAIT) for _ in range(count))


def nothing_more_starts() -> bool:
    try:
        _started.get(timeout=0.2)
    except queue.Empty:
        return True
    return False


@pytest.fixture
def ends() -> Ends:
    while not _started.empty():
        _started.get()
    return Ends()


@pytest.mark.parametrize("definition", [HELD, HELD_ASYNC], ids=["sync", "async"])
def test_runs_beyond_the_slots_wait_in_line_and_start_in_order(
    ends: Ends, definition: TaskDefinition
) -> None:
    runner = Runner(2, ends)
    runs = [run_of(n, definition) for n in range(1, 7)]
    runner.start(runs)
    assert started(2) == [1, 2] and nothing_more_starts()
    assert runner.in_line == 4
    # A run waiting in line has no deadline yet: its timeout runs from its start.
    assert runs[2].deadline is None and runs[0].deadline is not None
    _gates[1].set()
    assert ends.next()[0] == 1
    assert started(1) == [3] and runs[2].deadline is not None and nothing_more_starts()
    for n in range(2, 7):
        _gates[n].set()
    assert sorted(ends.next()[0] for _ in range(5)) == [2, 3, 4, 5, 6]
    assert runner.in_line == 0
    runner.shutdown()


def test_sync_and_async_runs_share_the_slots(ends: Ends) -> None:
    runner = Runner(3, ends)
    runner.start([run_of(n, HELD if n % 2 else HELD_ASYNC) for n in range(11, 17)])
    assert len(started(3)) == 3 and nothing_more_starts()
    for n in range(11, 17):
        _gates[n].set()
    assert sorted(ends.next()[0] for _ in range(6)) == list(range(11, 17))
    runner.shutdown()


def test_a_run_cancelled_or_released_in_line_never_starts(ends: Ends) -> None:
    runner = Runner(1, ends)
    _first, released, cancelled, _last = runs = [run_of(n, HELD) for n in range(21, 25)]
    runner.start(runs)
    assert started(1) == [21]
    released.ended = True  # what Runs.release_unfinished and a lost lease do first
    runner.cancel(released)
    CANCEL_REQUESTED.add(cancelled.task.fence)  # what a cancel request does first
    try:
        runner.cancel(cancelled)
        assert ends.next() == (22, CANCELLED)
        assert ends.next() == (23, executor.CANCELLED_ON_REQUEST)
        assert runner.in_line == 1 and nothing_more_starts()
        _gates[21].set()
        assert ends.next()[0] == 21
        assert started(1) == [24]
        _gates[24].set()
        assert ends.next()[0] == 24
    finally:
        CANCEL_REQUESTED.discard(cancelled.task.fence)
    runner.shutdown()


def test_capture_ahead_follows_the_rate_at_which_runs_end() -> None:
    ahead = CaptureAhead(16, now=0.0)
    assert ahead.extra(0.0) == 0  # nothing measured yet: none ahead
    # Long runs (16 slots of 1 s, all ending at once): none is captured ahead.
    now = 0.0
    for tick in range(1, 101):
        now = tick * RATE_WINDOW
        ahead.ended(16 if tick % 10 == 0 else 0, now)
        assert ahead.extra(now) == 0
    # Short runs, 2,000 a second: as many ahead as end within AHEAD_SECONDS.
    for _ in range(50):
        now += RATE_WINDOW
        ahead.ended(200, now)
    assert int(2_000 * AHEAD_SECONDS) - 1 <= ahead.extra(now) <= int(2_000 * AHEAD_SECONDS) == 40
    # 50,000 a second: at most AHEAD_PER_SLOT a slot.
    for _ in range(50):
        now += RATE_WINDOW
        ahead.ended(5_000, now)
    assert ahead.extra(now) == AHEAD_PER_SLOT * 16
    # The runs stop ending (the next are long): within seconds, none ahead again.
    assert ahead.extra(now + 3.0) > 0
    assert ahead.extra(now + 6.0) == 0
