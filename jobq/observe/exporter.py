"""Prometheus metrics of a whole jobq database, for `jobq metrics` (extra jobq[metrics]).

A worker's own metrics (metrics.py) say what that worker did; these say what the tables
hold, whoever did it. The names are a contract:

- ``jobq_tasks{queue,status}``: how many tasks each queue holds in each status (queued,
  in_progress, done, failed, cancelled, blocked: a workflow node waiting for its parents),
  counted as TaskAdmin.counts() counts them: a
  schedule's recurring row only while a run of it is under way or waiting. failed is the
  sum of both parts: failed with retries left, and failed for good.
- ``jobq_oldest_waiting_seconds{queue}``: the database's now minus the run_at of the
  queue's longest-due waiting task (queued, or failed with retries left, and due); 0 for
  a queue with none due, so that its series never vanishes while the queue has tasks.
- ``jobq_fair_keys_with_work{queue}``: how many fair keys of each fair queue have rows
  waiting or running (as its captures last saw): one series a queue, none a key.
- ``jobq_tasks_counted_seconds{part}``: seconds since each part (active, finished: see
  counting.py) was last counted.
- ``jobq_exporter_refresh_seconds{part}``: how long each part's last count took.
- ``jobq_exporter_up``: 1 if the last count of every part that has been tried succeeded;
  0 if one failed, or while none has finished yet.

Scrapes never run SQL: the two parts of counting.py (active and finished rows) are
counted in the background, and a scrape answers from the last counts, so a burst of
scrapes (or a slow database) costs the database nothing. Counts are as of their last
refresh: a task that finishes leaves its active status at the next active count, and
reaches its finished one at the next finished count.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from jobq.db.errors import MissingExtra
from jobq.db.tasks import Status
from jobq.observe.counting import ACTIVE_PART, PART_STATUSES, BackgroundCounts

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from jobq.app.store import Store

log = logging.getLogger("jobq.exporter")


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
        self.counts = BackgroundCounts(
            store, interval=interval, finished_interval=finished_interval, log=log
        )
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
        self.counts.start("jobq-exporter")

    def stop(self, timeout: float = 5.0) -> None:
        """Stop counting; waits up to ``timeout`` seconds for a count under way to end."""
        self.counts.stop(timeout)

    def refresh(self, name: str) -> bool:
        """Count part ``name`` now, in this thread; whether it succeeded."""
        return self.counts.refresh(name)

    def describe(self) -> Iterable[Any]:
        """Nothing: the metrics' names are fixed, and describing must not run collect."""
        return ()

    def collect(self) -> Iterator[Any]:
        """The metrics, from the last counts; never touches the database."""
        return iter(families(self.counts, time.monotonic(), self._gauge))


def families(counts: BackgroundCounts, now: float, gauge: Any) -> list[Any]:
    """The metric families (of class ``gauge``: GaugeMetricFamily) of ``counts`` at
    ``now`` (time.monotonic())."""
    counted = {p: s for p in counts.parts if (s := counts.snapshot(p)) is not None}
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
    keys = gauge(
        "jobq_fair_keys_with_work",
        "Fair keys with rows waiting or running, per fair queue.",
        labels=["queue"],
    )
    if active is not None:
        for queue, n in sorted(active.fair_keys.items()):
            keys.add_metric([queue], n)
    age = gauge(
        "jobq_tasks_counted_seconds", "Seconds since each part was last counted.", labels=["part"]
    )
    for name, part in counted.items():
        age.add_metric([name], max(now - part.at, 0.0))
    took = gauge(
        "jobq_exporter_refresh_seconds", "Seconds each part's last count took.", labels=["part"]
    )
    for name, seconds in counts.took.items():
        took.add_metric([name], seconds)
    tried = list(counts.ok.values())
    up = gauge("jobq_exporter_up", "1 if the last count of every part succeeded.")
    up.add_metric([], 1.0 if tried and all(tried) else 0.0)
    return [by_status, oldest, keys, age, took, up]
