"""Tasks: progress, cancel requests of running tasks, and ends that waiters hear of.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25

- ``progress``: what a running task last said of its progress (jobq.set_progress).
- ``cancel_requested_at``: when a cancel of the task was asked for while it ran; its
  worker stops the run, and an end that would make it wait again ends it cancelled.
- ``awaited``: someone waits for the task's end. On PostgreSQL a row trigger notifies
  channel ``jobq_ended`` (payload: the id) when an awaited task finishes or is deleted;
  its WHEN clause keeps the ends nobody waits for from doing anything more.

Marking a waiting row awaited locks it for a moment, and a capture at that moment skips
it (SKIP LOCKED): a worker woken by the task's enqueue would then find nothing and sleep
for its poll interval. So on PostgreSQL marking a waiting row awaited notifies
``jobq_tasks`` (the enqueue channel, payload its queue) once the mark commits, and the
workers look again. Only the waiter's UPDATE names ``awaited``: no other write fires it.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from jobq.dialects.types import Moment

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

CREATE_FUNCTION = """
CREATE OR REPLACE FUNCTION jobq_notify_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('jobq_ended', OLD.id::text);
    ELSE
        PERFORM pg_notify('jobq_ended', NEW.id::text);
    END IF;
    RETURN NULL;
END
$$
"""
CREATE_AWAITED_FUNCTION = """
CREATE OR REPLACE FUNCTION jobq_notify_awaited() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('jobq_tasks', NEW.queue_id);
    RETURN NULL;
END
$$
"""
CREATE_TRIGGERS = (
    """
    CREATE TRIGGER jobq_tasks_ended AFTER UPDATE ON jobq_tasks FOR EACH ROW
    WHEN (NEW.awaited AND NEW.finished_at IS NOT NULL AND OLD.finished_at IS NULL)
    EXECUTE FUNCTION jobq_notify_ended()
    """,
    """
    CREATE TRIGGER jobq_tasks_deleted AFTER DELETE ON jobq_tasks FOR EACH ROW
    WHEN (OLD.awaited) EXECUTE FUNCTION jobq_notify_ended()
    """,
    """
    CREATE TRIGGER jobq_tasks_awaited AFTER UPDATE OF awaited ON jobq_tasks FOR EACH ROW
    WHEN (NEW.awaited AND NOT OLD.awaited AND NEW.status IN ('queued', 'failed'))
    EXECUTE FUNCTION jobq_notify_awaited()
    """,
)


def upgrade() -> None:
    op.add_column("jobq_tasks", sa.Column("progress", sa.JSON(none_as_null=True), nullable=True))
    op.add_column("jobq_tasks", sa.Column("cancel_requested_at", Moment, nullable=True))
    op.add_column(
        "jobq_tasks",
        sa.Column("awaited", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(CREATE_FUNCTION)
        op.execute(CREATE_AWAITED_FUNCTION)
        for trigger in CREATE_TRIGGERS:
            op.execute(trigger)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER jobq_tasks_ended ON jobq_tasks")
        op.execute("DROP TRIGGER jobq_tasks_deleted ON jobq_tasks")
        op.execute("DROP TRIGGER jobq_tasks_awaited ON jobq_tasks")
        op.execute("DROP FUNCTION IF EXISTS jobq_notify_ended()")
        op.execute("DROP FUNCTION IF EXISTS jobq_notify_awaited()")
    # In place on every database (SQLite has had DROP COLUMN since 3.35): none of the
    # three is indexed or constrained.
    for column in ("awaited", "cancel_requested_at", "progress"):
        op.drop_column("jobq_tasks", column)
