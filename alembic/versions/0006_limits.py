"""Limits: per-queue concurrency and rate limits (jobq_limits) and rate starts (jobq_limit_starts).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from jobq.dialects.types import BigId, Moment, Seconds, table_options

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobq_limits",
        sa.Column("queue", sa.String(255), primary_key=True),
        sa.Column("concurrency", sa.Integer(), nullable=True),
        sa.Column("rate_count", sa.Integer(), nullable=True),
        sa.Column("rate_period", Seconds, nullable=True),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", Moment, nullable=False),
        sa.CheckConstraint("concurrency >= 1", name="jobq_limits_concurrency_positive"),
        sa.CheckConstraint(
            "(rate_count IS NULL AND rate_period IS NULL) OR (rate_count IS NOT NULL"
            " AND rate_period IS NOT NULL AND rate_count >= 1 AND rate_period > 0)",
            name="jobq_limits_rate_valid",
        ),
        sa.CheckConstraint(
            "concurrency IS NOT NULL OR rate_count IS NOT NULL", name="jobq_limits_not_empty"
        ),
        **table_options(),
    )
    op.create_table(
        "jobq_limit_starts",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("queue", sa.String(255), nullable=False),
        sa.Column("started_at", Moment, nullable=False),
        **table_options(),
    )
    op.create_index("jobq_limit_starts_queue", "jobq_limit_starts", ["queue", "started_at"])


def downgrade() -> None:
    op.drop_index("jobq_limit_starts_queue", "jobq_limit_starts")
    op.drop_table("jobq_limit_starts")
    op.drop_table("jobq_limits")
