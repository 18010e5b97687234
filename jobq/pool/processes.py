"""The worker's side of the process pool: one child per slot thread, killed when its run
must stop, replaced when it dies, recycled after so many runs or so much memory."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess

from jobq.db.tasks import Status
from jobq.db.validation import check_int
from jobq.lifecycle.in_task import PROGRESS
from jobq.pool import child as child_main
from jobq.pool import wire
from jobq.worker import executor
from jobq.worker.executor import CANCELLED_ON_REQUEST, Outcome
from jobq.worker.runner import CANCELLED, Run

log = logging.getLogger("jobq.worker")

#: Seconds a child gets between SIGTERM and SIGKILL (a run past its timeout, a cancel).
KILL_GRACE = 2.0
#: Seconds between the slot thread's looks at a stopping child while it waits for it.
_LOOK_EVERY = 0.25


@dataclass
class _Child:
    process: BaseProcess
    conn: Connection
    runs: int = 0

    @property
    def pid(self) -> int:
        assert self.process.pid is not None
        return self.process.pid

    def dead(self, timeout: float = 0.0) -> bool:
        """Whether it has exited (waiting up to ``timeout`` s); reads nothing, any thread."""
        return bool(wait([self.process.sentinel], timeout))


class ProcessPool:
    """Runs sync tasks of the app at ``app_path`` (module:attribute) in child processes.

    ``max_tasks_per_child`` and ``max_memory_per_child`` (MB of peak resident memory)
    replace a child between runs once it reaches them, like Celery's options of the
    same names. ``database_url`` is the worker's, for what tasks read themselves
    (jobq.parent_results()); ``log_setup`` the (level, format) of jobq.worker.logs.configure.
    """

    def __init__(
        self,
        app_path: str,
        *,
        database_url: str | None = None,
        max_tasks_per_child: int | None = None,
        max_memory_per_child: int | None = None,
        log_setup: tuple[str, str] | None = None,
    ) -> None:
        if max_tasks_per_child is not None:
            check_int("max_tasks_per_child", max_tasks_per_child, minimum=1)
        if max_memory_per_child is not None:
            check_int("max_memory_per_child", max_memory_per_child, minimum=1)
        self.app_path = app_path
        self.database_url = database_url
        self.max_tasks_per_child = max_tasks_per_child
        self.max_memory_per_child = max_memory_per_child
        self.log_setup = log_setup
        #: children_started, children_recycled, children_died, children_killed.
        self.stats: Counter[str] = Counter()
        # The fork server imports jobq and the app once; each child is a fork of it, so
        # that a replacement starts in milliseconds, without the worker's threads.
        # jobq.pool.fork_server comes first: it has each child die with the fork server.
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(
            ["jobq.pool.fork_server", child_main.__name__, app_path.partition(":")[0]]
        )
        self._lock = threading.Lock()
        self._slots: list[ChildSlot] = []
        self._closed = False

    def slot(self) -> ChildSlot:
        """A slot for one slot thread: it runs that thread's sync runs in its child."""
        slot = ChildSlot(self)
        with self._lock:
            self._slots.append(slot)
        return slot

    def stop(self, run: Run) -> None:
        """Stop ``run``'s child: at once if the run has ended (lost, released: the kill
        comes before that end is written), else SIGTERM and SIGKILL after KILL_GRACE s."""
        with self._lock:
            slots = list(self._slots)
        for slot in slots:
            if slot.stop(run):
                return

    def close(self) -> None:
        """Retire every child (killing any still running), and wait for them to exit."""
        with self._lock:
            self._closed = True
            slots = list(self._slots)
        children = [child for slot in slots if (child := slot.close()) is not None]
        deadline = time.monotonic() + KILL_GRACE
        for child in children:
            if not child.dead(max(deadline - time.monotonic(), 0.0)):
                _signal(child, signal.SIGKILL)
        for child in children:
            child.dead(KILL_GRACE)

    @property
    def closed(self) -> bool:
        return self._closed

    def start_child(self) -> _Child:
        """A new child, ready for its first run."""
        ours, theirs = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=child_main.main, name="jobq-pool-child",
            args=(self.app_path, self.database_url, theirs, self.log_setup, os.getpid()),
            # Daemonic, so that no exit of the worker can leave one behind (multiprocessing
            # terminates those at exit); tasks in it cannot start multiprocessing children.
            daemon=True,
        )  # fmt: skip
        process.start()
        theirs.close()  # the child holds it now: its EOF is our death, and ours its
        self.stats["children_started"] += 1
        return _Child(process, ours)


class ChildSlot:
    """One slot thread's child, and the run it runs."""

    def __init__(self, pool: ProcessPool) -> None:
        self.pool = pool
        self._lock = threading.Lock()
        self._child: _Child | None = None
        self._current: Run | None = None
        # Why its child is being stopped ("timeout", "cancel", "ended"), and when SIGTERM went.
        self._stopping: str | None = None
        self._term_sent = 0.0

    def run(self, run: Run) -> Outcome:
        """Run ``run`` in this slot's child (started as needed) to its Outcome."""
        assert run.definition is not None
        frame = wire.task_frame(run.task, run.definition.timeout)
        for _ in range(2):  # a child that died idle (the OOM killer, say) is replaced once
            with self._lock:
                if self.pool.closed or run.ended:
                    return CANCELLED
                if run.timed_out:  # its deadline passed while it waited for this slot
                    return _logged(run, executor.timed_out(run.definition, run.task.attempt))
                if self._child is None:
                    self._child = self.pool.start_child()
                child = self._child
                self._current, self._stopping = run, None
            try:
                child.conn.send_bytes(frame)
            except OSError:
                self._retire(child, kill=True)
                continue
            try:
                return self._outcome(run, child)
            finally:
                with self._lock:
                    self._current = None
        return self._died(run, child)

    def stop(self, run: Run) -> bool:
        """Stop this slot's child if it runs ``run`` (see ProcessPool.stop); whether it did."""
        with self._lock:
            child = self._child
            if self._current is not run or child is None:
                return False
            reason = "ended" if run.ended else "timeout" if run.timed_out else "cancel"
            if self._stopping is not None and reason != "ended":
                return True  # SIGTERM went; the slot thread sends SIGKILL after the grace
            self._stopping = reason
            run.killed = True
            self.pool.stats["children_killed"] += 1
            if reason == "ended":
                _signal(child, signal.SIGKILL)
            else:
                self._term_sent = time.monotonic()
                _signal(child, signal.SIGTERM)
        if reason == "ended":
            # Dead before the caller writes the run's end: no two attempts at once.
            child.dead(KILL_GRACE)
        return True

    def close(self) -> _Child | None:
        """Retire this slot's child (SIGKILL if it still runs something); the child."""
        with self._lock:
            child, self._child = self._child, None
            if child is None:
                return None
            if self._current is not None:
                _signal(child, signal.SIGKILL)
            else:
                child.conn.close()  # it exits on EOF
        return child

    def _outcome(self, run: Run, child: _Child) -> Outcome:
        """Wait for ``run``'s outcome, passing its progress reports on."""
        while True:
            if self._stopping is not None and time.monotonic() - self._term_sent >= KILL_GRACE:
                _signal(child, signal.SIGKILL)
            ready = wait([child.conn, child.process.sentinel], _LOOK_EVERY)
            if not ready:
                continue
            try:
                reply = wire.read_reply(child.conn.recv_bytes()) if child.conn in ready else None
            except (EOFError, OSError):
                reply = None
            if reply is None:
                return self._died(run, child)
            if "progress" in reply:
                for task_id, attempt, report in reply["progress"]:
                    PROGRESS.put((task_id, attempt), report)
                continue
            outcome = wire.outcome_of(reply)
            if self._stopping is not None:
                # It returned as it was being stopped, and logged its end: it is let go
                # without SIGKILL, so that it writes that line out as it exits.
                self._retire(child, kill=False)
            else:
                self._after_run(child, reply["max_rss_kib"])
            return outcome

    def _after_run(self, child: _Child, max_rss_kib: int) -> None:
        """Recycle ``child`` if it has run its --max-tasks-per-child or grown past its
        --max-memory-per-child."""
        child.runs += 1
        pool = self.pool
        why = None
        if pool.max_tasks_per_child is not None and child.runs >= pool.max_tasks_per_child:
            why = f"after {child.runs} run(s) (--max-tasks-per-child)"
        elif pool.max_memory_per_child is not None:
            used = max_rss_kib / 1024
            if used > pool.max_memory_per_child:
                why = f"at {used:.0f} MB (--max-memory-per-child {pool.max_memory_per_child})"
        if why is not None:
            log.info("replacing worker child %d %s", child.pid, why)
            pool.stats["children_recycled"] += 1
            self._retire(child, kill=False)

    def _died(self, run: Run, child: _Child) -> Outcome:
        """``run``'s outcome now that its child is gone: killed on purpose, or died. Its
        end line is logged here (its child could not), unless it ended already."""
        child.dead(KILL_GRACE)  # its exit code, not our SIGKILL's, if it is exiting
        self._retire(child, kill=True)
        if self._stopping == "ended":
            return CANCELLED  # lost or released: nothing will be recorded
        return _logged(run, self._death_outcome(run, child))

    def _death_outcome(self, run: Run, child: _Child) -> Outcome:
        """The outcome of ``run``, whose child is gone: stopped (timeout, cancel), or died."""
        assert run.definition is not None
        reason = self._stopping
        if reason == "timeout":
            return executor.timed_out(run.definition, run.task.attempt, killed=True)
        if reason == "cancel":
            return CANCELLED_ON_REQUEST
        code = child.process.exitcode
        how = f"exit code {code}"
        if code is not None and code < 0:
            how = f"signal {-code} ({signal.Signals(-code).name})"
        self.pool.stats["children_died"] += 1
        log.error(
            "task %d %s attempt %d: worker child %d died: %s; another takes its place",
            run.task.id, run.task.name, run.task.attempt, child.pid, how,
        )  # fmt: skip
        return Outcome(
            Status.FAILED, error=f"worker child died: {how}",
            retry_delay=run.definition.retry_delay(run.task.attempt),
        )  # fmt: skip

    def _retire(self, child: _Child, *, kill: bool) -> None:
        """Let ``child`` go (a new one starts at the next run); it exits at EOF, or dies."""
        with self._lock:
            if self._child is child:
                self._child = None
        if kill:
            _signal(child, signal.SIGKILL)
        child.conn.close()
        if child.dead(KILL_GRACE):
            child.process.join(0)  # reads its exit code; only this thread reads it
        else:
            _signal(child, signal.SIGKILL)


def _logged(run: Run, outcome: Outcome) -> Outcome:
    """``outcome`` of ``run``, its end line logged here: its child could not (killed, dead,
    or never given the run), and every run that ends has one end line, as on threads."""
    assert run.definition is not None
    seconds = time.monotonic() - run.began
    executor.log_end(run.definition, run.task.attempt, run.task, outcome, seconds)
    return outcome


def _signal(child: _Child, signum: int) -> None:
    """Send ``signum`` to ``child`` unless it has exited (its pid may be reused then)."""
    if not child.dead():
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signum)
