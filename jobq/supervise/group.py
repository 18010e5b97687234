"""The supervisor of `jobq worker --processes N`: N worker processes, kept running.

Each process is started as `python -m jobq.cli worker ...` with the supervisor's own
options (less --processes), in a process group of its own, so that a Ctrl-C in the
terminal reaches the supervisor alone and it decides: it passes SIGTERM/SIGINT on to
every process, each stops within --grace as a lone worker would, and past the grace
(and a margin) whatever still runs is killed. A process that exits while the group is
not stopping is started again after a backoff (1 s, doubling to 30 s; back to 1 s once
a process has run a minute), and the log says why it exited. In burst mode a process
that exits 0 has finished: the supervisor exits once all have.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType

log = logging.getLogger("jobq.supervisor")

#: Seconds before the first restart of a process that exited; it doubles each time.
FIRST_BACKOFF = 1.0
#: The longest wait before a restart.
MAX_BACKOFF = 30.0
#: Seconds a process must run for its next exit to be restarted after FIRST_BACKOFF again.
STEADY_AFTER = 60.0
#: Seconds past --grace after which processes that have not stopped are killed.
KILL_MARGIN = 5.0
#: Seconds between the supervisor's looks at its processes.
_LOOK_EVERY = 0.1


@dataclass
class _Slot:
    """The k-th process of the group, running or waiting to be started again."""

    index: int
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restarts_in_a_row: int = 0
    restart_at: float = 0.0
    finished: bool = False  # burst mode: it exited 0, nothing left for it


class Supervisor:
    """Runs ``processes`` worker processes; ``command(k)`` is the argv of the k-th."""

    def __init__(
        self,
        command: Callable[[int], Sequence[str]],
        processes: int,
        *,
        grace: float,
        burst: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.command = command
        self.grace = grace
        self.burst = burst
        self.env = dict(os.environ if env is None else env)
        self._slots = [_Slot(k) for k in range(processes)]
        self._signals: list[int] = []
        self._wake = threading.Event()

    def run(self) -> int:
        """Supervise until stopped by a signal (or, in burst mode, until every process has
        finished); the exit code: 0, or 1 if processes had to be killed past the grace."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        for slot in self._slots:
            self._start(slot)
        log.info(
            "supervisor %d started %d worker processes: pids %s", os.getpid(), len(self._slots),
            ", ".join(str(slot.process.pid) for slot in self._slots if slot.process),
        )  # fmt: skip
        while not self._signals:
            self._look_after()
            if os.getpid() == 1:
                _reap_orphans({slot.process.pid for slot in self._slots if slot.process})
            if self.burst and all(slot.finished for slot in self._slots):
                log.info("supervisor %d: every worker process has finished", os.getpid())
                return 0
            self._wake.wait(_LOOK_EVERY)
        return self._stop_all()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._signals.append(signum)
        self._wake.set()
        if len(self._signals) > 1:  # a second signal: the processes exit at once too
            self._signal_all(signal.SIGTERM)

    def _look_after(self) -> None:
        """Start again the processes that exited, once their backoff is over."""
        now = time.monotonic()
        for slot in self._slots:
            if slot.finished:
                continue
            if slot.process is None:
                if now >= slot.restart_at:
                    self._start(slot)
                continue
            code = slot.process.poll()
            if code is None:
                continue
            pid, slot.process = slot.process.pid, None
            if self.burst and code == 0:
                slot.finished = True
                continue
            ran = now - slot.started
            slot.restarts_in_a_row = 0 if ran >= STEADY_AFTER else slot.restarts_in_a_row + 1
            delay = min(FIRST_BACKOFF * 2 ** max(slot.restarts_in_a_row - 1, 0), MAX_BACKOFF)
            slot.restart_at = now + delay
            log.warning(
                "worker process %d (pid %d) %s after %.1f s; starting it again in %g s",
                slot.index, pid, _exit_words(code), ran, delay,
            )  # fmt: skip

    def _start(self, slot: _Slot) -> None:
        argv = list(self.command(slot.index))
        try:
            # A process group of its own: a terminal's Ctrl-C reaches the supervisor only.
            slot.process = subprocess.Popen(argv, env=self.env, process_group=0)
        except OSError as error:
            slot.restart_at = time.monotonic() + MAX_BACKOFF
            log.error("worker process %d could not start: %s", slot.index, error)
            return
        slot.started = time.monotonic()

    def _stop_all(self) -> int:
        """Pass the signal on and wait for every process, killing them past the grace."""
        name = signal.Signals(self._signals[0]).name
        running = [slot.process for slot in self._slots if slot.process is not None]
        log.info(
            "supervisor %d got %s: stopping %d worker process(es) within %g s",
            os.getpid(), name, len(running), self.grace,
        )  # fmt: skip
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + self.grace + KILL_MARGIN
        killed = 0
        for process in running:
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                log.error("worker process pid %d did not stop within the grace: killing it",
                          process.pid)  # fmt: skip
                process.kill()
                process.wait()
                killed += 1
        log.info("supervisor %d stopped", os.getpid())
        return 1 if killed else 0

    def _signal_all(self, signum: int) -> None:
        for slot in self._slots:
            if slot.process is not None and slot.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    slot.process.send_signal(signum)


def _reap_orphans(ours: set[int]) -> None:
    """As a container's PID 1, reap the exited processes handed to it: the fork server
    and pool children of a worker process that was killed (by the OOM killer, say), which
    would stay zombies otherwise. Its own processes are left to their Popen objects."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in ours:
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                # "pid (name) state ppid ...": the name may hold spaces and parentheses.
                state, ppid = stat.read().rsplit(")", 1)[1].split()[:2]
        except OSError:
            continue
        if state == "Z" and ppid == "1":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(int(entry), os.WNOHANG)


def _exit_words(code: int) -> str:
    """How a process ended, in words: ``exited with code 3``, ``was killed by SIGKILL``."""
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"
