"""What watches a worker's runs: the RunObserver extension point, and each end's label.

The worker tells a RunObserver (its ``metrics=``; jobq.observe.metrics.WorkerMetrics is
one) of every capture and every end, and lets it read the slots; RunWatch tells that
observer and the runs' trace spans (run_spans.py), where either is on, in one place.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from jobq.db.tasks import Completion, Status, Task

if TYPE_CHECKING:
    from jobq.worker.executor import Outcome
    from jobq.worker.run_spans import RunTracing
    from jobq.worker.runner import Run

Fence = tuple[int, int]


class RunObserver(Protocol):
    """What a worker tells of its runs (Worker(metrics=...)); calls come from its loop."""

    def watch_slots(self, busy: Callable[[], int], free: Callable[[], int]) -> None:
        """Read the worker's busy and free slots from ``busy`` and ``free`` when needed."""

    def started(self, tasks: Iterable[Task]) -> None:
        """``tasks`` were captured."""

    def finished(self, task: Task, outcome: str, seconds: float | None) -> None:
        """A run of ``task`` ended with ``outcome`` (a label of outcome_label, or
        released, stale, lost) after ``seconds`` (None: not timed)."""


class RunWatch:
    """Tells ``metrics`` and ``tracing``, those that are not None, what the runs do."""

    def __init__(self, metrics: RunObserver | None, tracing: RunTracing | None) -> None:
        self.metrics = metrics
        self.tracing = tracing
        # With metrics: the tasks of ends not yet recorded, to label those found stale.
        self._ending: dict[Fence, Task] = {}

    def started(self, run: Run) -> None:
        """``run`` is about to start: its trace span begins."""
        if self.tracing is not None:
            self.tracing.started(run)

    def captured(self, tasks: list[Task]) -> None:
        """``tasks`` were captured and handed on."""
        if self.metrics is not None:
            self.metrics.started(tasks)

    def ended(
        self, run: Run, label: str, outcome: Outcome | None = None, seconds: float | None = None
    ) -> None:
        """Tell the metrics and the run's trace span, where they are on, how ``run`` ended."""
        if self.metrics is not None:
            self.metrics.finished(run.task, label, seconds)
        if self.tracing is not None:
            self.tracing.finished(run, label, outcome)

    def queued(self, task: Task) -> None:
        """The end of a run of ``task`` waits to be recorded."""
        if self.metrics is not None:
            self._ending[task.fence] = task

    def recorded(self, batch: list[Completion], stale: int) -> None:
        """``batch`` is written, ``stale`` of its ends stale: count those."""
        if self.metrics is not None:
            ended = [self._ending.pop((end.id, end.attempt), None) for end in batch]
            self._count_stale([task for task in ended if task is not None], stale)

    def _count_stale(self, ended: list[Task], stale: int) -> None:
        """Count ``stale`` ends of those of ``ended``: the write says how many, not which,
        so they go to the task most of the batch ran (a batch is most often one task's)."""
        assert self.metrics is not None
        if stale and ended:
            kinds = Counter((task.queue_id, task.name) for task in ended)
            (queue, name), _ = kinds.most_common(1)[0]
            task = next(t for t in ended if (t.queue_id, t.name) == (queue, name))
            for _ in range(stale):
                self.metrics.finished(task, "stale", None)


def outcome_label(run: Run, outcome: Outcome) -> str:
    """The ``outcome`` label of a run's end, as the worker records it."""
    status = outcome.status
    if status is Status.DONE:
        return "done"
    if status is Status.CANCELLED:
        return "cancelled"
    if run.task.cancel_requested:  # a pending cancel makes any other end a cancel
        return "cancelled" if status is Status.QUEUED or not _final(run, outcome) else "failed"
    if status is Status.QUEUED:
        return "snoozed"
    if run.timed_out or (outcome.error or "").startswith("timed out after"):
        return "timed_out"
    return "failed" if _final(run, outcome) else "retried"


def _final(run: Run, outcome: Outcome) -> bool:
    # Each capture of a retry spends one of retries_left: none left, no retry.
    return outcome.terminal or run.task.retries_left <= 0
