"""PostgreSQL: one NOTIFY per INSERT statement on jobq_tasks, naming the queues it filled.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# A statement-level trigger with a transition table: a bulk insert of 5,000 tasks sends
# one notification, whose payload lists the distinct queues (capped below NOTIFY's
# 8,000-byte limit), so workers wake only for queues they serve.
CREATE_FUNCTION = """
CREATE OR REPLACE FUNCTION jobq_notify_enqueued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(
        'jobq_tasks',
        left(coalesce((SELECT string_agg(DISTINCT queue_id, ',') FROM jobq_inserted), ''), 7900)
    );
    RETURN NULL;
END
$$
"""
CREATE_TRIGGER = """
CREATE TRIGGER jobq_tasks_enqueued AFTER INSERT ON jobq_tasks
REFERENCING NEW TABLE AS jobq_inserted
FOR EACH STATEMENT EXECUTE FUNCTION jobq_notify_enqueued()
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return  # other databases poll
    op.execute(CREATE_FUNCTION)
    op.execute(CREATE_TRIGGER)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER jobq_tasks_enqueued ON jobq_tasks")
    op.execute("DROP FUNCTION IF EXISTS jobq_notify_enqueued()")
