"""What the machine does while a benchmark runs: its load, the CPU share other work
takes, and threads that sample something (sessions, pools, registrations) during a run.

Two cores are shared by the workers, the servers and whoever else uses the machine, so
every report says how busy the machine was, and a run may wait for a quiet moment.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from benchmarks.harness import log


def load() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine_load() -> str:
    """The 1, 5 and 15 minute load averages and the number of cores, for the report."""
    return f"load average {load()} on {os.cpu_count()} cores"


def cpu_ticks() -> tuple[int, int] | None:
    """The machine's busy and total CPU time so far, in clock ticks (Linux's /proc/stat)."""
    try:
        with open("/proc/stat") as stat:
            ticks = [int(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)  # less idle and iowait


def others_busy(window: float = 0.5) -> float | None:
    """The share of all cores busy over ``window`` s while the benchmark runs nothing:
    other people's work (None where /proc/stat is missing)."""
    before = cpu_ticks()
    time.sleep(window)  # a measuring window, not a wait for something
    after = cpu_ticks()
    if before is None or after is None or after[1] == before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def quiet_moment(below: float | None, patience: float = 120.0) -> float | None:
    """Others' CPU share now; with ``below`` (a share), first look again until it is under
    that, for up to ``patience`` s (then go on anyway, saying so)."""
    busy = others_busy()
    if below is None or busy is None:
        return busy
    deadline = time.monotonic() + patience
    while busy is not None and busy >= below and time.monotonic() < deadline:
        log(f"    others keep {busy:.0%} of the CPU busy: waiting for under {below:.0%}")
        busy = others_busy(2.0)
    if busy is not None and busy >= below:
        log(f"    still {busy:.0%} busy after {patience:g} s: running anyway")
    return busy


class Poller:
    """A thread that calls ``look`` every ``every`` s from the start of the ``with`` block
    until its end (the last look may be under way as the block ends: the exit waits for
    it, up to ``join_timeout`` s)."""

    def __init__(self, every: float, join_timeout: float | None = None) -> None:
        self.every, self._join_timeout = every, join_timeout
        self._stop = threading.Event()
        name = type(self).__name__.lower()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self._join_timeout)

    def look(self) -> None:
        """One sample; each kind says what."""
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            self.look()
            self._stop.wait(self.every)
