"""Vacuum: the elected worker vacuums jobq_tasks whenever its dead rows pile up.

Each capture and each end leaves a dead row behind, and in the capture index a dead
entry at its head, which every capture walks until a vacuum clears it; autovacuum visits
a table once a minute at most, and a backlog of a million waiting rows let captures
slow down by the minute (jobq.dialects.vacuum says more). So the worker doing the upkeep
reads jobq_tasks' dead rows every CHECK_EVERY seconds and, past DEAD_ROWS, vacuums it, on
a thread of its own: the worker's loop never waits for it, one vacuum runs at a time, and
none waits behind autovacuum's (SKIP_LOCKED). A vacuum walks every index of the table,
longer the larger the table: after one that took d seconds the next waits (1/DUTY - 1) x d
seconds, so that vacuums take at most DUTY of the time, whatever the table's size (a
vast table of finished rows kept is vacuumed less often, not for ever). Nothing is done,
nor read, where the database keeps no dead rows (MySQL, SQLite), nor where the worker's
role may not vacuum the table (it says so once), nor with ``jobq worker --no-vacuum``,
which leaves the table to autovacuum alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

from jobq.app.store import Store
from jobq.db.errors import JobqError, first_line
from jobq.dialects.vacuum import DeadRows

log = logging.getLogger("jobq.worker")

#: Seconds between the elected worker's reads of jobq_tasks' dead rows.
CHECK_EVERY = 5.0
#: Dead rows past which it vacuums jobq_tasks.
DEAD_ROWS = 100_000
#: The most of the time the elected worker's vacuums take, one after another.
DUTY = 0.1


def due(rows: DeadRows | None) -> bool:
    """Whether ``rows`` (jobq_tasks' dead rows, where read) call for a vacuum."""
    return rows is not None and rows.dead >= DEAD_ROWS


class Vacuum:
    """The vacuums of ``store``'s jobq_tasks by the elected worker (``step``), if
    ``enabled``; ``failed(what, error)`` hears of a failed read, ``stats`` counts the
    vacuums done (``vacuumed``)."""

    def __init__(
        self,
        store: Store,
        failed: Callable[[str, JobqError], None],
        stats: Counter[str],
        enabled: bool = True,
    ) -> None:
        self.store = store
        self.enabled = enabled and store.dialect.keeps_dead_rows
        self._failed = failed
        self._stats = stats
        self._next = 0.0
        self._running: threading.Thread | None = None
        # time.monotonic() before which no vacuum begins: DUTY after the last one.
        self._rested = 0.0
        self._said_not_owner = False

    @property
    def running(self) -> bool:
        """Whether a vacuum this worker began is still running."""
        return self._running is not None and self._running.is_alive()

    def step(self, now: float) -> None:
        """Every CHECK_EVERY s: read jobq_tasks' dead rows, and if due() says so, begin a
        vacuum on a thread of its own (none while the last one runs, nor within
        (1/DUTY - 1) times its length after it)."""
        if not self.enabled or now < max(self._next, self._rested) or self.running:
            return
        self._next = now + CHECK_EVERY
        try:
            with self.store.db.unit() as conn:
                rows = self.store.dialect.dead_rows(conn)
        except JobqError as error:
            self._failed("reading jobq_tasks' dead rows", error)
            return
        if rows is None or not due(rows):
            return
        if not rows.may_vacuum:
            if not self._said_not_owner:
                log.info(
                    "jobq_tasks has %d dead rows, but this worker's role may not vacuum it "
                    "(it does not own it): autovacuum alone does", rows.dead,
                )  # fmt: skip
                self._said_not_owner = True
            return
        self._running = threading.Thread(
            target=self._vacuum, args=(rows,), name="jobq-vacuum", daemon=True
        )
        self._running.start()

    def _vacuum(self, rows: DeadRows) -> None:
        """On its own thread: VACUUM jobq_tasks, and say how long it took."""
        began = time.monotonic()
        try:
            with self.store.db.unit() as conn:
                self.store.dialect.vacuum_tasks(conn)
        except Exception as error:  # on a thread of its own: say it, and try again later
            log.warning("vacuuming jobq_tasks failed, will retry: %s", first_line(error))
            return
        ended = time.monotonic()
        self._rested = ended + (1 / DUTY - 1) * (ended - began)
        self._stats["vacuumed"] += 1
        log.info(
            "vacuumed jobq_tasks (%d dead rows beside %d live) in %.2f s",
            rows.dead, rows.live, ended - began,
        )  # fmt: skip
