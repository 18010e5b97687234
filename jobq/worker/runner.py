"""Runner: where a worker's captured tasks execute. Never touches the database.

Sync tasks run on slot threads (started as needed, at most ``concurrency``), async tasks
on one event loop in a thread of its own; ``concurrency`` runs at a time in all. Runs
handed over beyond that (captured ahead, jobq.worker.ahead) wait in line, and the run
that ends hands its slot to the next at once, from whichever thread ran it, without a
round trip through the worker's loop. Each run's outcome goes to the callback given.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from jobq.core.registry import TaskDefinition
from jobq.db.tasks import Status, Task
from jobq.worker import executor
from jobq.worker.executor import Outcome

#: The outcome of a run stopped before it ended, or before it started.
CANCELLED = Outcome(Status.FAILED, error="cancelled")
#: Seconds past its timeout before the worker itself counts an async run timed out: its
#: own asyncio.timeout, which starts a moment after the capture on the event loop's thread,
#: ends it first; the worker's check is for a loop blocked past it, and must not race it.
ASYNC_TIMEOUT_SLACK = 1.0


@dataclass
class Run:
    """A captured task a worker is running."""

    task: Task
    definition: TaskDefinition | None
    #: time.monotonic() after which the run counts as timed out.
    deadline: float | None
    #: Its end is settled (recorded, timed out, released or lost); a sync thread may still
    #: be running, and its late outcome is dropped.
    ended: bool = False
    #: Its code has returned, or will never start: its thread or coroutine is free.
    finished: bool = False
    #: An async run's task on the event loop, once the loop has started it.
    coroutine: asyncio.Task[Outcome] | None = None
    #: It ran past its deadline and still runs: it keeps its row, lease, lock key and limit
    #: slot until its code returns, and then ends timed out.
    timed_out: bool = False
    #: Its process was killed to stop it (jobq.pool: past its timeout, cancelled, ended).
    killed: bool = False
    #: time.monotonic() when it got a slot (until then, when it was handed to the runner),
    #: and when its code returned.
    began: float = 0.0
    returned: float | None = None
    #: Its trace span (jobq.worker.run_spans), while tracing is on and it has not ended.
    span: Any = None
    #: The contextvars context its code runs in (its span current there), else None:
    #: the slot thread's own, or a copy of the worker's for an async run.
    context: contextvars.Context | None = None

    @classmethod
    def of(cls, task: Task, definition: TaskDefinition | None) -> Run:
        """A run of ``task``, not started yet (its deadline is set when it starts)."""
        return cls(task, definition, None, began=time.monotonic())

    def starts(self) -> None:
        """It gets a slot now: its time and, with a timeout, its deadline run from now (an
        async one's ASYNC_TIMEOUT_SLACK later)."""
        self.began = now = time.monotonic()
        definition = self.definition
        if definition is not None and definition.timeout is not None:
            self.deadline = now + definition.timeout
            if definition.is_async:
                self.deadline += ASYNC_TIMEOUT_SLACK

    def seconds(self) -> float | None:
        """How long its code ran (from its start), once it returned."""
        return None if self.returned is None else self.returned - self.began


class Slot(Protocol):
    """A slot thread's own place to run sync tasks (jobq.pool's child process)."""

    def run(self, run: Run) -> Outcome:
        """Run ``run`` there, to its outcome."""
        ...


class Pool(Protocol):
    """Where sync runs execute when not on the slot threads: a jobq.pool.ProcessPool,
    which the command line plugs in (jobq worker --pool processes)."""

    #: What befell its child processes: children_died, children_recycled, ...
    stats: Counter[str]

    def slot(self) -> Slot:
        """A place of its own for one slot thread."""
        ...

    def stop(self, run: Run) -> None:
        """Stop ``run``, running in one of the pool's slots."""
        ...

    def close(self) -> None:
        """Retire every child."""
        ...


class Runner:
    """Runs registered tasks ``concurrency`` sync ones at a time, and async ones on a loop."""

    def __init__(
        self,
        concurrency: int,
        finish: Callable[[Run, Outcome], None],
        pool: Pool | None = None,
    ) -> None:
        self.concurrency = concurrency
        self._finish = finish
        #: Where sync runs execute: None, on the slot threads themselves; a ProcessPool,
        #: in a child process per slot thread (jobq worker --pool processes).
        self.pool = pool
        # Sync runs wait here for one of the slot threads (started on first use).
        self._inbox: queue.SimpleQueue[Run | None] = queue.SimpleQueue()
        self._slot_threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        # Runs handed over while every slot was taken, in order; and how many runs hold a
        # slot (started, their code not yet returned). Both under _slots.
        self._slots = threading.Lock()
        self._in_line: deque[Run] = deque()
        self._holding = 0

    @property
    def in_line(self) -> int:
        """Runs handed over that wait for a slot."""
        return len(self._in_line)

    def start(self, runs: list[Run]) -> None:
        """Start ``runs`` (each of a registered task) on the slot threads and the loop, as
        many as slots are free; the others start, in order, as slots come free."""
        with self._slots:
            self._in_line.extend(runs)
            ready = self._take_slots()
        self._dispatch(ready)

    def waiting_since(self, since: float) -> list[Run]:
        """Take out of the line, never to start, the runs handed over before ``since``
        (time.monotonic()) that still wait for a slot."""
        taken = []
        with self._slots:
            while self._in_line and self._in_line[0].began < since:
                taken.append(self._in_line.popleft())
        return taken

    def _take_slots(self) -> list[Run]:
        """Under _slots: the runs in line that free slots take now."""
        ready = []
        while self._in_line and self._holding < self.concurrency:
            ready.append(self._in_line.popleft())
            self._holding += 1
        return ready

    def _dispatch(self, runs: list[Run]) -> None:
        """Start ``runs``, each holding a slot, on the slot threads and the event loop."""
        coroutines = []
        for run in runs:
            assert run.definition is not None
            run.starts()
            if run.definition.is_async:
                coroutines.append(run)
                continue
            self._inbox.put(run)
            if len(self._slot_threads) < self.concurrency:
                self._start_slot_thread()
        if coroutines:
            # One wake-up of the loop for the whole batch.
            self._event_loop().call_soon_threadsafe(self._start_coroutines, coroutines)

    def _ended(self, run: Run, outcome: Outcome) -> None:
        """From the thread that ran it: ``run`` is over; its slot goes to the next in line."""
        with self._slots:
            self._holding -= 1
            ready = self._take_slots()
        self._finish(run, outcome)
        self._dispatch(ready)

    def cancel(self, run: Run) -> None:
        """Stop an async run, or a sync one in a process pool (its child is killed; a
        sync thread cannot be stopped: it runs on, unheard). A run still in line never
        starts: it ends at once (cancelled on request, if that is why)."""
        if run.definition is None:
            return
        with self._slots:
            waiting = any(queued is run for queued in self._in_line)
            if waiting:
                self._in_line = deque(queued for queued in self._in_line if queued is not run)
        if waiting:  # it never starts: no slot was taken
            self._finish(run, _not_started(run) or CANCELLED)
            return
        if run.definition.is_async:
            if self._loop is not None:
                self._loop.call_soon_threadsafe(lambda: run.coroutine and run.coroutine.cancel())
        elif self.pool is not None:
            self.pool.stop(run)

    def shutdown(self) -> None:
        """Let the slot threads and the event loop end once their current runs do; a
        process pool's children are retired now."""
        for _ in self._slot_threads:
            self._inbox.put(None)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self.pool is not None:
            self.pool.close()

    def _start_slot_thread(self) -> None:
        thread = threading.Thread(
            target=self._run_sync_tasks, args=(self.pool and self.pool.slot(),),
            name=f"jobq-task-{len(self._slot_threads)}", daemon=True,
        )  # fmt: skip
        thread.start()
        self._slot_threads.append(thread)

    def _run_sync_tasks(self, slot: Slot | None) -> None:
        """A slot thread: run sync tasks from the inbox until told to stop (None); in
        ``slot``'s child process if given."""
        while (run := self._inbox.get()) is not None:
            if (outcome := _not_started(run)) is not None:
                self._ended(run, outcome)
                continue
            assert run.definition is not None
            task = run.task
            try:
                if slot is not None:
                    outcome = slot.run(run)
                elif run.context is None:
                    outcome = executor.run_sync(run.definition, task.args, task.attempt, task=task)
                else:
                    outcome = run.context.run(
                        executor.run_sync, run.definition, task.args, task.attempt, task=task
                    )
            except BaseException as error:  # SystemExit, say: the slot must live on
                seconds = time.monotonic() - run.began
                outcome = executor.escaped(run.definition, task.attempt, task, error, seconds)
            self._ended(run, outcome)

    def _start_coroutines(self, runs: list[Run]) -> None:
        """On the event loop: start the async runs."""
        assert self._loop is not None
        for run in runs:
            if (outcome := _not_started(run)) is not None:
                self._ended(run, outcome)
                continue
            assert run.definition is not None
            task = run.task
            coroutine = executor.run_async(run.definition, task.args, task.attempt, task=task)
            run.coroutine = self._loop.create_task(coroutine, context=run.context)
            run.coroutine.add_done_callback(functools.partial(self._coroutine_done, run))

    def _coroutine_done(self, run: Run, done: asyncio.Task[Outcome]) -> None:
        """On the loop: ``run``'s coroutine ``done`` is over; report its outcome."""
        self._ended(run, _outcome(done))

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="jobq-async", daemon=True).start()
            self._loop = loop
        return self._loop


def _not_started(run: Run) -> Outcome | None:
    """Why ``run``, given a slot, must not start after all: released or lost before it
    started, or its cancel asked for meanwhile; None: it starts."""
    if run.ended:
        return CANCELLED
    if run.task.cancel_requested:
        return executor.CANCELLED_ON_REQUEST
    return None


def _outcome(done: asyncio.Task[Outcome]) -> Outcome:
    if done.cancelled():
        return CANCELLED
    error = done.exception()
    if error is not None:  # a BaseException the executor does not catch
        return Outcome(Status.FAILED, error=f"{type(error).__name__}: {error}")
    return done.result()
