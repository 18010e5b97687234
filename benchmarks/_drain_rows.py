"""What the rows say about a drain of processes.py and pooler.py: the table filled
beforehand, every task checked done once afterwards, and the rates from spawn to exit
and over the busy span (first capture to last end, as the rows record them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.harness import Database, analyze, reset, status_counts, utc

# Tasks per enqueue_many call when filling the table (untimed).
FILL_BATCH = 10_000


def fill(db: Database, task: str, args: Sequence[dict[str, Any]]) -> None:
    """Empty the tasks table, enqueue one run of ``task`` per ``args`` item, ANALYZE."""
    reset(db.store)
    for start in range(0, len(args), FILL_BATCH):
        db.store.enqueue_many(task, list(args[start : start + FILL_BATCH]))
    analyze(db.store)


@dataclass
class Rows:
    """What the rows say after a drain."""

    span: float  # first capture to last end, seconds (database clock)
    ends: float  # first end to last end: the span less the start of the first runs
    task_seconds: list[float]  # capture to end of each task (cpu section only)


def check_rows(db: Database, n: int, what: str, *, durations: bool = False) -> Rows:
    """Raise unless all ``n`` tasks are done at attempt 1; what the rows say."""
    counts = status_counts(db.store)
    if counts != {"done": n}:
        raise RuntimeError(f"{what}: after the drain the table holds {counts}, not {n} done")
    with db.store.engine.connect() as conn:
        again = conn.exec_driver_sql("SELECT count(*) FROM jobq_tasks WHERE attempt <> 1").scalar()
        if again:
            raise RuntimeError(f"{what}: {again} of {n} tasks ran more than once (attempt > 1)")
        first, first_end, last = conn.exec_driver_sql(
            "SELECT min(started_at), min(finished_at), max(finished_at) FROM jobq_tasks"
        ).one()
        times: list[float] = []
        if durations:
            rows = conn.exec_driver_sql("SELECT started_at, finished_at FROM jobq_tasks").all()
            times = [(utc(end) - utc(start)).total_seconds() for start, end in rows]
    last_end = utc(last)
    span, ends = last_end - utc(first), last_end - utc(first_end)
    return Rows(span.total_seconds(), ends.total_seconds(), times)


class DrainRates:
    """The rates of a timed drain (a dataclass with these three fields mixes it in)."""

    tasks: int
    seconds: float
    rows: Rows

    @property
    def rate(self) -> float:
        """Jobs per second, spawn to exit."""
        return self.tasks / self.seconds

    @property
    def span_rate(self) -> float:
        """Jobs per second from the first capture to the last end."""
        return self.tasks / self.rows.span if self.rows.span > 0 else float("nan")
