"""A schedule's rows: the schedule with its task row, the order their locks are taken in,
and the status, run_at and retries its task row rests with between ticks."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.cron.schedule import Cron
from jobq.db.errors import InvalidOption
from jobq.db.tasks import Status, as_utc
from jobq.dialects.schema import schedules, status_is, tasks

c = tasks.c
s = schedules.c

#: Statuses of a schedule's row that rest (no run in progress): a pause makes them cancelled.
RESTING = (Status.DONE, Status.QUEUED, Status.FAILED)


def db_now(conn: Connection, now: sa.ColumnElement[Any]) -> datetime:
    """The database's clock (``now``: the dialect's), as an aware UTC datetime."""
    moment = as_utc(conn.execute(sa.select(now)).scalar_one())
    assert moment is not None
    return moment


def lock_task_row(conn: Connection, task_id: int) -> None:
    """Lock a schedule's task row before its jobq_schedules row.

    The end of a run updates the task row, then the schedule's; every transaction that
    writes both takes them in that order, so that none can deadlock another.
    """
    conn.execute(sa.select(c.id).where(c.id == task_id).with_for_update())


def resting(
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


def state_query() -> sa.Select[Any]:
    """Each schedule with the columns of its task row."""
    return sa.select(
        s.name, s.task_id, s.cron, s.timezone, s.retries, s.enabled, s.defined, s.last_status,
        s.lock_key.label("defined_lock_key"), c.name.label("task"), c.queue_id, c.args,
        c.priority, c.lease, c.timeout, c.lock_key, c.status, c.run_at, c.started_at,
    ).select_from(schedules.join(tasks, c.id == s.task_id))  # fmt: skip


def settle(conn: Connection, name: str, now: datetime) -> None:
    """Rest a paused schedule's row (cancelled), or wake a resumed one at its next tick."""
    row = conn.execute(state_query().where(s.name == name)).one()
    status = Status(row.status)
    if not (row.enabled and row.defined):
        if status in RESTING:
            conn.execute(
                sa.update(tasks)
                .where(c.id == row.task_id, c.status.in_([st.value for st in RESTING]))
                .values(status=Status.CANCELLED.value, finished_at=now)
            )
    elif status is Status.CANCELLED:
        conn.execute(
            sa.update(tasks)
            .where(c.id == row.task_id, status_is(Status.CANCELLED))
            .values(**resting(row.cron, row.timezone, now, row.retries))
        )
