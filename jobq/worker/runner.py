"""Runner: where a worker's captured tasks execute. Never touches the database.

Sync tasks run on slot threads (started as needed, at most ``concurrency``), async tasks
on one event loop in a thread of its own. Each run's outcome goes to the callback given,
from whichever thread ran it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import queue
import threading
import time
from collections import Counter
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
    #: time.monotonic() when it was handed to the runner, and when its code returned.
    began: float = 0.0
    returned: float | None = None
    #: Its trace span (jobq.worker.run_spans), while tracing is on and it has not ended.
    span: Any = None
    #: The contextvars context its code runs in (its span current there), else None:
    #: the slot thread's own, or a copy of the worker's for an async run.
    context: contextvars.Context | None = None

    @classmethod
    def of(cls, task: Task, definition: TaskDefinition | None) -> Run:
        """A run of ``task``; with a timeout, it gets its deadline from now (an async one
        ASYNC_TIMEOUT_SLACK later)."""
        now = time.monotonic()
        deadline = None
        if definition is not None and definition.timeout is not None:
            deadline = now + definition.timeout
            if definition.is_async:
                deadline += ASYNC_TIMEOUT_SLACK
        return cls(task, definition, deadline, began=now)

    def seconds(self) -> float | None:
        """How long its code ran (from its hand-over), once it returned."""
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

    def start(self, runs: list[Run]) -> None:
        """Start ``runs`` (each of a registered task) on the slot threads and the loop."""
        coroutines = []
        for run in runs:
            assert run.definition is not None
            if run.definition.is_async:
                coroutines.append(run)
                continue
            self._inbox.put(run)
            if len(self._slot_threads) < self.concurrency:
                self._start_slot_thread()
        if coroutines:
            # One wake-up of the loop for the whole batch.
            self._event_loop().call_soon_threadsafe(self._start_coroutines, coroutines)

    def cancel(self, run: Run) -> None:
        """Stop an async run, or a sync one in a process pool (its child is killed; a
        sync thread cannot be stopped: it runs on, unheard)."""
        if run.definition is None:
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
            if run.ended:  # released or lost before it started
                self._finish(run, CANCELLED)
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
            self._finish(run, outcome)

    def _start_coroutines(self, runs: list[Run]) -> None:
        """On the event loop: start the async runs."""
        assert self._loop is not None
        for run in runs:
            if run.ended:
                self._finish(run, CANCELLED)
                continue
            assert run.definition is not None
            task = run.task
            coroutine = executor.run_async(run.definition, task.args, task.attempt, task=task)
            run.coroutine = self._loop.create_task(coroutine, context=run.context)
            run.coroutine.add_done_callback(functools.partial(self._coroutine_done, run))

    def _coroutine_done(self, run: Run, done: asyncio.Task[Outcome]) -> None:
        """On the loop: ``run``'s coroutine ``done`` is over; report its outcome."""
        self._finish(run, _outcome(done))

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="jobq-async", daemon=True).start()
            self._loop = loop
        return self._loop


def _outcome(done: asyncio.Task[Outcome]) -> Outcome:
    if done.cancelled():
        return CANCELLED
    error = done.exception()
    if error is not None:  # a BaseException the executor does not catch
        return Outcome(Status.FAILED, error=f"{type(error).__name__}: {error}")
    return done.result()
