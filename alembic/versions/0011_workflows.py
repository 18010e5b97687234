"""Workflows: nodes that wait for their parents, and the edges between them.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27

- ``jobq_tasks.status`` admits ``blocked``: a workflow node waiting for its parents.
  No capture index holds blocked rows, so waiting nodes cost capture nothing.
- ``jobq_tasks.workflow_id`` names the workflow a task is a node of (NULL otherwise),
  indexed for the nodes of one workflow; ``jobq_tasks_blocked`` indexes waiting nodes.
- ``jobq_workflows``: one row a workflow. ``jobq_task_edges``: child, position in its
  ``after=`` list, parent, and whether that parent is done.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from jobq.dialects.types import BigId, Moment, partial_index_options, table_options

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

STATUS_VALID = "jobq_tasks_status_valid"
STATUSES_BEFORE = "status IN ('queued', 'in_progress', 'done', 'failed', 'cancelled')"
STATUSES_NOW = "status IN ('queued', 'in_progress', 'done', 'failed', 'cancelled', 'blocked')"

# Written out rather than imported from jobq.dialects.schema (a revision is a frozen snapshot).
status = sa.column("status", sa.String)
retries_left = sa.column("retries_left", sa.Integer)
recurring = sa.column("recurring", sa.Boolean)
ACTIVE = sa.or_(
    status == "queued",
    sa.and_(status == "failed", retries_left > 0),
    status == "in_progress",
    sa.and_(status == "done", recurring),
)
# SQLite's rebuild reflects these without their DESC: they are made again after it.
CAPTURE_INDEXES = {
    "jobq_tasks_capture": ["queue_id", sa.column("priority").desc(), "run_at", "id"],
    "jobq_tasks_capture_any_queue": [sa.column("priority").desc(), "run_at", "id"],
}

workflow_id = sa.column("workflow_id", sa.BigInteger)
INDEXES = {
    "jobq_tasks_workflow": (["workflow_id", "id"], workflow_id.is_not(None)),
    "jobq_tasks_blocked": (["id"], status == "blocked"),
}


def _allow_statuses(check: str) -> None:
    # SQLite cannot change a CHECK in place: batch mode rebuilds the table there (its
    # named CHECKs and indexes reflected and made again) and alters it in place elsewhere.
    with op.batch_alter_table("jobq_tasks") as batch:
        batch.drop_constraint(STATUS_VALID, type_="check")
        batch.create_check_constraint(STATUS_VALID, sa.text(check))
    if op.get_bind().dialect.name == "sqlite":
        for name, columns in CAPTURE_INDEXES.items():
            op.drop_index(name, "jobq_tasks")
            op.create_index(name, "jobq_tasks", columns, **partial_index_options(ACTIVE))


def upgrade() -> None:
    _allow_statuses(STATUSES_NOW)
    op.add_column("jobq_tasks", sa.Column("workflow_id", sa.BigInteger(), nullable=True))
    for name, (columns, where) in INDEXES.items():
        op.create_index(name, "jobq_tasks", columns, **partial_index_options(where))
    op.create_table(
        "jobq_workflows",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("nodes", sa.Integer(), nullable=False),
        sa.Column("created_at", Moment, nullable=False),
        **table_options(),
    )
    op.create_table(
        "jobq_task_edges",
        sa.Column(
            "child_id",
            BigId,
            sa.ForeignKey(
                "jobq_tasks.id", ondelete="CASCADE", name="jobq_task_edges_child_id_fkey"
            ),
            primary_key=True,
        ),
        sa.Column("position", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("parent_id", sa.BigInteger(), nullable=False),
        sa.Column("parent_done", sa.Boolean(), nullable=False, server_default=sa.false()),
        **table_options(),
    )
    op.create_index("jobq_task_edges_parent", "jobq_task_edges", ["parent_id"])
    parent_done = sa.column("parent_done", sa.Boolean)
    op.create_index(
        "jobq_task_edges_pending",
        "jobq_task_edges",
        ["child_id", "parent_done", sa.column("position").desc()],
        postgresql_where=parent_done == sa.false(),
        sqlite_where=parent_done == sa.false(),
    )


def downgrade() -> None:
    op.drop_table("jobq_task_edges")
    op.drop_table("jobq_workflows")
    # Nodes still waiting cannot wait for anything any more: they end cancelled.
    op.execute(
        "UPDATE jobq_tasks SET status = 'cancelled', error = 'workflows were removed "
        "(downgrade below revision 0011)' WHERE status = 'blocked'"
    )
    for name, (_, where) in INDEXES.items():
        # MySQL's emulation drops the index's generated column with it.
        op.drop_index(name, "jobq_tasks", **partial_index_options(where))
    op.drop_column("jobq_tasks", "workflow_id")
    _allow_statuses(STATUSES_BEFORE)
