"""Prometheus metrics of one worker process (`jobq worker --metrics-port`; extra jobq[metrics]).

The names are a contract:

- ``jobq_runs_started_total{queue,task}``: runs captured by this worker.
- ``jobq_runs_finished_total{queue,task,outcome}``: runs ended, by outcome (labelled by
  jobq.worker.observers.outcome_label, where the worker records them): done, failed
  (for good), retried, cancelled, timed_out, snoozed, released (put back at shutdown),
  stale (its end came after its lease was taken over), lost (its lease was lost while it
  ran). A stale end was counted first as the outcome its run had.
- ``jobq_run_duration_seconds{queue,task}``: from the run's start to its end.
- ``jobq_queue_wait_seconds{queue}``: from when the task fell due (run_at) to its capture,
  both on the database's clock.
- ``jobq_worker_slots{state}``: busy and free slots, read when scraped.

A worker without --metrics-port never imports prometheus_client and counts nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from jobq.db.errors import MissingExtra
from jobq.worker.observers import RunObserver

if TYPE_CHECKING:
    from jobq.db.tasks import Task

#: Run durations, seconds: a no-op takes microseconds, a report minutes.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800)
#: Queue waits, seconds.
WAIT_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800, 3600)

OUTCOMES = (
    "done", "failed", "retried", "cancelled", "timed_out", "snoozed", "released", "stale",
    "lost",
)  # fmt: skip


class WorkerMetrics(RunObserver):
    """The metrics of one worker, in a registry of their own (a process may hold several):
    a jobq.worker.observers.RunObserver, given to the worker as Worker(metrics=...)."""

    def __init__(self) -> None:
        try:
            import prometheus_client as prometheus
        except ImportError:
            raise MissingExtra(feature="--metrics-port", extra="metrics") from None
        self._prometheus = prometheus
        self.registry = prometheus.CollectorRegistry(auto_describe=True)
        self._started = prometheus.Counter(
            "jobq_runs_started", "Runs captured by this worker.", ["queue", "task"],
            registry=self.registry,
        )  # fmt: skip
        self._finished = prometheus.Counter(
            "jobq_runs_finished", "Runs ended, by outcome.", ["queue", "task", "outcome"],
            registry=self.registry,
        )  # fmt: skip
        self._duration = prometheus.Histogram(
            "jobq_run_duration_seconds", "Seconds from a run's start to its end.",
            ["queue", "task"], buckets=DURATION_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self._wait = prometheus.Histogram(
            "jobq_queue_wait_seconds", "Seconds from when a task fell due to its capture.",
            ["queue"], buckets=WAIT_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self._slots = prometheus.Gauge(
            "jobq_worker_slots", "This worker's slots, busy and free.", ["state"],
            registry=self.registry,
        )  # fmt: skip
        # Labelled children by label values: labels() costs more than the increment.
        self._children: dict[tuple[Any, ...], Any] = {}

    def watch_slots(self, busy: Callable[[], int], free: Callable[[], int]) -> None:
        """Read the slots from ``busy`` and ``free`` at each scrape."""
        self._slots.labels("busy").set_function(busy)
        self._slots.labels("free").set_function(free)

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        """Serve /metrics on ``host``:``port`` from a daemon thread."""
        self._prometheus.start_http_server(port, addr=host, registry=self.registry)

    def started(self, tasks: Iterable[Task]) -> None:
        """``tasks`` were captured: count them and how long each waited once due."""
        for task in tasks:
            self._child(self._started, task.queue_id, task.name).inc()
            if task.started_at is not None:
                waited = (task.started_at - task.run_at).total_seconds()
                self._child(self._wait, task.queue_id).observe(max(waited, 0.0))

    def finished(self, task: Task, outcome: str, seconds: float | None) -> None:
        """A run of ``task`` ended with ``outcome`` after ``seconds`` (None: not timed)."""
        self._child(self._finished, task.queue_id, task.name, outcome).inc()
        if seconds is not None:
            self._child(self._duration, task.queue_id, task.name).observe(max(seconds, 0.0))

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child
