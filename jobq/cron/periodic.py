"""Periodic: cron schedules as recurring rows of the tasks table (``store.cron``).

A schedule is a jobq_schedules row naming one task row marked recurring. Capture takes
that row like any other once its run_at is due; the end of the run moves run_at to the
schedule's next tick after the database's now and returns the row to done. A tick is one
capture of one row, so it runs once whatever the number of workers, and ticks missed
while no worker ran are one run, not one per tick.

A schedule runs while it is both ``enabled`` (operators switch that) and ``defined``
(the last worker to start on its queue had it in its app). Otherwise its row rests as
cancelled, which capture never takes; a run in progress finishes first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.cron.recurring_ends import RecurringEnds
from jobq.cron.runs import KEPT_RUNS, ScheduleRun, read_runs
from jobq.cron.schedule_rows import db_now, lock_task_row, settle, state_query
from jobq.cron.sync import sync
from jobq.cron.values import Schedule as Schedule
from jobq.cron.values import ScheduleState as ScheduleState
from jobq.cron.values import SyncReport as SyncReport
from jobq.db.errors import UnknownSchedule
from jobq.db.tasks import Status, as_utc
from jobq.db.validation import INT32, check_int, check_key
from jobq.dialects.schema import schedules, tasks

if TYPE_CHECKING:
    from jobq.core.store import TaskStore

s = schedules.c

# Two workers starting at once may both create a schedule; the loser's transaction fails
# on the primary key, and its next try finds the row.
_SYNC_TRIES = 3


class Periodic:
    """Cron schedules (``store.cron``): store an app's, list them and their last runs,
    switch them off and on, run one now: what `jobq cron` does.

    A schedule runs while it is both enabled (`jobq cron enable`/`disable`) and defined
    (the last worker to start on its queue had it in its app). See jobq.ScheduleState and
    jobq.ScheduleRun for examples.

    Made on a TaskStore (``store.capability(Periodic)``), it records the ends of recurring
    rows' runs, which the fenced end statements leave alone, and ends their expired runs
    in each rescue pass (hooks ``ends_left_alone`` and ``rescues`` of jobq.core.hooks).
    """

    def __init__(self, store: TaskStore) -> None:
        self.store = store
        self.db = store.db
        self.dialect = store.dialect
        self.ends = RecurringEnds(store)
        store.hooks.ends_left_alone.append(
            lambda ends, conn, run_at: self.ends.end(ends, connection=conn, run_at=run_at)
        )
        store.hooks.rescues.append(self.ends.rescue)

    # --- definitions ---------------------------------------------------------------

    def sync_schedules(
        self, defined: Iterable[Schedule], *, queues: Sequence[str] | None = None
    ) -> SyncReport:
        """Make the stored schedules match ``defined`` (jobq.Schedule, as
        ``app.schedules.values()``), in one transaction; what each worker does as it starts.

        A new schedule gets its row, first due at its next tick; a changed one is updated
        (a new expression reschedules it from now); a stored schedule on one of ``queues``
        (None: any queue) that ``defined`` lacks stops running but keeps its row.
        Returns a SyncReport: the names ``created``, ``updated`` and ``removed``.
        """
        wanted = {schedule.name: schedule for schedule in defined}
        for tries in range(1, _SYNC_TRIES + 1):
            try:
                return self.db.write(
                    lambda conn: sync(conn, wanted, queues, self._now(conn)), atomic=True
                )
            except sa.exc.IntegrityError:
                if tries == _SYNC_TRIES:
                    raise
        raise AssertionError("unreachable")

    # --- operators ------------------------------------------------------------------

    def schedules(self) -> list[ScheduleState]:
        """Every stored schedule, by name: a jobq.ScheduleState each, as `jobq cron list`
        shows them."""
        with self.db.unit(read_only=True) as conn:
            rows = conn.execute(state_query().order_by(s.name)).all()
        return [
            ScheduleState(
                name=row.name, task=row.task, queue=row.queue_id, cron=row.cron,
                timezone=row.timezone, enabled=row.enabled, defined=row.defined,
                status=Status(row.status), next_run=as_utc(row.run_at),
                last_run=as_utc(row.started_at), last_status=row.last_status,
                task_id=row.task_id,
            )
            for row in rows
        ]  # fmt: skip

    def schedule_runs(self, name: str, limit: int = KEPT_RUNS) -> list[ScheduleRun]:
        """The last ``limit`` runs of schedule ``name`` (at most KEPT_RUNS are kept), newest
        first: when each started and ended, how (done, failed, timed out, lease expired,
        cancelled, released), its attempt and its error: jobq.ScheduleRun each, as `jobq
        cron list --runs NAME` shows them.

        Raises:
            UnknownSchedule: no schedule ``name`` is stored.
            InvalidOption: an empty name or a negative ``limit``.
        """
        check_key("name", name, required=True)
        check_int("limit", limit, minimum=0, maximum=INT32[1])
        with self.db.unit(read_only=True) as conn:
            if conn.execute(sa.select(s.name).where(s.name == name)).first() is None:
                raise UnknownSchedule(name=name)
            return read_runs(conn, name, limit)

    def set_schedule_enabled(self, name: str, enabled: bool) -> None:
        """Resume (``enabled``) or pause schedule ``name``, as `jobq cron enable` and
        `disable` do; a run under way finishes first. A resumed schedule runs from its
        next tick. UnknownSchedule if no schedule ``name`` is stored."""
        check_key("name", name, required=True)

        def switch(conn: Connection) -> None:
            now = self._now(conn)
            task_id = conn.execute(sa.select(s.task_id).where(s.name == name)).scalar()
            if task_id is None:
                raise UnknownSchedule(name=name)
            lock_task_row(conn, task_id)
            conn.execute(
                sa.update(schedules).where(s.name == name).values(enabled=enabled, updated_at=now)
            )
            settle(conn, name, now)

        self.db.write(switch, atomic=True)

    def run_schedule_now(self, name: str) -> int:
        """Enqueue one run of schedule ``name``'s task now, apart from its row; the new id.

        The schedule's own row, its next tick and its last status stay as they are, and
        the run is not one of its schedule_runs (`jobq cron run NAME`). UnknownSchedule if
        no schedule ``name`` is stored.
        """
        check_key("name", name, required=True)

        def enqueue(conn: Connection) -> int:
            row = conn.execute(state_query().where(s.name == name)).one_or_none()
            if row is None:
                raise UnknownSchedule(name=name)
            now = self._now(conn)
            inserted = conn.execute(
                sa.insert(tasks).values(
                    name=row.task, queue_id=row.queue_id, args=row.args, priority=row.priority,
                    lease=row.lease, timeout=row.timeout, lock_key=row.defined_lock_key,
                    retries_left=row.retries, status=Status.QUEUED.value, attempt=0,
                    recurring=False, run_at=now, created_at=now,
                )
            ).inserted_primary_key  # fmt: skip
            assert inserted is not None  # a single-row INSERT has its key
            task_id: int = inserted[0]
            return task_id

        return self.db.write(enqueue, atomic=True)

    def _now(self, conn: Connection) -> datetime:
        """The database's clock, as an aware UTC datetime."""
        return db_now(conn, self.dialect.now())
