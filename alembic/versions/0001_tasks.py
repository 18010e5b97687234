"""The tasks table and its indexes.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from jobq.dialects.types import (
    BigId,
    LongText,
    Moment,
    Seconds,
    partial_index_options,
    table_options,
)

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# Written out rather than imported from jobq.dialects.schema: a revision is a frozen snapshot,
# and the drift test compares the two. The column types and options of
# jobq.dialects.types spell the same DDL on PostgreSQL and SQLite as when each revision
# was written; they added MySQL's spelling when jobq first ran there.
status = sa.column("status", sa.String)
retries_left = sa.column("retries_left", sa.Integer)
recurring = sa.column("recurring", sa.Boolean)
unique_key = sa.column("unique_key", sa.String)

ACTIVE = sa.or_(
    status == "queued",
    sa.and_(status == "failed", retries_left > 0),
    status == "in_progress",
    sa.and_(status == "done", recurring),
)
HOLDS_UNIQUE_KEY = sa.and_(
    unique_key.is_not(None),
    sa.or_(
        status == "queued", status == "in_progress", sa.and_(status == "failed", retries_left > 0)
    ),
)


def upgrade() -> None:
    op.create_table(
        "jobq_tasks",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("queue_id", sa.String(255), nullable=False, server_default="default"),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("args", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False, server_default="queued"),
        sa.Column("priority", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("run_at", Moment, nullable=False),
        sa.Column("retries_left", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("lease", Seconds, nullable=False, server_default="30"),
        sa.Column("timeout", Seconds, nullable=True),
        sa.Column("locked_by", sa.String(255), nullable=True),
        sa.Column("locked_until", Moment, nullable=True),
        sa.Column("unique_key", sa.String(255), nullable=True),
        sa.Column("lock_key", sa.String(255), nullable=True),
        sa.Column("result", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("error", LongText, nullable=True),
        sa.Column("recurring", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("created_at", Moment, nullable=False),
        sa.Column("started_at", Moment, nullable=True),
        sa.Column("finished_at", Moment, nullable=True),
        sa.CheckConstraint(
            "status IN ('queued', 'in_progress', 'done', 'failed', 'cancelled')",
            name="jobq_tasks_status_valid",
        ),
        sa.CheckConstraint("retries_left >= 0", name="jobq_tasks_retries_left_nonnegative"),
        **table_options(),
    )
    op.create_index(
        "jobq_tasks_capture",
        "jobq_tasks",
        ["queue_id", sa.column("priority").desc(), "run_at", "id"],
        **partial_index_options(ACTIVE),
    )
    op.create_index(
        "jobq_tasks_capture_any_queue",
        "jobq_tasks",
        [sa.column("priority").desc(), "run_at", "id"],
        **partial_index_options(ACTIVE),
    )
    op.create_index(
        "jobq_tasks_unique_key",
        "jobq_tasks",
        ["unique_key"],
        unique=True,
        **partial_index_options(HOLDS_UNIQUE_KEY),
    )
    op.create_index(
        "jobq_tasks_lease_expiry",
        "jobq_tasks",
        ["locked_until"],
        **partial_index_options(status == "in_progress"),
    )
    op.create_index("jobq_tasks_finished_at", "jobq_tasks", ["finished_at"])


def downgrade() -> None:
    op.drop_table("jobq_tasks")
