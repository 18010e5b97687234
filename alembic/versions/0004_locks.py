"""Locks: the jobq_locks table (Mutex, TimeoutLock, Lease) and the per-task lock_key indexes.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from jobq.dialects.types import Moment, partial_index_options, table_options

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# Written out rather than imported from jobq.dialects.schema (see 0001).
status = sa.column("status", sa.String)
retries_left = sa.column("retries_left", sa.Integer)
recurring = sa.column("recurring", sa.Boolean)
lock_key = sa.column("lock_key", sa.String)

ACTIVE = sa.or_(
    status == "queued",
    sa.and_(status == "failed", retries_left > 0),
    status == "in_progress",
    sa.and_(status == "done", recurring),
)
LOCK_KEY_ACTIVE = sa.and_(lock_key.is_not(None), ACTIVE)
LOCK_KEY_RUNNING = sa.and_(lock_key.is_not(None), status == "in_progress")


def upgrade() -> None:
    op.create_table(
        "jobq_locks",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("acquired", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("owner", sa.String(255), nullable=True),
        sa.Column("locked_by", sa.String(255), nullable=True),
        sa.Column("acquired_at", Moment, nullable=True),
        sa.Column("expires_at", Moment, nullable=True),
        sa.CheckConstraint("kind IN ('mutex', 'timeout', 'lease')", name="jobq_locks_kind_valid"),
        **table_options(),
    )
    op.create_index("jobq_locks_expires_at", "jobq_locks", ["expires_at"])
    op.create_index(
        "jobq_tasks_lock_key",
        "jobq_tasks",
        ["lock_key", "id"],
        **partial_index_options(LOCK_KEY_ACTIVE),
    )
    op.create_index(
        "jobq_tasks_lock_key_held",
        "jobq_tasks",
        ["lock_key"],
        unique=True,
        **partial_index_options(LOCK_KEY_RUNNING),
    )


def downgrade() -> None:
    # The options tell MySQL to drop the generated column that emulates each index too.
    op.drop_index(
        "jobq_tasks_lock_key_held", "jobq_tasks", **partial_index_options(LOCK_KEY_RUNNING)
    )
    op.drop_index("jobq_tasks_lock_key", "jobq_tasks", **partial_index_options(LOCK_KEY_ACTIVE))
    op.drop_table("jobq_locks")
