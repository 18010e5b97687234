"""Tasks: a NULL lease means the worker's definition of the task decides.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24

Before, every row carried a lease (30 s unless the enqueuer knew the task), so a task
enqueued by name alone kept 30 s whatever its `@app.task(lease=...)` said. Now only a
lease given explicitly at enqueue is stored; a worker uses its own definition for the rest.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from jobq.dialects.types import Seconds, partial_index_options

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# The capture indexes as revision 0001 made them: SQLite's rebuild reflects them without
# their DESC, so they are made again after it.
status = sa.column("status", sa.String)
retries_left = sa.column("retries_left", sa.Integer)
recurring = sa.column("recurring", sa.Boolean)
ACTIVE = sa.or_(
    status == "queued",
    sa.and_(status == "failed", retries_left > 0),
    status == "in_progress",
    sa.and_(status == "done", recurring),
)
CAPTURE_INDEXES = {
    "jobq_tasks_capture": ["queue_id", sa.column("priority").desc(), "run_at", "id"],
    "jobq_tasks_capture_any_queue": [sa.column("priority").desc(), "run_at", "id"],
}


def _alter_lease(nullable: bool, server_default: str | None) -> None:
    # SQLite cannot drop NOT NULL in place: batch mode rebuilds the table there (its
    # CHECK constraints and partial indexes reflected and recreated), and alters it in
    # place elsewhere.
    with op.batch_alter_table("jobq_tasks") as batch:
        batch.alter_column(
            "lease", existing_type=Seconds, nullable=nullable, server_default=server_default
        )
    if op.get_bind().dialect.name == "sqlite":
        for name, columns in CAPTURE_INDEXES.items():
            op.drop_index(name, "jobq_tasks")
            op.create_index(name, "jobq_tasks", columns, **partial_index_options(ACTIVE))


def upgrade() -> None:
    _alter_lease(True, None)


def downgrade() -> None:
    op.execute("UPDATE jobq_tasks SET lease = 30 WHERE lease IS NULL")
    _alter_lease(False, "30")
