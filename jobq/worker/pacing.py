"""Burst mode (``jobq worker --burst``): when a worker has drained its queues and exits.

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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobq.logs import in_and_at

if TYPE_CHECKING:
    from jobq.store import Store

log = logging.getLogger("jobq.worker")


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
