"""Workers started by a supervisor.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27

- ``jobq_workers.supervisor_pid``: the pid of the `jobq worker --processes N` supervisor
  that started this worker process (on the worker's own host), or NULL for a worker
  started on its own. `jobq status` and `jobq workers` show it, so that the N processes
  of one supervisor read as one group.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobq_workers", sa.Column("supervisor_pid", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobq_workers") as batch:
        batch.drop_column("supervisor_pid")
