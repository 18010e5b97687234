"""Recording the ends of a worker's runs: in batches, each end fenced by its attempt.

An end waits in Ends.unrecorded until the next write: the capture's (the loop records the
ends in the statement that captures, see Worker._capture) or one of its own (record).
A write the database could not take is kept for the next turn; one it refused is left to
rescue. The ends whose leases were taken over meanwhile are stale: counted, not written.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from typing import TYPE_CHECKING

from jobq.db.errors import JobqError, first_line
from jobq.db.tasks import Completion, Status

if TYPE_CHECKING:
    from jobq.app.store import Store
    from jobq.db.outage import Outage
    from jobq.limits import Limiter
    from jobq.worker.executor import Outcome
    from jobq.worker.observers import RunWatch
    from jobq.worker.pacing import BurstEnd, Failed, Pacing
    from jobq.worker.runner import Run

log = logging.getLogger("jobq.worker")

Fence = tuple[int, int]


class Ends:
    """The ends of runs not yet recorded, and their writes to ``store``."""

    def __init__(
        self,
        store: Store,
        limiter: Limiter,
        stats: Counter[str],
        outage: Outage,
        burst_end: BurstEnd,
        watch: RunWatch,
        pacing: Pacing,
        failed: Failed,
    ) -> None:
        self.store = store
        self.limiter = limiter
        self.stats = stats
        self.outage = outage
        self.burst_end = burst_end
        self.watch = watch
        self.pacing = pacing
        self.failed = failed
        #: The ends to write, oldest first.
        self.unrecorded: list[Completion] = []
        #: Some unrecorded end is of a task with a lock key: recording it frees the key.
        self.frees_lock_key = False
        #: The last capture recorded ends that freed lock keys but could not see them free.
        self.capture_again = False

    def add(self, run: Run, completion: Completion) -> None:
        """Queue ``completion`` of ``run`` for the next write."""
        if completion.status in (Status.FAILED, Status.QUEUED):
            # Its retry (or the end of its snooze) is due then: look for it in time. A
            # delay the store's backoff decides is unknown here: look again soon.
            delay = completion.retry_delay
            self.pacing.due_in(self.pacing.poll_interval if delay is None else delay)
        if run.task.workflow_id is not None:  # its end settles the nodes after it
            completion = dataclasses.replace(completion, in_workflow=True)
        self.unrecorded.append(completion)
        self.watch.queued(run.task)
        if run.task.lock_key is not None:
            self.frees_lock_key = True

    def take(self) -> tuple[list[Completion], bool]:
        """The ends to write now, and whether they free lock keys; none are left queued
        (put_back returns them if their write fails)."""
        batch, self.unrecorded = self.unrecorded, []
        frees_lock_key, self.frees_lock_key = self.frees_lock_key, False
        return batch, frees_lock_key

    def put_back(self, batch: list[Completion], frees_lock_key: bool) -> None:
        """``batch`` (from take) was not written: write it first next time."""
        self.unrecorded = batch + self.unrecorded
        self.frees_lock_key |= frees_lock_key

    def record(self) -> None:
        """Write the finished runs' outcomes; kept for the next turn if the database is down."""
        if not self.unrecorded:
            return
        batch, frees_lock_key = self.take()
        try:
            applied = self.store.set_statuses(batch)
        except JobqError as error:
            self.failed(f"recording {len(batch)} outcome(s)", error)
            self.put_back(batch, frees_lock_key)
            time.sleep(min(self.pacing.poll_interval, 1.0))
            return
        except Exception as error:
            # set_statuses writes a refused end on its own, then as a plain failure; past
            # that, retrying would refuse it forever. Their leases expire; rescue ends them.
            self.stats["unrecorded"] += len(batch)
            log.error(
                "recording %d outcome(s) failed, left to rescue: %s", len(batch), first_line(error)
            )
            return
        self.outage.reached()
        self.burst_end.wrote(len(batch))
        self.recorded(batch, applied)

    def recorded(self, batch: list[Completion], applied: int) -> None:
        """``batch`` is written (``applied`` of them were not stale): free the runs' slots."""
        if batch:
            self.limiter.release((end.id, end.attempt) for end in batch)
        stale = len(batch) - applied
        self.watch.recorded(batch, stale)
        if stale:
            self.stats["stale"] += stale
            log.warning("%d outcome(s) were stale: their leases expired and were taken over", stale)


def completion(fence: Fence, outcome: Outcome, retry_delay: float | None = None) -> Completion:
    """The end to record of the run ``fence`` (id, attempt) that ended with ``outcome``;
    ``retry_delay`` (if given) instead of the outcome's own."""
    return Completion(
        fence[0], fence[1], outcome.status, result=outcome.result, error=outcome.error,
        retry_delay=outcome.retry_delay if retry_delay is None else retry_delay,
        terminal=outcome.terminal,
    )  # fmt: skip
