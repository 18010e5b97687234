"""The one UPDATE that cancels tasks: waiting ones end cancelled, running ones are asked to stop."""

from __future__ import annotations

import sqlalchemy as sa

from jobq.db.tasks import Status
from jobq.dialects.base import Dialect
from jobq.dialects.schema import status_is, tasks

c = tasks.c


def cancel_update(
    dialect: Dialect, which: sa.ColumnElement[bool], error: str | None = None
) -> sa.Update:
    """One UPDATE cancelling the tasks ``which`` selects that have not finished: a waiting
    one (queued, blocked, or failed with retries left) ends cancelled (its error set to
    ``error`` if given); a running one gets a cancel request.

    One statement, deciding each row by its status as it is when the row is written, so
    that a run starting or ending meanwhile cannot slip between two: PostgreSQL (READ
    COMMITTED) re-reads a row changed since the statement began and re-evaluates WHERE and
    SET on its newest version, InnoDB's UPDATE reads the newest committed version under
    its lock, and SQLite's writers take turns. Status is set last: MySQL's later
    assignments see the earlier ones' values.
    """
    running = status_is(Status.IN_PROGRESS)
    now = dialect.now()
    finished_error = (
        []
        if error is None
        else [(c.error, sa.case((running, c.error), else_=sa.literal(error, sa.Text)))]
    )
    return (
        sa.update(tasks)
        .where(
            which,
            sa.or_(
                status_is(Status.QUEUED),
                status_is(Status.BLOCKED),
                sa.and_(status_is(Status.FAILED), c.retries_left > 0),
                running,
            ),
        )
        .ordered_values(
            (
                c.cancel_requested_at,
                sa.case(
                    (running, sa.func.coalesce(c.cancel_requested_at, now)),
                    else_=c.cancel_requested_at,
                ),
            ),
            *finished_error,
            (c.finished_at, sa.case((running, c.finished_at), else_=now)),
            (c.status, sa.case((running, c.status), else_=Status.CANCELLED.value)),
        )
    )
