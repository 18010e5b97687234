"""The live-worker registry.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from jobq.dialects.types import Moment, table_options

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobq_workers",
        sa.Column("worker_id", sa.String(255), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("queues", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("started_at", Moment, nullable=False),
        sa.Column("last_seen", Moment, nullable=False),
        **table_options(),
    )


def downgrade() -> None:
    op.drop_table("jobq_workers")
