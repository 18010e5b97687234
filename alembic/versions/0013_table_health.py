"""Table health: per-queue retention of finished tasks, and PostgreSQL's table settings.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27

- ``jobq_queue_retention``: queues whose finished tasks are kept for a time of their own
  (`jobq queues retain QUEUE 30d`; NULL: forever) rather than the workers' ``--retain``.
- PostgreSQL: fillfactor and autovacuum settings on the high-churn tables
  (jobq.dialects.postgresql_storage).
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from jobq.dialects import postgresql_storage
from jobq.dialects.types import Moment, Seconds, table_options

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobq_queue_retention",
        sa.Column("queue", sa.String(255), primary_key=True),
        sa.Column("retain_seconds", Seconds, nullable=True),
        sa.Column("updated_at", Moment, nullable=False),
        sa.CheckConstraint("retain_seconds > 0", name="jobq_queue_retention_positive"),
        **table_options(),
    )
    if op.get_bind().dialect.name == "postgresql":
        postgresql_storage.set_table_settings(op.get_bind())


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        postgresql_storage.reset_table_settings(op.get_bind())
    op.drop_table("jobq_queue_retention")
