"""The database's task counts, kept fresh in the background for `jobq metrics` and the
dashboard, so that neither a scrape nor a page ever counts a table.

Two parts, counted by TaskCounts (exporter.py) and each refreshed by a daemon thread of
its own, so that a long count of one never holds up the other:

- ``active``: queued, in_progress, and failed with retries left; the rows of the partial
  indexes jobq_tasks_capture and jobq_tasks_lease_expiry, however many finished rows the
  table holds. Every ``interval`` seconds, with the oldest waiting task of each queue.
- ``finished``: done, failed for good, cancelled, and blocked workflow nodes. No index
  holds (queue_id, status) of these, so counting them reads the whole table: every
  ``finished_interval`` seconds, and never sooner than DUTY times the last count's
  duration after it ended, so that counting keeps the database busy at most a tenth of
  its time however large it grows.

A count that fails leaves the last one in place: its reason is logged once a streak
(credentials scrubbed), and the part is tried again ``interval`` seconds later.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from jobq.db.errors import first_line
from jobq.db.tasks import Status, as_utc
from jobq.db.urls import scrub
from jobq.dialects.schema import ACTIVE, WAITING, fair_keys, status_is, tasks

if TYPE_CHECKING:
    from jobq.app.store import Store

c = tasks.c

#: A part waits at least this many times its last count's duration before the next one.
DUTY = 10
ACTIVE_PART, FINISHED_PART = "active", "finished"
#: The statuses each part counts; failed is in both (with retries left, and for good).
#: Blocked workflow nodes are outside the capture index, so the finished part counts them.
PART_STATUSES = {
    ACTIVE_PART: (Status.QUEUED, Status.IN_PROGRESS, Status.FAILED),
    FINISHED_PART: (Status.DONE, Status.FAILED, Status.CANCELLED, Status.BLOCKED),
}

#: A part's count: tasks by (queue, status), oldest due ages, fair queues' keys with work.
Counted = tuple[dict[tuple[str, str], int], dict[str, float], dict[str, int]]
CountFunction = Callable[[], Counted]


@dataclass(frozen=True)
class Snapshot:
    """One part's last successful count: tasks by (queue, status value), each queue's
    oldest due waiting age in seconds (active part only), when (time.monotonic()), and
    how many keys of each fair queue have work (active part only)."""

    tasks: dict[tuple[str, str], int]
    oldest: dict[str, float]
    at: float
    fair_keys: dict[str, int] = field(default_factory=dict)

    def age(self) -> float:
        """Seconds since this count was taken."""
        return max(time.monotonic() - self.at, 0.0)


class TaskCounts:
    """The two counting queries over one Store's tasks table; each one statement."""

    def __init__(self, store: Store) -> None:
        self.db = store.db
        self.dialect = store.dialect
        #: The statements, built once (benchmarks/exporter_counts.py explains their plans).
        self.active_statement = self._active_statement()
        self.finished_statement = self._finished_statement()
        k = fair_keys.c
        self.fair_keys_statement = (
            sa.select(k.queue, sa.func.count()).where(k.idle == sa.false()).group_by(k.queue)
        )

    def _active_statement(self) -> sa.CompoundSelect:
        """Active rows by queue and status, each group's earliest due run_at, and now."""
        now = self.dialect.now()
        # Within WAITING every failed row has retries left: all of them wait.
        waiting = sa.or_(status_is(Status.QUEUED), status_is(Status.FAILED))
        due = sa.case((sa.and_(waiting, c.run_at <= now), c.run_at))
        resting = sa.and_(status_is(Status.DONE), c.recurring)
        # Each predicate verbatim lets PostgreSQL and SQLite prove its partial index usable
        # (the waiting rows' capture index, the running rows' lease index); MySQL reaches
        # its emulation only through its flag column (within).
        waiting_rows = (
            sa.select(c.queue_id, c.status, sa.func.count(), sa.func.min(due), now)
            .where(self.dialect.within("jobq_tasks_capture"), WAITING, sa.not_(resting))
            .group_by(c.queue_id, c.status)
        )
        running_rows = (
            sa.select(c.queue_id, c.status, sa.func.count(), sa.null(), now)
            .where(self.dialect.within("jobq_tasks_lease_expiry"), status_is(Status.IN_PROGRESS))
            .group_by(c.queue_id, c.status)
        )
        return sa.union_all(waiting_rows, running_rows)

    def _finished_statement(self) -> sa.Select[Any]:
        """Finished rows by queue and status, schedules' resting rows left out."""
        resting = sa.and_(c.recurring, sa.or_(status_is(Status.DONE), status_is(Status.CANCELLED)))
        return (
            sa.select(c.queue_id, c.status, sa.func.count())
            .where(sa.not_(ACTIVE), sa.not_(resting))
            .group_by(c.queue_id, c.status)
        )

    def active(self) -> Counted:
        """Active tasks by (queue, status), each queue's oldest due waiting age, and the
        keys of each fair queue that have work (one series a queue, none a key)."""
        with self.db.unit(read_only=True) as conn:
            rows = conn.execute(self.active_statement).all()
            keys = {queue: n for queue, n in conn.execute(self.fair_keys_statement)}
        counts: dict[tuple[str, str], int] = {}
        oldest: dict[str, float] = {}
        for queue, status, n, first_due, now in rows:
            counts[(queue, status)] = n
            if first_due is not None:
                waited = (as_utc(now) - as_utc(first_due)).total_seconds()
                oldest[queue] = max(oldest.get(queue, 0.0), waited, 0.0)
        return counts, oldest, keys

    def finished(self) -> Counted:
        """Finished tasks by (queue, status); no ages, no keys."""
        with self.db.unit(read_only=True) as conn:
            return {(q, s): n for q, s, n in conn.execute(self.finished_statement)}, {}, {}


class BackgroundCounts:
    """Both parts' last counts, each refreshed by a daemon thread of its own once started
    (start() is safe to call again; the dashboard calls it on first use, since an app
    mounted in another never sees its own lifespan events)."""

    def __init__(
        self,
        store: Store,
        *,
        interval: float = 5.0,
        finished_interval: float = 60.0,
        log: logging.Logger | None = None,
    ) -> None:
        counts = TaskCounts(store)
        self._count: dict[str, CountFunction] = {
            ACTIVE_PART: counts.active,
            FINISHED_PART: counts.finished,
        }
        self._interval = {ACTIVE_PART: interval, FINISHED_PART: finished_interval}
        self._log = log or logging.getLogger("jobq.counts")
        self._url = store.engine.url  # only to scrub its credentials from errors
        self._snapshots: dict[str, Snapshot] = {}
        #: Seconds each part's last attempt took, and whether it succeeded.
        self.took: dict[str, float] = {}
        self.ok: dict[str, bool] = {}
        self._next: dict[str, float] = {ACTIVE_PART: 0.0, FINISHED_PART: 0.0}
        self._errors: dict[str, str] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    @property
    def parts(self) -> list[str]:
        """The parts' names, active first."""
        return list(self._count)

    def active(self) -> Snapshot | None:
        """The last count of the active rows, counted now in this thread if there is none
        yet (None if that failed); the background refresh is started."""
        if ACTIVE_PART not in self._snapshots:
            self.refresh(ACTIVE_PART)  # first: the thread then waits its interval for the next
        self.start()
        return self._snapshots.get(ACTIVE_PART)

    def finished(self) -> Snapshot | None:
        """The last count of the finished rows, or None while the first is under way; the
        background refresh is started."""
        self.start()
        return self._snapshots.get(FINISHED_PART)

    def snapshot(self, part: str) -> Snapshot | None:
        """The last successful count of ``part``, or None before the first."""
        return self._snapshots.get(part)

    def error(self, part: str) -> str | None:
        """Why the last count of ``part`` failed (credentials scrubbed), or None."""
        return self._errors.get(part)

    def start(self, name: str = "jobq-counts") -> None:
        """Start the refreshing threads unless they run already (or were stopped)."""
        with self._lock:
            if self._threads or self._stop.is_set():
                return
            for part in self._count:
                thread = threading.Thread(
                    target=self._run, args=(part,), name=f"{name}-{part}", daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop refreshing; waits up to ``timeout`` seconds for a count under way."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            # A daemon: a count the database holds up must not hold up the process's exit.
            thread.join(max(deadline - time.monotonic(), 0.0))

    def refresh(self, part: str) -> bool:
        """Count ``part`` now, in this thread; whether it succeeded."""
        started = time.monotonic()
        try:
            tasks, oldest, keys = self._count[part]()
        except Exception as error:  # whatever it is, the last counts stay served
            self.took[part], self.ok[part] = time.monotonic() - started, False
            reason = scrub(first_line(error), self._url)
            if self._errors.get(part) != reason:
                self._log.warning(
                    "could not count %s tasks (%s); serving the last counts until a count "
                    "succeeds", part, reason,
                )  # fmt: skip
            self._errors[part] = reason
            self._next[part] = time.monotonic() + self._interval[ACTIVE_PART]
            return False
        ended = time.monotonic()
        self._snapshots[part] = Snapshot(tasks, oldest, ended, keys)
        self.took[part], self.ok[part] = ended - started, True
        if self._errors.pop(part, None) is not None:
            self._log.info("%s counts refreshed again", part)
        self._next[part] = ended + max(self._interval[part], DUTY * (ended - started))
        return True

    def _run(self, part: str) -> None:
        while not self._stop.is_set():
            if self._next[part] <= time.monotonic():
                self.refresh(part)
            # Woken each second at least: a refresh() from elsewhere may have moved _next.
            self._stop.wait(min(max(self._next[part] - time.monotonic(), 0.05), 1.0))
