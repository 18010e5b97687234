"""The dashboard's task counts, refreshed in the background so that no page counts a table.

Two parts, as the Prometheus exporter (jobq.observe.exporter) counts them and with its
statements (TaskCounts): the active rows (queued, running, failed with retries left),
cheap through the partial capture index, counted every ``interval`` seconds; and the
finished rows (done, failed for good, cancelled), which no index holds by status, so
counting them reads the whole table: every ``finished_interval`` seconds, and never
sooner than DUTY times the last count's duration after it ended. Pages show the counts
as of their last refresh, and say how old the finished ones are.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobq.errors import first_line
from jobq.observe.exporter import ACTIVE_PART, DUTY, FINISHED_PART, TaskCounts
from jobq.urls import scrub

if TYPE_CHECKING:
    from jobq.store import Store

log = logging.getLogger("jobq.dashboard")

CountFunction = Callable[[], tuple[dict[tuple[str, str], int], dict[str, float]]]


@dataclass(frozen=True)
class Snapshot:
    """One part's last successful count: tasks by (queue, status value), each queue's
    oldest due waiting age in seconds (active part only), and when (time.monotonic())."""

    tasks: dict[tuple[str, str], int]
    oldest: dict[str, float]
    at: float

    def age(self) -> float:
        """Seconds since this count was taken."""
        return max(time.monotonic() - self.at, 0.0)


class BackgroundCounts:
    """Both parts' last counts, each refreshed by a daemon thread of its own (a long count
    of the finished rows never holds up the active ones), started on first use."""

    def __init__(
        self, store: Store, *, interval: float = 5.0, finished_interval: float = 60.0
    ) -> None:
        counts = TaskCounts(store)
        self._count: dict[str, CountFunction] = {
            ACTIVE_PART: counts.active,
            FINISHED_PART: counts.finished,
        }
        self._interval = {ACTIVE_PART: interval, FINISHED_PART: finished_interval}
        self._url = store.engine.url  # only to scrub its credentials from errors
        self._snapshots: dict[str, Snapshot] = {}
        self._next: dict[str, float] = {ACTIVE_PART: 0.0, FINISHED_PART: 0.0}
        self._errors: dict[str, str] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def active(self) -> Snapshot | None:
        """The last count of the active rows; counted now, in this thread, if none yet."""
        if ACTIVE_PART not in self._snapshots:
            self.refresh(ACTIVE_PART)  # first: the thread then waits its interval for the next
        self.start()
        return self._snapshots.get(ACTIVE_PART)

    def finished(self) -> Snapshot | None:
        """The last count of the finished rows, or None while the first is under way."""
        self.start()
        return self._snapshots.get(FINISHED_PART)

    def error(self, part: str) -> str | None:
        """Why the last count of ``part`` failed (credentials scrubbed), or None."""
        return self._errors.get(part)

    def start(self) -> None:
        """Start the refreshing threads unless they run already (or were stopped)."""
        with self._lock:
            if self._threads or self._stop.is_set():
                return
            # Started on first use, not in a lifespan: an app mounted in another one never
            # sees its own lifespan events.
            for part in self._count:
                thread = threading.Thread(
                    target=self._run, args=(part,), name=f"jobq-dashboard-{part}", daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop refreshing; waits up to ``timeout`` seconds for a count under way."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(deadline - time.monotonic(), 0.0))

    def refresh(self, part: str) -> bool:
        """Count ``part`` now, in this thread; whether it succeeded."""
        started = time.monotonic()
        try:
            tasks, oldest = self._count[part]()
        except Exception as error:  # the dashboard serves on, saying the counts are old
            reason = scrub(first_line(error), self._url)
            if self._errors.get(part) != reason:
                log.warning("could not count %s tasks (%s)", part, reason)
            self._errors[part] = reason
            self._next[part] = time.monotonic() + self._interval[ACTIVE_PART]
            return False
        ended = time.monotonic()
        self._snapshots[part] = Snapshot(tasks, oldest, ended)
        self._errors.pop(part, None)
        self._next[part] = ended + max(self._interval[part], DUTY * (ended - started))
        return True

    def _run(self, part: str) -> None:
        while not self._stop.is_set():
            if self._next[part] <= time.monotonic():
                self.refresh(part)
            # Woken each second at least: a refresh() from a page may have moved _next.
            self._stop.wait(min(max(self._next[part] - time.monotonic(), 0.05), 1.0))
