"""Overruns: a worker's runs still going past their timeouts.

A run past its timeout keeps its row in_progress, its lease renewed, and with it its lock
key and limit slot, until its code returns: only then is it recorded as timed out, and
can its retry start. So no two attempts of a task run at once while the worker lives.
A thread cannot be stopped, though: Overruns says when so many runs are stuck that only
a fresh process (a supervisor's restart) gets the slots back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from jobq.db.validation import check_int, check_seconds
from jobq.worker.runner import Run

log = logging.getLogger("jobq.worker")


class Overruns:
    """Watches ``concurrency`` slots for runs past their deadlines."""

    def __init__(self, concurrency: int, max_stuck: int | None, stuck_after: float) -> None:
        if max_stuck is not None:
            check_int("max_stuck", max_stuck, minimum=0)
        check_seconds("stuck_after", stuck_after)
        self.concurrency = concurrency
        #: Runs stuck (``stuck_after`` s past their timeouts) that make the worker stop;
        #: 0: never. By default, every slot.
        self.max_stuck = concurrency if max_stuck is None else max_stuck
        self.stuck_after = stuck_after
        # Whether the log says that every slot is held by a run past its timeout.
        self._said_all_overrun = False

    def check(
        self, runs: Iterable[Run], now: float, cancel: Callable[[Run], None], *, kills: bool = False
    ) -> int:
        """Mark the ``runs`` past their deadlines timed out (``cancel`` stops an async one,
        and with ``kills`` a sync one's child process; a thread runs on); how many newly.
        Says so when they hold every slot."""
        overrun = newly = 0
        for run in runs:
            if run.deadline is None or now < run.deadline:
                continue
            overrun += 1
            if not run.timed_out:
                run.timed_out = True
                newly += 1
                killed = kills and run.definition is not None and not run.definition.is_async
                log.warning(
                    "task %d %s attempt %d timed out after %g s; %s", run.task.id,
                    run.task.name, run.task.attempt,
                    run.definition.timeout if run.definition else 0,
                    "killing its child process (SIGTERM, then SIGKILL)" if killed else
                    "it keeps its slot, lease and lock until its code returns",
                )  # fmt: skip
                cancel(run)
        if overrun >= self.concurrency and not self._said_all_overrun:
            log.error(
                "all %d slots are held by runs past their timeouts; no task is taken until "
                "one returns", self.concurrency,
            )  # fmt: skip
        self._said_all_overrun = overrun >= self.concurrency
        return newly

    def too_many_stuck(self, runs: Iterable[Run], now: float) -> bool:
        """Whether enough ``runs`` are stuck for the worker to stop (and say why)."""
        stuck = sum(
            1
            for run in runs
            if run.timed_out and run.deadline is not None and now >= run.deadline + self.stuck_after
        )
        if not self.max_stuck or stuck < self.max_stuck:
            return False
        log.error(
            "%d run(s) stuck for %g s past their timeouts (--max-stuck %d): stopping, for "
            "a supervisor to start a fresh worker", stuck, self.stuck_after, self.max_stuck,
        )  # fmt: skip
        return True
