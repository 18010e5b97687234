"""Capture indexes of the waiting rows only.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27

- ``jobq_tasks_capture`` and ``jobq_tasks_capture_any_queue`` hold the rows that wait to
  be captured (queued, failed with retries left, a recurring row at rest), no longer the
  running ones: a capture walked past every run in flight before reaching a waiting row
  (512 of them at 16 workers of 32 slots), and throughput fell as workers were added
  (benchmarks/scale_out.py). Capture finds a run whose lease expired through
  ``jobq_tasks_lease_expiry`` instead (jobq.dialects.predicates).

The indexes are built again in the upgrade's transaction (on MySQL, with their flag
columns): writes to jobq_tasks wait for the build, a scan of the table.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from jobq.dialects.types import partial_index_options

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# Written out rather than imported from jobq.dialects.schema, as in revision 0001.
status = sa.column("status", sa.String)
retries_left = sa.column("retries_left", sa.Integer)
recurring = sa.column("recurring", sa.Boolean)
WAITING = sa.or_(
    status == "queued",
    sa.and_(status == "failed", retries_left > 0),
    sa.and_(status == "done", recurring),
)
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


def _rebuild(old: sa.ColumnElement[bool], new: sa.ColumnElement[bool]) -> None:
    for name, columns in CAPTURE_INDEXES.items():
        # The old predicate too: on MySQL it says the index has a flag column to drop.
        op.drop_index(name, "jobq_tasks", **partial_index_options(old))
        op.create_index(name, "jobq_tasks", columns, **partial_index_options(new))


def upgrade() -> None:
    _rebuild(ACTIVE, WAITING)


def downgrade() -> None:
    _rebuild(WAITING, ACTIVE)
