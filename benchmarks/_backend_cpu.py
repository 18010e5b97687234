"""CPU time of a worker process and of the PostgreSQL backends serving it, for bench_worker.py.

The worker's: the user + system time of the benchmark's children reaped during the block
(``getrusage(RUSAGE_CHILDREN)`` before and after; the block spawns and waits for the one
worker process, so that is the worker's, from spawn to exit, start-up included).

The server's: the backends whose ``application_name`` is the one the worker's connection
URL sets (``APPLICATION``), found in pg_stat_activity every ``REFRESH`` s and read from
/proc/<pid>/stat every ``EVERY`` s (the server runs on this machine); each backend counts
with the last reading taken before it exited. A backend's CPU after its last reading is
missed: the worker's connections close as it exits, with at most ``EVERY`` s of an
exiting worker's idle talk left unread. Other clients of the server (other people's
tests on the shared one) are not counted, unlike the postmaster tree's total.
"""

from __future__ import annotations

import resource
import threading
import time

from benchmarks._servers import cpu_seconds
from benchmarks.harness import connect_postgres

#: The application_name of the measured worker's sessions.
APPLICATION = "jobq_bench_worker"
EVERY = 0.02  # s between /proc readings
REFRESH = 0.2  # s between looks for new backends

_BACKENDS = "SELECT pid FROM pg_stat_activity WHERE application_name = %s"


def children_cpu() -> float:
    """User + system seconds of this process's reaped children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class BackendCpu:
    """``with BackendCpu(url) as cpu: ...``; then ``cpu.seconds``: the CPU the sessions
    named APPLICATION used on ``url``'s server during the block."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.seconds = 0.0
        self.backends = 0
        self._start: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="backend-cpu", daemon=True)

    def __enter__(self) -> BackendCpu:
        self._conn = connect_postgres(self.url, autocommit=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._look_for_backends()  # sessions still open (none, once the worker exited)
        self._read()
        self._conn.close()
        self.seconds = sum(self._last[p] - self._start[p] for p in self._last)
        self.backends = len(self._last)

    def _look_for_backends(self) -> None:
        for (pid,) in self._conn.execute(_BACKENDS, (APPLICATION,)).fetchall():
            if pid not in self._start:
                # Born during the block (none is named so before the worker starts): its
                # whole life counts.
                self._start[pid] = self._last[pid] = 0.0

    def _read(self) -> None:
        for pid in list(self._last):
            now = cpu_seconds(pid)
            if now > self._last[pid]:  # 0 once it is gone: keep the last reading
                self._last[pid] = now

    def _run(self) -> None:
        next_refresh = 0.0
        while not self._stop.is_set():
            if time.monotonic() >= next_refresh:
                self._look_for_backends()
                next_refresh = time.monotonic() + REFRESH
            self._read()
            self._stop.wait(EVERY)  # the sampling period


def named(url: str) -> str:
    """``url`` (SQLAlchemy's or libpq's) with ``application_name=APPLICATION`` added."""
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}application_name={APPLICATION}"


def per_thousand(seconds: float | None, jobs: int) -> str:
    """CPU ``seconds`` for ``jobs`` jobs as ms per 1,000 jobs ('-' if not measured)."""
    return "-" if seconds is None else f"{seconds * 1e6 / jobs:,.0f}"


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"
