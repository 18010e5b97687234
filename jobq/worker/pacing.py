"""Pacing: when a worker's loop looks for tasks again, and when a burst worker is done.

Idle looks back off (Pacing.idle_wait); free slots beside running ones wait to look again
once a look came back short (Pacing.drained); and ``jobq worker --burst`` exits once the
worker has drained its queues (BurstEnd).

A worker has drained its queues once a *look* finds no task of them falling due within
``--burst-wait`` seconds and a capture *begun after that look* takes nothing and records
no end. The order is what makes the decision sound, whatever the clocks:

- a task due by the look's time is due for the capture after it, which reads later (a
  later transaction, so a later database time): that capture takes it, unless it cannot
  be taken (its lock key held, its queue paused), and then it is not this burst's;
- a task falling due after the look's time is counted by the look, as due later;
- an end written after the look (a retry the worker itself just scheduled, recorded with
  the capture or on its own) is unseen by the look, so any end written undoes the look.

A look taken after the capture instead would have to count the tasks that fell due
between the two reads, and the worker cannot measure that gap: its own clock brackets
neither database time, and SQLite's is in whole milliseconds (``Store.due_later(since=)``
missed retries that fell due within it).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobq.db.errors import JobqError
from jobq.worker.logs import in_and_at

if TYPE_CHECKING:
    from jobq.app.store import Store

log = logging.getLogger("jobq.worker")

#: Seconds an idle worker's looks may rely on the queues' limits as read before (a busy
#: one: jobq.limits.sql.LIMITS_REFRESH): a listening worker is woken when a limit or a
#: pause changes (Dialect.wake_for_limits) and reads them afresh then; a polling one only
#: learns of it when it reads them, so a resumed limited queue may wait that long.
IDLE_LIMITS_AGE = 30.0
IDLE_LIMITS_AGE_POLLING = 10.0
#: Seconds free slots may wait for the others to free up before a capture anyway.
CAPTURE_WAIT = 0.01

#: What a worker does with a failed read: logs it (Worker._failed), and tries again later.
Failed = Callable[[str, JobqError], None]


class Pacing:
    """What a worker's loop knows of when to look again, polling every ``poll_interval``
    seconds (see idle_wait for ``max_poll_interval``)."""

    def __init__(self, poll_interval: float, max_poll_interval: float | None) -> None:
        self.poll_interval = poll_interval
        #: While looks find nothing, the wait between them doubles up to this (default:
        #: 4 x poll_interval), so that idle workers cost the database little.
        self.max_poll_interval = max(max_poll_interval or 4 * poll_interval, poll_interval)
        #: Empty looks in a row.
        self.idle_polls = 0
        #: Seconds idle looks may rely on the limits read before: longer once listening.
        self.idle_limits_age = IDLE_LIMITS_AGE_POLLING
        #: Some queue this worker serves is limited (as last read): it never backs off.
        self.serves_limited = False
        #: time.monotonic() when a retry or snooze this worker recorded falls due (the
        #: earliest not yet looked for).
        self.next_due = math.inf
        #: time.monotonic() of the last look that came back short while runs went on (see
        #: drained), or None.
        self.drained_at: float | None = None

    def nudged(self) -> None:
        """Tasks arrived (the database said so): look again soon, and often."""
        self.idle_polls = 0
        self.drained_at = None

    def due_in(self, delay: float) -> None:
        """A retry or snooze this worker recorded falls due ``delay`` s from now: look for
        it in time."""
        self.next_due = min(self.next_due, time.monotonic() + delay)

    def drained(self, now: float, running: bool, unrecorded: bool) -> bool:
        """Whether free slots beside running ones wait to look again: the last look came
        back short less than --poll-interval ago, as an idle worker's would. An enqueue
        heard, a retry falling due or ends to record (a look rides in their write) end it;
        where a limited queue is served it never begins (another worker frees its slots)."""
        return (
            self.drained_at is not None
            and running
            and now - self.drained_at < self.poll_interval
            and now < self.next_due
            and not unrecorded
        )

    def idle_wait(self, now: float) -> float:
        """Seconds to wait, with nothing running, before the next look for due tasks: from
        --poll-interval, doubling with each empty look up to --max-poll-interval, but no
        later than a retry or snooze this worker recorded falls due. An enqueue the worker
        hears of (Store.listen) ends the wait at once."""
        streak = max(self.idle_polls - 1, 0)
        wait = min(self.poll_interval * 2 ** min(streak, 16), self.max_poll_interval)
        return max(min(wait, self.next_due - now), 0.001)


def held_back(store: Store, queues: Sequence[str] | None, failed: Failed) -> bool:
    """Whether tasks wait in limited queues that are full now (burst mode keeps going)."""
    try:
        return store.limited_waiting(queues)
    except JobqError as error:
        failed("looking at the limited queues", error)
        return True


def burst_over(burst_end: BurstEnd, failed: Failed) -> bool:
    """With nothing due now in burst mode: whether to exit, because no task of our
    queues falls due within ``burst_wait`` s (see BurstEnd)."""
    try:
        over = burst_end.over()
    except JobqError as error:
        failed("looking for tasks due later", error)
        return False
    return over


@dataclass
class _Look:
    """What a look for tasks due later found: none within --burst-wait."""

    #: time.monotonic() when the look began.
    at: float
    #: How many tasks of the worker's queues wait for a later time.
    left: int
    #: Seconds from ``at`` until the first of them falls due; None: none waits.
    next_in: float | None
    #: Whether a capture begun after the look took nothing and wrote no end.
    confirmed: bool = False


class BurstEnd:
    """Decides when a burst worker serving ``queues`` (None: every queue) exits: once no
    task of them falls due within ``wait`` seconds (see the module's docstring).

    The worker tells it of every write (``wrote``) and asks ``over()`` whenever a capture
    came back empty with nothing running and nothing left to record; ``reached()`` hears
    of each look that reached the database."""

    def __init__(
        self,
        store: Store,
        queues: Sequence[str] | None,
        wait: float,
        reached: Callable[[], None],
    ) -> None:
        self.store = store
        self.queues = queues
        self.wait = wait
        # Told each time a look reached the database (the worker's Outage.reached).
        self._reached = reached
        # time.monotonic() until which a task found falling due then is waited for.
        self._due_at = 0.0
        # The last look that found nothing due within ``wait``, while no end was written.
        self._look: _Look | None = None

    @property
    def confirming(self) -> bool:
        """Whether a look found nothing due within ``wait``, and the worker should capture
        again at once to confirm it (see over())."""
        return self._look is not None and not self._look.confirmed

    def wrote(self, ends: int, captured: int | None = None) -> None:
        """The worker committed a write: ``ends`` ends of runs, with a capture that took
        ``captured`` tasks (None: no capture). An end undoes the last look; a capture
        that took nothing and wrote no end confirms it."""
        if self._look is None:
            return
        if ends or captured:
            self._look = None
        elif captured is not None:
            self._look.confirmed = True

    def over(self) -> bool:
        """Whether to exit now, with nothing due now: a look found nothing falling due
        within ``wait`` and the capture after it confirmed that (logs what is left and
        when the next task falls due). Otherwise looks, if no task found before is yet
        to fall due: with nothing due within ``wait`` the worker must capture once more
        (``confirming``); with a task due within it, it waits for that. Raises what the
        look raises (JobqError): the worker goes on and looks again later."""
        now = time.monotonic()
        if now < self._due_at:
            return False  # the task that falls due then is not due yet
        look = self._look
        if look is not None and look.confirmed:
            self._log_end(look, now)
            return True
        left, next_in = self.store.due_later(self.queues)
        self._reached()
        if next_in is not None and next_in <= self.wait:
            self._due_at = now + next_in
            self._look = None
            return False
        self._look = _Look(now, left, next_in)
        return False

    def _log_end(self, look: _Look, now: float) -> None:
        if look.next_in is None:
            log.info("burst over: nothing left to run")
            return
        log.info(
            "burst over: nothing due within %g s; %d task(s) left, the next due %s",
            self.wait, look.left, in_and_at(max(look.next_in - (now - look.at), 0.0)),
        )  # fmt: skip
