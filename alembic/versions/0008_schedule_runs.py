"""Schedule runs: the last runs of each cron schedule (jobq_schedule_runs).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25

Every end of a run of a schedule's recurring row (done, failed, timed out, lease expired,
cancelled, released) adds a row, in the transaction of the end itself; the newest few per
schedule are kept. `jobq cron list --runs NAME` shows them.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from jobq.dialects.types import BigId, LongText, Moment, table_options

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobq_schedule_runs",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("schedule", sa.String(255), nullable=False),
        sa.Column("task_id", sa.BigInteger(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("started_at", Moment, nullable=False),
        sa.Column("finished_at", Moment, nullable=False),
        sa.Column("error", LongText, nullable=True),
        **table_options(),
    )
    op.create_index("jobq_schedule_runs_schedule", "jobq_schedule_runs", ["schedule", "id"])


def downgrade() -> None:
    op.drop_index("jobq_schedule_runs_schedule", "jobq_schedule_runs")
    op.drop_table("jobq_schedule_runs")
