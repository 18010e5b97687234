"""Prometheus metrics of a whole jobq database, for `jobq metrics` (extra jobq[metrics]).

A worker's own metrics (metrics.py) say what that worker did; these say what the tables
hold, whoever did it. The names are a contract:

- ``jobq_tasks{queue,status}``: how many tasks each queue holds in each status (queued,
  in_progress, done, failed, cancelled), counted as TaskAdmin.counts() counts them: a
  schedule's recurring row only while a run of it is under way or waiting. failed is the
  sum of both parts below: failed with retries left, and failed for good.
- ``jobq_oldest_waiting_seconds{queue}``: the database's now minus the run_at of the
  queue's longest-due waiting task (queued, or failed with retries left, and due); 0 for
  a queue with none due, so that its series never vanishes while the queue has tasks.
- ``jobq_tasks_counted_seconds{part}``: seconds since each part (below) was last counted.
- ``jobq_exporter_refresh_seconds{part}``: how long each part's last count took.
- ``jobq_exporter_up``: 1 if the last count of every part that has been tried succeeded;
  0 if one failed, or while none has finished yet.

Scrapes never run SQL: one background thread per part counts, and a scrape answers from
the last counts, so a burst of scrapes (or a slow database) costs the database nothing.
The two parts cost differently:

- ``active``: queued, in_progress, and failed with retries left; the rows of the partial
  index jobq_tasks_capture, however many finished rows the table holds. Counted every
  ``interval`` seconds, with the oldest waiting task of each queue.
- ``finished``: done, failed for good, cancelled. No index holds (queue_id, status) of
  these, so counting them reads the whole table; they are counted every
  ``finished_interval`` seconds, and never sooner than DUTY times the last count's
  duration after it ended, so the exporter keeps the database busy at most a tenth of
  its time however large the table grows.

Counts are as of their last refresh: a task that finishes leaves its active status at the
next active count, and reaches its finished one at the next finished count.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from jobq.errors import MissingExtra, first_line
from jobq.schema import ACTIVE, status_is, tasks
from jobq.tasks import Status, as_utc
from jobq.urls import scrub

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from jobq.store import Store

log = logging.getLogger("jobq.exporter")
c = tasks.c

#: A part waits at least this many times its last count's duration before the next one.
DUTY = 10
ACTIVE_PART, FINISHED_PART = "active", "finished"
#: The statuses each part counts; failed is in both (with retries left, and for good).
PART_STATUSES = {
    ACTIVE_PART: (Status.QUEUED, Status.IN_PROGRESS, Status.FAILED),
    FINISHED_PART: (Status.DONE, Status.FAILED, Status.CANCELLED),
}


@dataclass(frozen=True)
class Counted:
    """One part's last successful count: tasks by (queue, status value), and (active part
    only) the seconds each queue's oldest due waiting task has waited."""

    tasks: dict[tuple[str, str], int]
    oldest: dict[str, float]
    at: float  # time.monotonic() when counted


@dataclass(frozen=True)
class PartState:
    """What a part's thread last found; replaced whole, so scrapes read it without locks."""

    counted: Counted | None = None
    took: float | None = None  # seconds the last attempt took
    ok: bool | None = None  # whether it succeeded; None: none finished yet


@dataclass
class _Part:
    """A part's refresh: what it counts, how often, and where it leaves its results."""

    name: str
    count: Callable[[], tuple[dict[tuple[str, str], int], dict[str, float]]]
    interval: float
    state: PartState = field(default_factory=PartState)
    failure: str | None = None  # the last error logged, to log each streak once


class TaskCounts:
    """The two counting queries over one Store's tasks table; each one statement."""

    def __init__(self, store: Store) -> None:
        self.db = store.db
        self.dialect = store.dialect
        #: The statements, built once (benchmarks/exporter_counts.py explains their plans).
        self.active_statement = self._active_statement()
        self.finished_statement = self._finished_statement()

    def _active_statement(self) -> sa.Select[Any]:
        """Active rows by queue and status, each group's earliest due run_at, and now."""
        now = self.dialect.now()
        # Within ACTIVE every failed row has retries left: all of them wait.
        waiting = sa.or_(status_is(Status.QUEUED), status_is(Status.FAILED))
        due = sa.case((sa.and_(waiting, c.run_at <= now), c.run_at))
        resting = sa.and_(status_is(Status.DONE), c.recurring)
        # ACTIVE verbatim lets PostgreSQL and SQLite prove the partial index usable; MySQL
        # reaches its emulation only through its flag column (within).
        return (
            sa.select(c.queue_id, c.status, sa.func.count(), sa.func.min(due), now)
            .where(self.dialect.within("jobq_tasks_capture"), ACTIVE, sa.not_(resting))
            .group_by(c.queue_id, c.status)
        )

    def _finished_statement(self) -> sa.Select[Any]:
        """Finished rows by queue and status, schedules' resting rows left out."""
        resting = sa.and_(c.recurring, sa.or_(status_is(Status.DONE), status_is(Status.CANCELLED)))
        return (
            sa.select(c.queue_id, c.status, sa.func.count())
            .where(sa.not_(ACTIVE), sa.not_(resting))
            .group_by(c.queue_id, c.status)
        )

    def active(self) -> tuple[dict[tuple[str, str], int], dict[str, float]]:
        """Active tasks by (queue, status), and each queue's oldest due waiting age."""
        with self.db.unit(read_only=True) as conn:
            rows = conn.execute(self.active_statement).all()
        counts: dict[tuple[str, str], int] = {}
        oldest: dict[str, float] = {}
        for queue, status, n, first_due, now in rows:
            counts[(queue, status)] = n
            if first_due is not None:
                waited = (as_utc(now) - as_utc(first_due)).total_seconds()  # type: ignore[operator]
                oldest[queue] = max(oldest.get(queue, 0.0), waited, 0.0)
        return counts, oldest

    def finished(self) -> tuple[dict[tuple[str, str], int], dict[str, float]]:
        """Finished tasks by (queue, status); no ages."""
        with self.db.unit(read_only=True) as conn:
            return {(q, s): n for q, s, n in conn.execute(self.finished_statement)}, {}


class DatabaseExporter:
    """A prometheus_client collector of the database's counts, refreshed in the background."""

    def __init__(
        self, store: Store, *, interval: float = 5.0, finished_interval: float = 60.0
    ) -> None:
        try:
            import prometheus_client
            from prometheus_client.core import GaugeMetricFamily
        except ImportError:
            raise MissingExtra(feature="jobq metrics", extra="metrics") from None
        self._prometheus = prometheus_client
        self._gauge = GaugeMetricFamily
        self._url = store.engine.url  # only to scrub its credentials from errors
        counts = TaskCounts(store)
        self._parts = [
            _Part(ACTIVE_PART, counts.active, interval),
            _Part(FINISHED_PART, counts.finished, finished_interval),
        ]
        self._retry_after = interval  # a failed count of either part is tried again so soon
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.registry = prometheus_client.CollectorRegistry()
        self.registry.register(self)

    def serve(self, port: int, host: str = "127.0.0.1") -> WSGIServer:
        """Serve /metrics on ``host``:``port`` from a daemon thread; the server, to shut down."""
        server, _thread = self._prometheus.start_http_server(
            port, addr=host, registry=self.registry
        )
        return server

    def start(self) -> None:
        """Start counting: one daemon thread per part, the first counts at once."""
        for part in self._parts:
            thread = threading.Thread(
                target=self._run, args=(part,), name=f"jobq-exporter-{part.name}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop counting; waits up to ``timeout`` seconds for a count under way to end."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            # A daemon: a count the database holds up must not hold up the process's exit.
            thread.join(max(deadline - time.monotonic(), 0.0))

    def refresh(self, name: str) -> bool:
        """Count part ``name`` now, in this thread; whether it succeeded."""
        part = next(p for p in self._parts if p.name == name)
        return self._refresh(part)[0]

    def _run(self, part: _Part) -> None:
        while not self._stop.is_set():
            ok, took = self._refresh(part)
            wait = part.interval if ok else self._retry_after
            self._stop.wait(max(wait, DUTY * took))

    def _refresh(self, part: _Part) -> tuple[bool, float]:
        """One count of ``part``, its result or failure recorded; (succeeded, seconds)."""
        started = time.monotonic()
        try:
            counts, oldest = part.count()
        except Exception as error:  # whatever it is, the exporter serves on: it says up 0
            took = time.monotonic() - started
            part.state = PartState(part.state.counted, took, ok=False)
            self._failed(part, error)
            return False, took
        took = time.monotonic() - started
        part.state = PartState(Counted(counts, oldest, time.monotonic()), took, ok=True)
        if part.failure is not None:
            log.info("%s counts refreshed again", part.name)
            part.failure = None
        return True, took

    def _failed(self, part: _Part, error: BaseException) -> None:
        """Log one line per streak of failures of ``part`` (again if the reason changes)."""
        reason = scrub(first_line(error), self._url)
        if reason != part.failure:
            log.warning(
                "could not count %s tasks (%s); serving the last counts until a count succeeds",
                part.name, reason,
            )  # fmt: skip
        part.failure = reason

    def states(self) -> dict[str, PartState]:
        """Each part's state now, by part name."""
        return {part.name: part.state for part in self._parts}

    def describe(self) -> Iterable[Any]:
        """Nothing: the metrics' names are fixed, and describing must not run collect."""
        return ()

    def collect(self) -> Iterator[Any]:
        """The metrics, from the last counts; never touches the database."""
        return iter(families(self.states(), time.monotonic(), self._gauge))


def families(states: dict[str, PartState], now: float, gauge: Any) -> list[Any]:
    """The metric families (of class ``gauge``: GaugeMetricFamily) of the parts' ``states``
    at ``now`` (time.monotonic())."""
    counted = {name: s.counted for name, s in states.items() if s.counted is not None}
    queues = sorted({queue for part in counted.values() for queue, _ in part.tasks})
    statuses = [s for s in Status if any(s in PART_STATUSES[name] for name in counted)]
    by_status = gauge("jobq_tasks", "Tasks per queue and status.", labels=["queue", "status"])
    for queue in queues:
        for status in statuses:
            n = sum(part.tasks.get((queue, status.value), 0) for part in counted.values())
            by_status.add_metric([queue, status.value], n)
    oldest = gauge(
        "jobq_oldest_waiting_seconds",
        "Seconds the queue's longest-due waiting task has waited since its run_at (0: none due).",
        labels=["queue"],
    )
    active = counted.get(ACTIVE_PART)
    if active is not None:
        for queue in queues:
            oldest.add_metric([queue], active.oldest.get(queue, 0.0))
    age = gauge(
        "jobq_tasks_counted_seconds", "Seconds since each part was last counted.", labels=["part"]
    )
    for name, part in counted.items():
        age.add_metric([name], max(now - part.at, 0.0))
    took = gauge(
        "jobq_exporter_refresh_seconds", "Seconds each part's last count took.", labels=["part"]
    )
    for name, state in states.items():
        if state.took is not None:
            took.add_metric([name], state.took)
    tried = [state.ok for state in states.values() if state.ok is not None]
    up = gauge("jobq_exporter_up", "1 if the last count of every part succeeded.")
    up.add_metric([], 1.0 if tried and all(tried) else 0.0)
    return [by_status, oldest, age, took, up]
