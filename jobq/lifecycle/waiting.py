"""How a waiter hears that a task ended: a notification on PostgreSQL, else polling its row.

Each TaskStore has one EndWatcher (watcher_for), made when a handle first waits. Where the
database can notify (Dialect.listen_for_ends), the watcher starts one thread with one
connection listening for the ends of awaited tasks, shared by every waiter of the TaskStore,
and wakes the waiters of each id it hears of. A waiter then never polls:

1. it registers with the watcher, so that no notification of its id is dropped;
2. it marks its row awaited (one UPDATE, only if the row is not awaited already), so that
   the row's end is notified; an end committed before that is seen by step 3;
3. once the watcher listens, it reads the row: terminal, done; else it waits to be woken
   and reads it again. A notification sent while the watcher was not listening is lost,
   so each time the watcher listens again it wakes every waiter to read its row.

Elsewhere (SQLite, MySQL / MariaDB) a waiter reads its row after 5 ms, 10 ms, 20 ms...
(at most 200 ms apart). The sync waiter blocks its thread; the async one never blocks the
event loop: it reads in a thread (asyncio.to_thread, a few milliseconds each) and waits on
an asyncio.Event that the watcher's thread sets with loop.call_soon_threadsafe.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import sqlalchemy as sa

from jobq.db.errors import ResultTimeout, TaskNotFound
from jobq.db.outage import Outage
from jobq.db.patience import Deadline, patiently
from jobq.db.tasks import Status, Task
from jobq.dialects.schema import tasks

if TYPE_CHECKING:
    from jobq.core.store import TaskStore

c = tasks.c

#: Seconds before a polling waiter's second read of its row; each pause doubles...
POLL_FIRST = 0.005
#: ...up to this many seconds.
POLL_MAX = 0.2

#: The statuses a task ends in, once its finished_at is set.
ENDED = frozenset({Status.DONE, Status.FAILED, Status.CANCELLED})


def is_terminal(task: Task) -> bool:
    """Whether ``task`` has ended for good: done, failed with no retry left, or cancelled."""
    # A failed row with retries left has no finished_at: it runs again.
    return task.finished_at is not None and task.status in ENDED


class Waiter:
    """One caller waiting for the end of task ``task_id``; woken from any thread.

    A sync waiter waits on a threading.Event; an async one (``loop`` given) on an
    asyncio.Event of that loop, set from other threads with loop.call_soon_threadsafe.
    """

    def __init__(self, task_id: int, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.task_id = task_id
        #: How many times this waiter read its row.
        self.reads = 0
        self._loop = loop
        self._event: threading.Event | asyncio.Event = (
            threading.Event() if loop is None else asyncio.Event()
        )

    def wake(self) -> None:
        """Make the waiter read its row again (safe from any thread)."""
        if self._loop is None:
            self._event.set()
            return
        with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits any more
            self._loop.call_soon_threadsafe(self._event.set)

    def clear(self) -> None:
        """Forget earlier wakes: called before each read, so a wake during it is kept."""
        self._event.clear()  # an asyncio.Event: only ever from its loop's thread

    def wait(self, timeout: float | None) -> bool:
        """Block until woken (True) or ``timeout`` seconds pass (False); sync waiters."""
        assert isinstance(self._event, threading.Event)
        return self._event.wait(timeout)

    async def wait_async(self, timeout: float | None) -> bool:
        """Wait in the loop until woken (True) or ``timeout`` seconds pass (False)."""
        assert isinstance(self._event, asyncio.Event)
        try:
            async with asyncio.timeout(timeout):
                await self._event.wait()
        except TimeoutError:
            return False
        return True


class EndWatcher:
    """The waiters of one TaskStore, and (where the database notifies) the one listening
    thread that wakes them. Made by watcher_for; holds the TaskStore's engine, not the TaskStore."""

    def __init__(self, store: TaskStore) -> None:
        self._engine = store.engine
        self._dialect = store.dialect
        self._lock = threading.Lock()
        self._waiters: dict[int, set[Waiter]] = {}
        self._stop = threading.Event()
        #: None until the first wait; then whether the database notifies (else: polling).
        self.notifies: bool | None = None
        #: Whether the listening connection has been made (once is enough: each time it
        #: is made again, every waiter is woken to read its row).
        self.listening = False
        #: Rows read by this TaskStore's waiters: a test proves with it that they do not poll.
        self.reads = 0
        #: Wakes of all waiters at once: each time the listening connection was (re)made.
        self.wake_alls = 0
        # Its own account of outages: the listening thread logs one line each way.
        self._outage = _ScrubbedOutage(store.db.unavailable)

    def start(self) -> bool:
        """Start listening for ends unless begun already; whether the database notifies."""
        with self._lock:
            if self.notifies is None:
                self.notifies = self._dialect.listen_for_ends(
                    self._engine, self._on_ended, self._stop, self._outage
                )
            return self.notifies

    def stop(self) -> None:
        """Stop the listening thread (within a second); the TaskStore is gone."""
        self._stop.set()

    def add(self, waiter: Waiter) -> None:
        with self._lock:
            self._waiters.setdefault(waiter.task_id, set()).add(waiter)

    def remove(self, waiter: Waiter) -> None:
        with self._lock:
            waiting = self._waiters.get(waiter.task_id)
            if waiting is not None:
                waiting.discard(waiter)
                if not waiting:
                    del self._waiters[waiter.task_id]

    def waiting(self) -> int:
        """How many waiters are registered now."""
        with self._lock:
            return sum(len(waiting) for waiting in self._waiters.values())

    def _on_ended(self, task_id: int | None) -> None:
        """From the listening thread: wake ``task_id``'s waiters, or all (None: listening
        (again) after a time without, when notifications may have been lost)."""
        with self._lock:
            if task_id is None:
                self.listening = True  # before the wakes: a waiter woken must see it
                self.wake_alls += 1
                woken = [waiter for waiting in self._waiters.values() for waiter in waiting]
            else:
                woken = list(self._waiters.get(task_id, ()))
        for waiter in woken:
            waiter.wake()

    def read(self, store: TaskStore, waiter: Waiter) -> Task:
        """The waiter's row now, counted; TaskNotFound if there is none."""
        with self._lock:
            self.reads += 1
        waiter.reads += 1
        task = store.get(waiter.task_id)
        if task is None:
            raise TaskNotFound(id=waiter.task_id)
        return task

    @staticmethod
    def mark_awaited(store: TaskStore, task_id: int) -> None:
        """Set the row's ``awaited``, so that its end is notified; a no-op write is skipped."""
        stmt = store.db.prepare(
            "mark awaited",
            lambda: (
                sa.update(tasks)
                .where(c.id == sa.bindparam("task_id"), sa.not_(c.awaited))
                .values(awaited=sa.true())
            ),
        )
        store.db.run(stmt, {"task_id": task_id})


class _ScrubbedOutage(Outage):
    """An Outage whose line shows the error as Database.unavailable words it: no piece of
    the URL's credentials (a driver's message may quote a host parsed from a password)."""

    def __init__(self, unavailable: Callable[[Exception], Exception]) -> None:
        super().__init__()
        self._unavailable = unavailable

    def lost(self, what: str, error: BaseException, began: float | None = None) -> None:
        shown = self._unavailable(error) if isinstance(error, Exception) else error
        super().lost(what, shown, began)


# One watcher per TaskStore, forgotten with it (its finalizer stops the watcher's thread).
_watchers: weakref.WeakKeyDictionary[TaskStore, EndWatcher] = weakref.WeakKeyDictionary()
_watchers_lock = threading.Lock()


def watcher_for(store: TaskStore) -> EndWatcher:
    """The EndWatcher of ``store``, made on first use (it starts nothing yet)."""
    with _watchers_lock:
        watcher = _watchers.get(store)
        if watcher is None:
            watcher = _watchers[store] = EndWatcher(store)
            weakref.finalize(store, watcher.stop)
            store.on_dispose.append(_forgetting(store, watcher))
        return watcher


def _forgetting(store: TaskStore, watcher: EndWatcher) -> Callable[[], None]:
    """What TaskStore.dispose calls: stop ``watcher``; the TaskStore's next waiter makes another."""
    store_ref = weakref.ref(store)

    def forget() -> None:
        watcher.stop()
        with _watchers_lock:
            owner = store_ref()
            if owner is not None and _watchers.get(owner) is watcher:
                del _watchers[owner]

    return forget


def _forget_watchers() -> None:
    """In a forked child: the parent's listening threads did not come along."""
    global _watchers, _watchers_lock
    _watchers = weakref.WeakKeyDictionary()
    _watchers_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_watchers)


def _timed_out(task: Task, deadline: Deadline) -> Task:
    """``task`` if it has ended after all, else ResultTimeout saying its status."""
    if is_terminal(task):
        return task
    raise ResultTimeout(id=task.id, timeout=deadline.timeout, status=task.status.value)


def wait_for_end(store: TaskStore, task_id: int, timeout: float | None) -> Task:
    """Block until task ``task_id`` ends; its terminal row.

    ResultTimeout when ``timeout`` seconds (None: no end; 0: one look) pass first,
    TaskNotFound if there is no such row or it is deleted meanwhile. An outage (a restart,
    killed sessions) is waited out: DatabaseUnavailable only if the database still cannot
    be reached when the timeout passes (see jobq.db.patience).
    """
    deadline = Deadline(timeout)
    with patiently(deadline):  # its reads and its mark wait out an outage, until the deadline
        return _wait_for_end(store, task_id, deadline)


def _wait_for_end(store: TaskStore, task_id: int, deadline: Deadline) -> Task:
    watcher = watcher_for(store)
    waiter = Waiter(task_id)
    if deadline.timeout == 0:
        return _timed_out(watcher.read(store, waiter), deadline)
    if not watcher.start():
        return _poll(store, watcher, waiter, deadline)
    watcher.add(waiter)
    try:
        watcher.mark_awaited(store, task_id)
        while True:
            waiter.clear()
            if watcher.listening:
                task = watcher.read(store, waiter)
                if is_terminal(task):
                    return task
            if deadline.passed() or not waiter.wait(deadline.remaining()):
                return _timed_out(watcher.read(store, waiter), deadline)
    finally:
        watcher.remove(waiter)


def _poll(store: TaskStore, watcher: EndWatcher, waiter: Waiter, deadline: Deadline) -> Task:
    """wait_for_end where the database cannot notify: read the row at growing intervals."""
    pause = POLL_FIRST
    while True:
        task = watcher.read(store, waiter)
        if is_terminal(task):
            return task
        remaining = deadline.remaining()
        if remaining == 0:
            return _timed_out(task, deadline)
        time.sleep(pause if remaining is None else min(pause, remaining))
        pause = min(pause * 2, POLL_MAX)


async def wait_for_end_async(store: TaskStore, task_id: int, timeout: float | None) -> Task:
    """wait_for_end in an event loop, never blocking it: reads run in a thread (short),
    and the wait itself is an asyncio.Event the watcher's thread sets, or asyncio.sleep."""
    deadline = Deadline(timeout)
    # asyncio.to_thread runs each read in a copy of this context: patient, as in the sync wait.
    with patiently(deadline):
        return await _wait_for_end_async(store, task_id, deadline)


async def _wait_for_end_async(store: TaskStore, task_id: int, deadline: Deadline) -> Task:
    watcher = watcher_for(store)
    waiter = Waiter(task_id, asyncio.get_running_loop())

    async def read() -> Task:
        return await asyncio.to_thread(watcher.read, store, waiter)

    if deadline.timeout == 0:
        return _timed_out(await read(), deadline)
    if not watcher.start():
        return await _poll_async(read, deadline)
    watcher.add(waiter)
    try:
        await asyncio.to_thread(watcher.mark_awaited, store, task_id)
        while True:
            waiter.clear()
            if watcher.listening:
                task = await read()
                if is_terminal(task):
                    return task
            if deadline.passed() or not await waiter.wait_async(deadline.remaining()):
                return _timed_out(await read(), deadline)
    finally:
        watcher.remove(waiter)


async def _poll_async(read: Callable[[], Awaitable[Task]], deadline: Deadline) -> Task:
    """_poll in an event loop: asyncio.sleep between the reads."""
    pause = POLL_FIRST
    while True:
        task = await read()
        if is_terminal(task):
            return task
        remaining = deadline.remaining()
        if remaining == 0:
            return _timed_out(task, deadline)
        await asyncio.sleep(pause if remaining is None else min(pause, remaining))
        pause = min(pause * 2, POLL_MAX)
