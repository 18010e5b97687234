"""The sync of an app's schedules into the database: each created, updated, or no longer
defined, in one transaction (Periodic.sync_schedules runs it, and tries again when two
workers starting at once both create a schedule)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.cron.schedule_rows import lock_task_row, resting, settle, state_query
from jobq.cron.values import Schedule, SyncReport
from jobq.db.tasks import Status
from jobq.dialects.schema import schedules, status_is, tasks

c = tasks.c
s = schedules.c


def sync(
    conn: Connection, wanted: dict[str, Schedule], queues: Sequence[str] | None, now: datetime
) -> SyncReport:
    """Make the stored schedules match ``wanted`` (by name) at the database's ``now``, on
    ``conn`` in its transaction; a stored schedule on one of ``queues`` (None: any queue)
    that ``wanted`` lacks is no longer defined."""
    stored = {row.name: row for row in conn.execute(state_query())}
    report = SyncReport([], [], [])
    # In name order, so that two syncs lock rows in one order and cannot deadlock.
    for name, schedule in sorted(wanted.items()):
        row = stored.get(name)
        if row is None:
            create(conn, schedule, now)
            report.created.append(name)
        elif update(conn, schedule, row, now):
            report.updated.append(name)
    for name, row in sorted(stored.items()):
        serves = queues is None or row.queue_id in queues
        if name not in wanted and row.defined and serves:
            lock_task_row(conn, row.task_id)
            conn.execute(
                sa.update(schedules).where(s.name == name).values(defined=False, updated_at=now)
            )
            settle(conn, name, now)
            report.removed.append(name)
    return report


def create(conn: Connection, schedule: Schedule, now: datetime) -> None:
    """Insert a new schedule's task row, first due at its next tick, and its schedule row."""
    inserted = conn.execute(
        sa.insert(tasks).values(
            **schedule.task_values(), recurring=True, attempt=0, created_at=now,
            **resting(schedule.cron.expression, schedule.cron.timezone, now, schedule.retries),
        )
    ).inserted_primary_key  # fmt: skip
    assert inserted is not None  # a single-row INSERT has its key
    task_id = inserted[0]
    conn.execute(
        sa.insert(schedules).values(
            name=schedule.name, task_id=task_id, cron=schedule.cron.expression,
            timezone=schedule.cron.timezone, retries=schedule.retries,
            lock_key=schedule.lock_key, enabled=True, defined=True, created_at=now,
            updated_at=now,
        )
    )  # fmt: skip


def update(conn: Connection, schedule: Schedule, row: Any, now: datetime) -> bool:
    """Bring a stored schedule in line with its definition; whether anything changed."""
    rescheduled = (row.cron, row.timezone) != (schedule.cron.expression, schedule.cron.timezone)
    task_values = schedule.task_values()
    stored = {column: getattr(row, column) for column in task_values}
    stored.update(name=row.task, lock_key=row.defined_lock_key)
    changed = (
        rescheduled or not row.defined or row.retries != schedule.retries or stored != task_values
    )
    if not changed:
        return False
    lock_task_row(conn, row.task_id)
    # Read again under the lock: a run may have ended while this waited for it.
    row = conn.execute(state_query().where(s.name == schedule.name)).one()
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
                **resting(schedule.cron.expression, schedule.cron.timezone, now, schedule.retries)
            )
        )
    settle(conn, schedule.name, now)
    return True
