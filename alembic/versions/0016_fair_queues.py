"""Fair queues: captures shared between fair keys by weight.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07

- ``jobq_tasks.fair_key``: the key a fair queue shares its captures by (NULL: none given),
  and two indexes of the rows that have one, partial where the database can: the waiting
  rows of each key in capture order (``jobq_tasks_fair``), and each key's runs
  (``jobq_tasks_fair_running``), for its cap. Rows without a key are in neither.
- ``jobq_limits.fair``, ``default_weight``, ``max_running_per_key``: a fair queue is a row
  of jobq_limits, so the capture statements of other queues, which already leave every
  queue with a row to its limiter, stay as they were; ``jobq_limits_not_empty`` admits a
  row that only makes its queue fair.
- ``jobq_fair_keys``: whose turn it is, one row per key of a fair queue (jobq.limits.fair).

The indexes are built in the upgrade's transaction: writes to jobq_tasks wait for the
build, a scan of the table.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from jobq.dialects.types import Double, Moment, Seconds, partial_index_options, table_options

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

NOT_EMPTY = "jobq_limits_not_empty"
NOT_EMPTY_BEFORE = "concurrency IS NOT NULL OR rate_count IS NOT NULL OR paused"
NOT_EMPTY_NOW = "concurrency IS NOT NULL OR rate_count IS NOT NULL OR paused OR fair"
FAIR_VALID = "jobq_limits_fair_valid"

# Written out rather than imported from jobq.dialects.schema, as in revision 0001.
status = sa.column("status", sa.String)
retries_left = sa.column("retries_left", sa.Integer)
recurring = sa.column("recurring", sa.Boolean)
HAS_FAIR_KEY = sa.column("fair_key", sa.String).is_not(None)
WAITING = sa.or_(
    status == "queued",
    sa.and_(status == "failed", retries_left > 0),
    sa.and_(status == "done", recurring),
)
TASK_INDEXES = {
    "jobq_tasks_fair": (
        ["queue_id", "fair_key", sa.column("priority").desc(), "run_at", "id"],
        sa.and_(WAITING, HAS_FAIR_KEY),
    ),
    "jobq_tasks_fair_running": (
        ["queue_id", "fair_key"],
        sa.and_(status == "in_progress", HAS_FAIR_KEY),
    ),
}
NOT_IDLE = sa.column("idle", sa.Boolean) == sa.false()


def _limits_at_0015() -> sa.Table:
    """jobq_limits as revision 0010 left it: SQLite's rebuild copies this definition, so
    its named CHECK constraints survive (reflection would not name them)."""
    return sa.Table(
        "jobq_limits",
        sa.MetaData(),
        sa.Column("queue", sa.String(255), primary_key=True),
        sa.Column("concurrency", sa.Integer(), nullable=True),
        sa.Column("rate_count", sa.Integer(), nullable=True),
        sa.Column("rate_period", Seconds, nullable=True),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", Moment, nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.CheckConstraint("concurrency >= 1", name="jobq_limits_concurrency_positive"),
        sa.CheckConstraint(
            "(rate_count IS NULL AND rate_period IS NULL) OR (rate_count IS NOT NULL"
            " AND rate_period IS NOT NULL AND rate_count >= 1 AND rate_period > 0)",
            name="jobq_limits_rate_valid",
        ),
        sa.CheckConstraint(NOT_EMPTY_BEFORE, name=NOT_EMPTY),
    )


def _fair_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("fair", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("default_weight", sa.Integer(), nullable=True),
        sa.Column("max_running_per_key", sa.Integer(), nullable=True),
    ]


def upgrade() -> None:
    op.add_column("jobq_tasks", sa.Column("fair_key", sa.String(255), nullable=True))
    for name, (columns, where) in TASK_INDEXES.items():
        op.create_index(name, "jobq_tasks", columns, **partial_index_options(where))
    with op.batch_alter_table("jobq_limits", copy_from=_limits_at_0015()) as batch:
        for column in _fair_columns():
            batch.add_column(column)
        batch.drop_constraint(NOT_EMPTY, type_="check")
        batch.create_check_constraint(NOT_EMPTY, sa.text(NOT_EMPTY_NOW))
        batch.create_check_constraint(
            FAIR_VALID, sa.text("default_weight >= 1 AND max_running_per_key >= 1")
        )
    op.create_table(
        "jobq_fair_keys",
        sa.Column("queue", sa.String(255), primary_key=True),
        sa.Column("fair_key", sa.String(255), primary_key=True),
        sa.Column("turn", Double, nullable=False, server_default="-1"),
        sa.Column("weight", sa.Integer(), nullable=True),
        sa.Column("idle", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("version", sa.BigInteger(), nullable=False, server_default="0"),
        sa.CheckConstraint("weight >= 1", name="jobq_fair_keys_weight_positive"),
        **table_options(),
    )
    op.create_index(
        "jobq_fair_keys_turn",
        "jobq_fair_keys",
        ["queue", "turn", "fair_key"],
        postgresql_where=NOT_IDLE,
        sqlite_where=NOT_IDLE,
    )


def downgrade() -> None:
    op.drop_index("jobq_fair_keys_turn", "jobq_fair_keys")
    op.drop_table("jobq_fair_keys")
    # Fairness alone is neither a limit nor a pause: those rows go, the others stay.
    op.execute(
        "DELETE FROM jobq_limits WHERE concurrency IS NULL AND rate_count IS NULL AND NOT paused"
    )
    limits_now = _limits_at_0015()
    for column in _fair_columns():
        limits_now.append_column(column)
    for constraint in list(limits_now.constraints):
        if constraint.name == NOT_EMPTY:
            limits_now.constraints.remove(constraint)
    limits_now.append_constraint(sa.CheckConstraint(NOT_EMPTY_NOW, name=NOT_EMPTY))
    limits_now.append_constraint(
        sa.CheckConstraint("default_weight >= 1 AND max_running_per_key >= 1", name=FAIR_VALID)
    )
    with op.batch_alter_table("jobq_limits", copy_from=limits_now) as batch:
        batch.drop_constraint(FAIR_VALID, type_="check")
        batch.drop_constraint(NOT_EMPTY, type_="check")
        for column in reversed(_fair_columns()):
            batch.drop_column(column.name)
        batch.create_check_constraint(NOT_EMPTY, sa.text(NOT_EMPTY_BEFORE))
    for name, (_columns, where) in TASK_INDEXES.items():
        op.drop_index(name, "jobq_tasks", **partial_index_options(where))
    op.drop_column("jobq_tasks", "fair_key")
