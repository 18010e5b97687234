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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.core.run_end import end_values, next_delay
from jobq.cron.runs import (
    KEPT_RUNS,
    ScheduleRun,
    read_runs,
    record_run,
    run_error,
    run_status,
)
from jobq.cron.schedule import Cron
from jobq.db.errors import InvalidOption, UnknownSchedule
from jobq.db.tasks import Completion, Status, as_utc
from jobq.db.validation import INT32, check_int, check_key
from jobq.dialects.schema import schedules, status_is, tasks

if TYPE_CHECKING:
    from jobq.core.store import TaskStore

c = tasks.c
s = schedules.c

# Two workers starting at once may both create a schedule; the loser's transaction fails
# on the primary key, and its next try finds the row.
_SYNC_TRIES = 3

#: Statuses of a schedule's row that rest (no run in progress): a pause makes them cancelled.
_RESTING = (Status.DONE, Status.QUEUED, Status.FAILED)


@dataclass(frozen=True)
class Schedule:
    """A schedule as an app defines it: run task ``task`` with ``args`` on every tick."""

    name: str
    cron: Cron
    task: str
    queue: str
    args: Mapping[str, Any] = field(default_factory=dict)
    retries: int = 0
    priority: int = 0
    lease: float = 30.0
    timeout: float | None = None
    lock_key: str | None = None

    def task_values(self) -> dict[str, Any]:
        """The columns of its task row that come from the definition."""
        return {
            "name": self.task, "queue_id": self.queue, "args": dict(self.args),
            "priority": self.priority, "lease": self.lease, "timeout": self.timeout,
            "lock_key": self.lock_key,
        }  # fmt: skip


@dataclass(frozen=True)
class ScheduleState:
    """A schedule as the database holds it, for `jobq cron list`."""

    name: str
    task: str
    queue: str
    cron: str
    timezone: str
    enabled: bool
    defined: bool
    #: The status of its task row: in_progress while a run is under way.
    status: Status
    #: When it runs next (its tick, or a retry of the last run); meaningless while paused.
    next_run: datetime
    #: When the last run started, and how it ended (None: never ended yet).
    last_run: datetime | None
    last_status: str | None
    task_id: int

    @property
    def active(self) -> bool:
        return self.enabled and self.defined


@dataclass(frozen=True)
class SyncReport:
    """What sync_schedules changed: schedules created, updated, and no longer defined."""

    created: list[str]
    updated: list[str]
    removed: list[str]


class Periodic:
    """Schedules: sync from an app, end their runs, list and switch them.

    Made on a TaskStore (``store.capability(Periodic)``), it records the ends of recurring
    rows' runs, which the fenced end statements leave alone, and ends their expired runs
    in each rescue pass (hooks ``ends_left_alone`` and ``rescues`` of jobq.core.hooks).
    """

    def __init__(self, store: TaskStore) -> None:
        self.store = store
        self.db = store.db
        self.dialect = store.dialect
        store.hooks.ends_left_alone.append(
            lambda ends, conn, run_at: self._end_recurring(ends, connection=conn, run_at=run_at)
        )
        store.hooks.rescues.append(self._rescue_recurring)

    # --- definitions ---------------------------------------------------------------

    def sync_schedules(
        self, defined: Iterable[Schedule], *, queues: Sequence[str] | None = None
    ) -> SyncReport:
        """Make the stored schedules match ``defined``, in one transaction.

        A new schedule gets its row, first due at its next tick; a changed one is updated
        (a new expression reschedules it from now); a stored schedule on one of ``queues``
        (None: any queue) that ``defined`` lacks stops running but keeps its row.
        """
        wanted = {schedule.name: schedule for schedule in defined}
        for tries in range(1, _SYNC_TRIES + 1):
            try:
                return self.db.write(lambda conn: self._sync(conn, wanted, queues), atomic=True)
            except sa.exc.IntegrityError:
                if tries == _SYNC_TRIES:
                    raise
        raise AssertionError("unreachable")

    def _sync(
        self, conn: Connection, wanted: dict[str, Schedule], queues: Sequence[str] | None
    ) -> SyncReport:
        now = self._now(conn)
        stored = {row.name: row for row in conn.execute(_state_query())}
        report = SyncReport([], [], [])
        # In name order, so that two syncs lock rows in one order and cannot deadlock.
        for name, schedule in sorted(wanted.items()):
            row = stored.get(name)
            if row is None:
                self._create(conn, schedule, now)
                report.created.append(name)
            elif self._update(conn, schedule, row, now):
                report.updated.append(name)
        for name, row in sorted(stored.items()):
            serves = queues is None or row.queue_id in queues
            if name not in wanted and row.defined and serves:
                _lock_task_row(conn, row.task_id)
                conn.execute(
                    sa.update(schedules).where(s.name == name).values(defined=False, updated_at=now)
                )
                self._settle(conn, name, now)
                report.removed.append(name)
        return report

    def _create(self, conn: Connection, schedule: Schedule, now: datetime) -> None:
        task_id = conn.execute(
            sa.insert(tasks).values(
                **schedule.task_values(), recurring=True, attempt=0, created_at=now,
                **_resting(schedule.cron.expression, schedule.cron.timezone, now, schedule.retries),
            )
        ).inserted_primary_key[0]  # fmt: skip
        conn.execute(
            sa.insert(schedules).values(
                name=schedule.name, task_id=task_id, cron=schedule.cron.expression,
                timezone=schedule.cron.timezone, retries=schedule.retries,
                lock_key=schedule.lock_key, enabled=True, defined=True, created_at=now,
                updated_at=now,
            )
        )  # fmt: skip

    def _update(self, conn: Connection, schedule: Schedule, row: Any, now: datetime) -> bool:
        """Bring a stored schedule in line with its definition; whether anything changed."""
        rescheduled = (row.cron, row.timezone) != (schedule.cron.expression, schedule.cron.timezone)
        task_values = schedule.task_values()
        stored = {column: getattr(row, column) for column in task_values}
        stored.update(name=row.task, lock_key=row.defined_lock_key)
        changed = (
            rescheduled
            or not row.defined
            or row.retries != schedule.retries
            or stored != task_values
        )
        if not changed:
            return False
        _lock_task_row(conn, row.task_id)
        # Read again under the lock: a run may have ended while this waited for it.
        row = conn.execute(_state_query().where(s.name == schedule.name)).one()
        conn.execute(
            sa.update(schedules)
            .where(s.name == schedule.name)
            .values(
                cron=schedule.cron.expression, timezone=schedule.cron.timezone,
                retries=schedule.retries, lock_key=schedule.lock_key, defined=True,
                updated_at=now,
            )
        )  # fmt: skip
        # A running row keeps its lock key until its run ends (another running row may
        # hold the new one); the end then sets the new one.
        running = status_is(Status.IN_PROGRESS)
        task_values["lock_key"] = sa.case((running, c.lock_key), else_=schedule.lock_key)
        conn.execute(sa.update(tasks).where(c.id == row.task_id).values(**task_values))
        if Status(row.status) is Status.DONE and (rescheduled or row.retries != schedule.retries):
            conn.execute(
                sa.update(tasks)
                .where(c.id == row.task_id, status_is(Status.DONE))
                .values(
                    **_resting(
                        schedule.cron.expression, schedule.cron.timezone, now, schedule.retries
                    )
                )
            )
        self._settle(conn, schedule.name, now)
        return True

    def _settle(self, conn: Connection, name: str, now: datetime) -> None:
        """Rest a paused schedule's row (cancelled), or wake a resumed one at its next tick."""
        row = conn.execute(_state_query().where(s.name == name)).one()
        status = Status(row.status)
        if not (row.enabled and row.defined):
            if status in _RESTING:
                conn.execute(
                    sa.update(tasks)
                    .where(c.id == row.task_id, c.status.in_([st.value for st in _RESTING]))
                    .values(status=Status.CANCELLED.value, finished_at=now)
                )
        elif status is Status.CANCELLED:
            conn.execute(
                sa.update(tasks)
                .where(c.id == row.task_id, status_is(Status.CANCELLED))
                .values(**_resting(row.cron, row.timezone, now, row.retries))
            )

    # --- ends of runs --------------------------------------------------------------

    def _end_recurring(
        self,
        completions: Sequence[Completion],
        *,
        connection: Connection | None = None,
        run_at: datetime | None = None,
        lease_expired: bool = False,
    ) -> int:
        """Record the ends of recurring rows' runs among ``completions``; how many applied.

        Each is fenced like any end (and, with ``lease_expired``, applies only while the
        run's lease has expired). A retry (failed with retries left) or a release keeps
        the tick; any other end finishes it: the row returns to done at the next tick
        after the database's now (or at ``run_at``), with its retries renewed. Each end
        that applies adds the run to its schedule's history (jobq.cron.runs) in the
        same transaction; one that does not (stale) adds nothing.
        """
        expired = c.locked_until < self.dialect.now() if lease_expired else sa.true()
        ends: dict[tuple[int, int], Completion] = {}
        for end in completions:
            ends.setdefault((end.id, end.attempt), end)
        if not ends:
            return 0
        query = (
            sa.select(
                c.id, c.attempt, c.retries_left, c.run_at, c.started_at, s.name, s.cron,
                s.timezone, s.retries, s.enabled, s.defined,
                s.lock_key.label("defined_lock_key"),
            )
            .select_from(tasks.outerjoin(schedules, s.task_id == c.id))
            .where(
                c.recurring,
                status_is(Status.IN_PROGRESS),
                expired,
                sa.tuple_(c.id, c.attempt).in_(sa.bindparam("fences", expanding=True)),
            )
        )  # fmt: skip

        def end_each(conn: Connection) -> int:
            rows = conn.execute(query, {"fences": list(ends)}).all()
            if not rows:
                return 0
            applied = 0
            now = self._now(conn)
            for row in rows:
                end = ends[(row.id, row.attempt)]
                values, last_status = self._recurring_end_values(row, end, now, run_at)
                fenced = sa.and_(
                    c.id == row.id, status_is(Status.IN_PROGRESS), c.attempt == row.attempt, expired
                )
                if conn.execute(sa.update(tasks).where(fenced).values(**values)).rowcount != 1:
                    continue
                applied += 1
                if row.name is None:
                    continue
                if last_status is not None:
                    conn.execute(
                        sa.update(schedules)
                        .where(s.name == row.name)
                        .values(last_status=last_status, updated_at=now)
                    )
                record_run(
                    conn, schedule=row.name, task_id=row.id, attempt=row.attempt,
                    status=run_status(end.status, end.error, lease_expired=lease_expired),
                    started_at=as_utc(row.started_at) or now, finished_at=now,
                    error=run_error(end.status, end.error),
                )  # fmt: skip
            return applied

        return self.db.write(end_each, connection, atomic=True)

    def _recurring_end_values(
        self, row: Any, end: Completion, now: datetime, run_at: datetime | None
    ) -> tuple[dict[str, Any], str | None]:
        """The SET clause ending ``row``'s run as ``end`` says, and the schedule's last status."""
        delay = next_delay(end.status, end.attempt, end.retry_delay, self.store.backoff)
        next_run = self.dialect.now_plus(delay) if run_at is None else as_utc(run_at)
        if row.name is None:
            # Its schedule is gone (a database without foreign keys lost it): end it as a
            # plain task, so it cannot come straight back.
            values = end_values(
                self.dialect, end.status, next_run=next_run, result=end.result, error=end.error
            )
            return {**values, "recurring": False}, None
        active = row.enabled and row.defined
        last_status = None if end.status is Status.QUEUED else end.status.value
        # A terminal failure (a task this worker does not know, undecodable arguments)
        # would fail the same way on a retry: it ends the tick like the last retry.
        keeps_tick = end.status is Status.QUEUED or (
            end.status is Status.FAILED and row.retries_left > 0 and not end.terminal
        )
        if keeps_tick and active:
            values = end_values(
                self.dialect, end.status, next_run=next_run, result=end.result, error=end.error
            )
            return values, last_status
        # The tick is over, or the schedule is paused: the row rests until its next tick.
        if run_at is None or not active:
            # After the tick it ran for even if the database's clock stepped back.
            after = max(now, as_utc(row.run_at))  # type: ignore[type-var]
            values = _resting(row.cron, row.timezone, after, row.retries, active=active)
        else:
            values = {
                "status": Status.DONE.value, "run_at": as_utc(run_at), "retries_left": row.retries
            }  # fmt: skip
        done = end.status is Status.DONE
        values.update(
            locked_by=None, locked_until=None, finished_at=now,
            result=end.result if done else None, error=None if done else end.error,
            # The key of the arguments it runs with next (a sync may have changed them).
            lock_key=row.defined_lock_key,
        )  # fmt: skip
        return values, last_status

    def _rescue_recurring(self) -> int:
        """End recurring runs whose lease expired as failed ('lease expired'); how many."""
        expired = sa.select(c.id, c.attempt).where(
            self.dialect.within("jobq_tasks_lease_expiry"),
            status_is(Status.IN_PROGRESS),
            c.locked_until < self.dialect.now(),
            c.recurring,
        )
        with self.db.unit(read_only=True) as conn:
            fences = conn.execute(expired).all()
        lost = [
            Completion(i, a, Status.FAILED, error="lease expired", retry_delay=0) for i, a in fences
        ]
        return self._end_recurring(lost, lease_expired=True) if lost else 0

    # --- operators ------------------------------------------------------------------

    def schedules(self) -> list[ScheduleState]:
        """Every stored schedule, by name."""
        with self.db.unit(read_only=True) as conn:
            rows = conn.execute(_state_query().order_by(s.name)).all()
        return [
            ScheduleState(
                name=row.name, task=row.task, queue=row.queue_id, cron=row.cron,
                timezone=row.timezone, enabled=row.enabled, defined=row.defined,
                status=Status(row.status), next_run=as_utc(row.run_at),  # type: ignore[arg-type]
                last_run=as_utc(row.started_at), last_status=row.last_status,
                task_id=row.task_id,
            )
            for row in rows
        ]  # fmt: skip

    def schedule_runs(self, name: str, limit: int = KEPT_RUNS) -> list[ScheduleRun]:
        """The last ``limit`` runs of schedule ``name`` (at most KEPT_RUNS are kept), newest
        first: when each started and ended, how (done, failed, timed out, lease expired,
        cancelled, released), its attempt and its error. UnknownSchedule if there is none.
        """
        check_key("name", name, required=True)
        check_int("limit", limit, minimum=0, maximum=INT32[1])
        with self.db.unit(read_only=True) as conn:
            if conn.execute(sa.select(s.name).where(s.name == name)).first() is None:
                raise UnknownSchedule(name=name)
            return read_runs(conn, name, limit)

    def set_schedule_enabled(self, name: str, enabled: bool) -> None:
        """Resume (``enabled``) or pause schedule ``name``; a run under way finishes first."""
        check_key("name", name, required=True)

        def switch(conn: Connection) -> None:
            now = self._now(conn)
            task_id = conn.execute(sa.select(s.task_id).where(s.name == name)).scalar()
            if task_id is None:
                raise UnknownSchedule(name=name)
            _lock_task_row(conn, task_id)
            conn.execute(
                sa.update(schedules).where(s.name == name).values(enabled=enabled, updated_at=now)
            )
            self._settle(conn, name, now)

        self.db.write(switch, atomic=True)

    def run_schedule_now(self, name: str) -> int:
        """Enqueue one run of schedule ``name``'s task now, apart from its row; the new id.

        The schedule's own row, its next tick and its last status stay as they are.
        """
        check_key("name", name, required=True)

        def enqueue(conn: Connection) -> int:
            row = conn.execute(_state_query().where(s.name == name)).one_or_none()
            if row is None:
                raise UnknownSchedule(name=name)
            now = self._now(conn)
            return conn.execute(
                sa.insert(tasks).values(
                    name=row.task, queue_id=row.queue_id, args=row.args, priority=row.priority,
                    lease=row.lease, timeout=row.timeout, lock_key=row.defined_lock_key,
                    retries_left=row.retries, status=Status.QUEUED.value, attempt=0,
                    recurring=False, run_at=now, created_at=now,
                )
            ).inserted_primary_key[0]  # fmt: skip

        return self.db.write(enqueue, atomic=True)

    def _now(self, conn: Connection) -> datetime:
        """The database's clock, as an aware UTC datetime."""
        now = as_utc(conn.execute(sa.select(self.dialect.now())).scalar_one())
        assert now is not None
        return now


def _lock_task_row(conn: Connection, task_id: int) -> None:
    """Lock a schedule's task row before its jobq_schedules row.

    The end of a run updates the task row, then the schedule's; every transaction that
    writes both takes them in that order, so that none can deadlock another.
    """
    conn.execute(sa.select(c.id).where(c.id == task_id).with_for_update())


def _resting(
    cron: str, timezone: str, after: datetime, retries: int, *, active: bool = True
) -> dict[str, Any]:
    """A schedule row's status, run_at and retries_left until its next tick after ``after``.

    Done and due at that tick; cancelled (resting) when paused (not ``active``), or when
    the stored expression has no tick left or no longer reads as one.
    """
    try:
        tick = Cron(cron, timezone).next_after(after)
    except InvalidOption:
        tick = None
    if active and tick is not None:
        return {"status": Status.DONE.value, "run_at": tick, "retries_left": retries}
    return {
        "status": Status.CANCELLED.value, "run_at": tick or after, "retries_left": retries,
        "finished_at": after,
    }  # fmt: skip


def _state_query() -> sa.Select[Any]:
    """Each schedule with the columns of its task row."""
    return sa.select(
        s.name, s.task_id, s.cron, s.timezone, s.retries, s.enabled, s.defined, s.last_status,
        s.lock_key.label("defined_lock_key"), c.name.label("task"), c.queue_id, c.args,
        c.priority, c.lease, c.timeout, c.lock_key, c.status, c.run_at, c.started_at,
    ).select_from(schedules.join(tasks, c.id == s.task_id))  # fmt: skip
