"""Retention: the elected worker deletes finished tasks once they are old enough.

A queue keeps its finished tasks for the time `jobq queues retain` gave it, or else for
the workers' ``--retain`` (7 days by default). Deleting a backlog of millions in one
statement would hold one long transaction (and PostgreSQL's vacuum horizon with it), so
retention deletes a batch at a time, each its own short transaction, oldest first. It
runs on the worker's own loop (no connection of its own beyond the worker's two), one
batch per step: a step every BATCH_PAUSE s while rows are due, a round every
ROUND_INTERVAL s once none is.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable

import sqlalchemy as sa

from jobq.app.store import Store
from jobq.db.durations import format_duration
from jobq.db.errors import JobqError
from jobq.dialects.schema import queue_retention, tasks
from jobq.lifecycle.bulk import PRUNE_BATCH, prune_batch
from jobq.queues.retention import FOREVER

log = logging.getLogger("jobq.worker")

#: Seconds finished tasks are kept by default (`jobq worker --retain`).
DEFAULT_RETAIN = 7 * 86400.0
#: Seconds between rounds once a round found nothing more to delete.
ROUND_INTERVAL = 60.0
#: Seconds between batches while rows are due: the worker's loop runs between them.
BATCH_PAUSE = 0.25

#: The queues that keep their finished tasks for the workers' --retain: those without a
#: retention of their own (a subquery, so that no list of names is sent).
_DEFAULT_SCOPE = tasks.c.queue_id.not_in(sa.select(queue_retention.c.queue))


class Retention:
    """Deletes finished tasks past their queue's retention, ``retain`` s (FOREVER: never)
    for queues without one of their own, a batch of ``batch_size`` at each due step.

    ``failed(what, error)`` hears of a batch that failed (the round ends; the next begins
    after ROUND_INTERVAL); ``stats["pruned"]`` counts the tasks deleted.
    """

    def __init__(
        self,
        store: Store,
        retain: float,
        failed: Callable[[str, JobqError], None],
        stats: Counter[str],
        batch_size: int = PRUNE_BATCH,
    ) -> None:
        self.store = store
        self.retain = retain
        self.batch_size = batch_size
        self._failed = failed
        self._stats = stats
        self._next = 0.0
        # What is left of this round: (scope, seconds) to prune, and what it deleted so far.
        self._round: list[tuple[sa.ColumnElement[bool], float]] = []
        self._deleted = 0

    def step(self, now: float) -> None:
        """When due, delete one batch (beginning a round if none is under way)."""
        if now < self._next:
            return
        try:
            if not self._round:
                self._round = self._plan()
                self._deleted = 0
            if self._round:
                scope, seconds = self._round[0]
                deleted, more = prune_batch(self.store, seconds, scope, self.batch_size)
                self._deleted += deleted
                self._stats["pruned"] += deleted
                if not more:
                    self._round.pop(0)
        except JobqError as error:
            self._failed("pruning finished tasks", error)
            self._round = []
        if self._round:
            self._next = now + BATCH_PAUSE
            return
        self._next = now + ROUND_INTERVAL
        if self._deleted:
            log.info("pruned %d finished task(s) past their retention", self._deleted)
            self._deleted = 0

    def _plan(self) -> list[tuple[sa.ColumnElement[bool], float]]:
        """A round's work: each queue with a retention of its own, then the rest."""
        plan = [
            (tasks.c.queue_id == queue, seconds)
            for queue, seconds in sorted(self.store.retentions().items())
            if seconds != FOREVER
        ]
        if self.retain != FOREVER:
            plan.append((_DEFAULT_SCOPE, self.retain))
        return plan


def describe(retain: float) -> str:
    """``retain`` as the worker's log says it: "7d", or "forever"."""
    return "forever" if math.isinf(retain) else format_duration(retain)
