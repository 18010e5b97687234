"""A worker's side of cancel requests and progress reports, while its runs are in progress.

Every half second with runs in progress it asks which of them have a cancel request (one
SELECT by primary key), and once a second it writes the progress reports the runs made
meanwhile (one UPDATE each, fenced by attempt, in one transaction): a run's progress
takes at most one write a second however often the task reports it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from jobq.core.store import TaskStore
from jobq.db.tasks import Status
from jobq.dialects.schema import status_is, tasks
from jobq.lifecycle.in_task import PROGRESS

c = tasks.c

Fence = tuple[int, int]

#: Seconds between looks for cancel requests: a run hears of one within about this.
CANCEL_CHECK_INTERVAL = 0.5
#: Seconds between writes of the runs' progress.
PROGRESS_INTERVAL = 1.0
#: Ids a SELECT names at most (a worker's runs; far below every database's limit).
_CHUNK = 500


class RunControl:
    """Cancel requests heard and progress written, on ``store``, for one worker's runs."""

    def __init__(self, store: TaskStore) -> None:
        self.store = store
        self._next_check = 0.0
        self._next_progress = 0.0

    def due(self, now: float, running: bool) -> bool:
        """Whether tick() has work at ``now`` (monotonic), given whether runs are in progress."""
        return (running and now >= self._next_check) or (
            bool(PROGRESS) and now >= self._next_progress
        )

    def tick(self, now: float, fences: Iterable[Fence]) -> set[Fence]:
        """Write due progress reports; which of ``fences`` (runs in progress) have a cancel
        request. Raises the TaskStore's JobqError when the database cannot be reached (the
        reports are kept for the next tick)."""
        if PROGRESS and now >= self._next_progress:
            self._write_progress()
            self._next_progress = now + PROGRESS_INTERVAL
        if now < self._next_check:
            return set()
        self._next_check = now + CANCEL_CHECK_INTERVAL
        owned = list(fences)
        return self._cancel_requests(owned) if owned else set()

    def _cancel_requests(self, fences: list[Fence]) -> set[Fence]:
        stmt = self.store.dialect.memo(("cancel requests",), _cancel_requests_statement)
        found: set[Fence] = set()
        with self.store.db.unit(read_only=True) as conn:
            for start in range(0, len(fences), _CHUNK):
                ids = [id for id, _ in fences[start : start + _CHUNK]]
                found.update(
                    (int(id), int(attempt)) for id, attempt in conn.execute(stmt, {"ids": ids})
                )
        return found & set(fences)

    def _write_progress(self) -> None:
        reports = PROGRESS.take()
        if not reports:
            return
        stmt = self.store.dialect.memo(("progress",), _progress_statement)
        params = [
            {"task_id": id, "run_attempt": attempt, "new_progress": progress}
            for (id, attempt), progress in reports.items()
        ]

        def write(conn: Any) -> None:
            conn.execute(stmt, params)

        try:
            self.store.db.write(write, atomic=True)
        except Exception:
            for fence, progress in reports.items():  # newer reports made meanwhile win
                PROGRESS.put_if_absent(fence, progress)
            raise


def _cancel_requests_statement() -> sa.Select[Any]:
    return sa.select(c.id, c.attempt).where(
        c.id.in_(sa.bindparam("ids", expanding=True)),
        status_is(Status.IN_PROGRESS),
        c.cancel_requested_at.is_not(None),
    )


def _progress_statement() -> sa.Update:
    # Fenced by attempt alone: a report made just before its run ended still lands on
    # that run's row, and never on a later attempt's.
    return (
        sa.update(tasks)
        .where(c.id == sa.bindparam("task_id"), c.attempt == sa.bindparam("run_attempt"))
        .values(progress=sa.bindparam("new_progress", type_=c.progress.type))
    )
