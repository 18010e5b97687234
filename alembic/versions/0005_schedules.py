"""Cron schedules: the jobq_schedules table, one row per schedule and its recurring task.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from jobq.dialects.types import BigId, Moment, table_options

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobq_schedules",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column(
            "task_id",
            BigId,
            sa.ForeignKey("jobq_tasks.id", ondelete="CASCADE", name="jobq_schedules_task_id_fkey"),
            nullable=False,
        ),
        sa.Column("cron", sa.String(255), nullable=False),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("retries", sa.Integer(), nullable=False),
        sa.Column("lock_key", sa.String(255), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=False, server_default=sa.true()),
        sa.Column("defined", sa.Boolean(), nullable=False, server_default=sa.true()),
        sa.Column("last_status", sa.String(16), nullable=True),
        sa.Column("created_at", Moment, nullable=False),
        sa.Column("updated_at", Moment, nullable=False),
        sa.UniqueConstraint("task_id", name="jobq_schedules_task_id_key"),
        **table_options(),
    )


def downgrade() -> None:
    # Without their schedules, recurring rows could never get a next tick: drop them too.
    op.execute(sa.text("DELETE FROM jobq_tasks WHERE recurring"))
    op.drop_table("jobq_schedules")
