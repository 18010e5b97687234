"""Schedule runs: the last runs of each cron schedule, one row per end of a run.

jobq.cron.recurring_ends ends the runs of schedules' recurring rows. Once a fenced UPDATE ending
one has applied, it adds that run here in the same transaction: a stale end (fenced off)
adds nothing, and an end rolled back takes its row with it. The ends of plain tasks
(jobq.core.run_end) never write here. Past the newest KEPT_RUNS of a schedule, the oldest
rows are deleted by the end that adds one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.db.tasks import Status, as_utc
from jobq.dialects.schema import schedule_runs

r = schedule_runs.c

#: How many runs of each schedule are kept.
KEPT_RUNS = 20

# How a run ended, as the history says it: finer than the task row's status.
DONE = "done"
FAILED = "failed"
TIMED_OUT = "timed out"
LEASE_EXPIRED = "lease expired"
CANCELLED = "cancelled"
#: A worker stopping put the run back (a release): the tick runs again, no retry spent.
RELEASED = "released"

# The error a run past its timeout ends with begins so (jobq.worker.executor.timed_out).
_TIMED_OUT_ERROR = "timed out after "
_TRACEBACK = "Traceback (most recent call last):"
_GROUP_TRACEBACK = "  + Exception Group Traceback (most recent call last):"


def run_status(status: Status, error: str | None, *, lease_expired: bool = False) -> str:
    """How a run that ended with ``status`` and ``error`` ended, as the history says it.

    ``lease_expired``: rescue ended it, its worker having stopped renewing its lease.
    """
    if lease_expired:
        return LEASE_EXPIRED
    if status is Status.FAILED:
        return TIMED_OUT if (error or "").startswith(_TIMED_OUT_ERROR) else FAILED
    return {Status.DONE: DONE, Status.CANCELLED: CANCELLED, Status.QUEUED: RELEASED}[status]


def run_error(status: Status, error: str | None) -> str | None:
    """The error a run that ended with ``status`` keeps, as its task row does: a failure's
    or a cancellation's; none for a done run (its row clears the error) nor for a release
    (its row keeps the error of the run before)."""
    return error if status in (Status.FAILED, Status.CANCELLED) else None


@dataclass(frozen=True)
class ScheduleRun:
    """One run of a schedule: when it started and ended, how, and on which attempt.

    ``store.cron.schedule_runs(name)`` returns a schedule's last runs (20 are kept),
    newest first, as `jobq cron list --runs NAME` shows them.

    Attributes:
        schedule: the schedule's name.
        task_id: its recurring task row; ``attempt`` is the capture of it that ran.
        status: how the run ended: done, failed, timed out, lease expired, cancelled or
            released (a stopping worker put it back: the tick runs again).
        started_at: when the run started; ``finished_at`` when it ended (aware, UTC).
        error: the error it ended with, whole, as the task row stored it; None if none.

    Example:
        ```python
        import time

        import jobq
        from jobq.worker import Worker

        app = jobq.App()
        app.migrate()

        @app.periodic(cron="* * * * * *")  # six fields: every second
        @app.task(queue="heartbeat")
        def beat() -> None: ...

        app.store.cron.sync_schedules(app.schedules.values())
        time.sleep(1.1)  # the first tick falls due
        Worker(app, queues=["heartbeat"], burst=True, burst_wait=0).run()
        [run] = app.store.cron.schedule_runs("beat")
        assert run.status == "done" and run.error is None and run.attempt >= 1
        app.store.cron.set_schedule_enabled("beat", False)
        ```
    """

    schedule: str
    #: The schedule's recurring row, and the capture of it (its fencing token) that ran.
    task_id: int
    attempt: int
    #: done, failed, timed out, lease expired, cancelled or released.
    status: str
    started_at: datetime
    finished_at: datetime
    #: The error the run ended with, whole, as the task row stored it; None if none.
    error: str | None

    @property
    def error_summary(self) -> str | None:
        """One line of the error: the exception of a traceback, else the first line.

        In a Python traceback (a task's exception, as a worker stores it) that is the first
        line after the frames of the last traceback (the causes come first), not the last
        line: a message or a note may span several lines after it.
        """
        if self.error is None:
            return None
        lines = self.error.splitlines()
        nonblank = [line.strip() for line in lines if line.strip()]
        if not nonblank:
            return None
        starts = [i for i, line in enumerate(lines) if line in (_TRACEBACK, _GROUP_TRACEBACK)]
        if not starts:
            return nonblank[0]
        # An exception group's lines are drawn in a margin: "  | ExceptionGroup: ...".
        margin = "  | " if lines[starts[-1]] == _GROUP_TRACEBACK else ""
        for line in lines[starts[-1] + 1 :]:
            body = line[len(margin) :] if line.startswith(margin) else ""
            if body.strip() and not body[0].isspace():
                return body.strip()
        return nonblank[-1]


def record_run(
    conn: Connection,
    *,
    schedule: str,
    task_id: int,
    attempt: int,
    status: str,
    started_at: datetime,
    finished_at: datetime,
    error: str | None,
    keep: int = KEPT_RUNS,
) -> None:
    """Add a run of ``schedule`` in ``conn``'s transaction, and keep only its newest ``keep``.

    ``error`` must be storable already (it is the one the run's end writes to its row).
    The caller holds the schedule's task row locked (it has just ended its run), so no
    other transaction adds a run of this schedule meanwhile.
    """
    conn.execute(
        sa.insert(schedule_runs).values(
            schedule=schedule, task_id=task_id, attempt=attempt, status=status,
            started_at=started_at, finished_at=finished_at, error=error,
        )
    )  # fmt: skip
    # Ids grow with each run of a schedule (one ends before the next is captured), so the
    # newest are those of the highest ids. The old ones are found by a plain read and
    # deleted by primary key: a range DELETE would lock the index gaps where other
    # schedules' runs are being added (InnoDB).
    older = sa.select(r.id).where(r.schedule == schedule).order_by(r.id.desc()).offset(keep)
    stale = list(conn.execute(older).scalars())
    if stale:
        conn.execute(sa.delete(schedule_runs).where(r.id.in_(stale)))


def read_runs(conn: Connection, schedule: str, limit: int) -> list[ScheduleRun]:
    """The newest ``limit`` runs of ``schedule``, newest first."""
    query = (
        sa.select(schedule_runs).where(r.schedule == schedule).order_by(r.id.desc()).limit(limit)
    )
    return [_run(row) for row in conn.execute(query)]


def _run(row: Any) -> ScheduleRun:
    started, finished = as_utc(row.started_at), as_utc(row.finished_at)
    assert started is not None and finished is not None  # NOT NULL columns
    return ScheduleRun(
        schedule=row.schedule, task_id=row.task_id, attempt=row.attempt, status=row.status,
        started_at=started, finished_at=finished, error=row.error,
    )  # fmt: skip
