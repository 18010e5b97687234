"""The runs a worker has in flight: started on its Runner, collected as they finish.

Each run's code reports its Outcome from whichever thread ran it (Runs.finish); the loop,
the only thread that talks to the database, collects those outcomes (Runs.collect) and
queues their ends for the next write (Ends). A run stays here until its outcome is
collected, even once its end is settled otherwise (timed out, released or lost), so that
its slot stays taken while its code still runs.
"""

from __future__ import annotations

import logging
import queue
import time
from collections import Counter
from typing import TYPE_CHECKING

from jobq.db.tasks import CANCEL_REQUESTED, Completion, Status, Task
from jobq.worker import executor
from jobq.worker.ahead import GIVE_BACK_AFTER, CaptureAhead
from jobq.worker.ends import completion
from jobq.worker.observers import outcome_label
from jobq.worker.runner import CANCELLED, Run, Runner

if TYPE_CHECKING:
    from jobq.core.registry import Registry, TaskDefinition
    from jobq.worker.ends import Ends
    from jobq.worker.executor import Outcome
    from jobq.worker.observers import RunWatch
    from jobq.worker.pacing import Pacing
    from jobq.worker.runner import Pool

log = logging.getLogger("jobq.worker")

Fence = tuple[int, int]

#: The least delay before the retry of a run that timed out and was recorded as the
#: worker stopped: its thread ends with the process, a moment after the write.
STUCK_RETRY_DELAY = 5.0


class Runs:
    """The runs of ``registry``'s tasks in flight, ``concurrency`` sync ones at a time (in
    ``pool``'s child processes if given, else on threads); a len() of them all."""

    def __init__(
        self,
        registry: Registry,
        concurrency: int,
        pool: Pool | None,
        ends: Ends,
        pacing: Pacing,
        watch: RunWatch,
        stats: Counter[str],
    ) -> None:
        self.registry = registry
        self.ends = ends
        self.pacing = pacing
        self.watch = watch
        self.stats = stats
        #: Where the runs execute.
        self.runner = Runner(concurrency, self.finish, pool)
        #: How many runs to capture beyond the free slots (see jobq.worker.ahead).
        self.ahead = CaptureAhead(concurrency, time.monotonic())
        self._runs: dict[Fence, Run] = {}
        #: Finished runs; None is a nudge (tasks arrived, or a stop): wakes the loop.
        self.finished: queue.SimpleQueue[tuple[Fence, Outcome] | None] = queue.SimpleQueue()
        # Definitions with the timeouts runs were given at enqueue, by (name, timeout).
        self._definitions: dict[tuple[str, float | None], TaskDefinition | None] = {}

    def __len__(self) -> int:
        return len(self._runs)

    def __getitem__(self, fence: Fence) -> Run:
        return self._runs[fence]

    def unsettled(self) -> list[Run]:
        """The runs whose ends are not settled yet."""
        return [run for run in self._runs.values() if not run.ended]

    def stragglers(self) -> int:
        """Sync task threads still running after their runs were settled."""
        return sum(1 for run in self._runs.values() if not run.finished)

    def start(self, tasks: list[Task]) -> None:
        """Hand the captured tasks to the runner; fail those this worker does not know."""
        runnable = []
        for task in tasks:
            run = Run.of(task, self._definition(task))
            self._runs[task.fence] = run
            self.watch.started(run)
            if run.definition is None:
                log.error("task %d: %r is not registered in this worker", task.id, task.name)
                self.finish(run, executor.not_registered(task.name))
            elif (failure := executor.undecodable(task)) is not None:
                log.error("task %d %s: %s", task.id, task.name, failure.error)
                self.finish(run, failure)
            else:
                runnable.append(run)
        self.watch.captured(tasks)
        self.runner.start(runnable)

    def _definition(self, task: Task) -> TaskDefinition | None:
        """The registered definition of ``task``, with the timeout the row was given."""
        key = (task.name, task.timeout)
        if key not in self._definitions:
            definition = self.registry.get(task.name)
            self._definitions[key] = definition and definition.with_timeout(task.timeout)
        return self._definitions[key]

    def finish(self, run: Run, outcome: Outcome) -> None:
        """From any thread: ``run``'s code is done; the loop records ``outcome``."""
        run.finished = True
        run.returned = time.monotonic()
        self.finished.put((run.task.fence, outcome))

    def collect(self, wait: float) -> None:
        """Take the runs that finished (waiting up to ``wait`` s for the first), and queue
        their ends for the next write."""
        try:
            finished = [self.finished.get(timeout=wait) if wait > 0 else self.finished.get_nowait()]
        except queue.Empty:
            return
        while True:
            try:
                finished.append(self.finished.get_nowait())
            except queue.Empty:
                break
        self.ahead.ended(sum(item is not None for item in finished), time.monotonic())
        for item in finished:
            if item is None:
                self.pacing.nudged()  # tasks arrived: look again soon, and often
                continue  # a nudge: the caller's loop captures next
            fence, outcome = item
            run = self._runs.pop(fence, None)
            if CANCEL_REQUESTED:
                CANCEL_REQUESTED.discard(fence)
            if run is None or run.ended:
                continue  # settled already: timed out, released or lost
            run.ended = True
            if run.timed_out and run.definition is not None:
                outcome = executor.timed_out(run.definition, run.task.attempt, killed=run.killed)
            self.ends.add(run, completion(fence, outcome))
            self.stats["snoozed" if outcome.status is Status.QUEUED else outcome.status.value] += 1
            self.watch.ended(run, outcome_label(run, outcome), outcome, run.seconds())

    def give_back_waiting(self, now: float) -> None:
        """Put back in the queue, no retry spent, the runs captured ahead that have waited
        in line for a slot over GIVE_BACK_AFTER s (the runs before them proved long)."""
        given_back = self.runner.waiting_since(now - GIVE_BACK_AFTER)
        if given_back:
            log.info(
                "%d run(s) captured ahead waited over %g s for a slot: given back to the queue",
                len(given_back), GIVE_BACK_AFTER,
            )  # fmt: skip
        for run in given_back:
            run.ended = True
            self.finish(run, CANCELLED)  # it never started: its collect frees its place
            self.ends.add(run, Completion(run.task.id, run.task.attempt, Status.QUEUED))
            self.stats["given_back"] += 1
            self.watch.ended(run, "released")

    def release_unfinished(self) -> None:
        """Grace is over: put unfinished runs back in the queue without spending a retry;
        those past their timeouts are recorded as timed out (their threads end with us)."""
        for run in self.unsettled():
            run.ended = True
            self.runner.cancel(run)
            if run.timed_out and run.definition is not None:
                outcome = executor.timed_out(run.definition, run.task.attempt)
                delay = max(outcome.retry_delay or 0.0, STUCK_RETRY_DELAY)
                self.ends.add(run, completion(run.task.fence, outcome, retry_delay=delay))
                self.watch.ended(run, "timed_out")
                continue
            self.ends.add(run, Completion(run.task.id, run.task.attempt, Status.QUEUED))
            self.stats["released"] += 1
            self.watch.ended(run, "released")
        self.ends.record()
