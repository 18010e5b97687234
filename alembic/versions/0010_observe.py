"""Paused queues and trace context.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25

- ``jobq_limits.paused``: the queue is paused (`jobq queues pause`). A paused queue has a
  row in jobq_limits, limited or not, so the anti-join every capture already makes
  (``queue_id NOT IN jobq_limits``) leaves it out at no extra cost; a row may now hold
  a pause and no limit, so ``jobq_limits_not_empty`` admits that.
- ``jobq_tasks.trace_context``: the W3C trace context (``traceparent``, ``tracestate``)
  of the span that enqueued the task, for the worker's span of its run (jobq[otel]).
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from jobq.dialects.types import Moment, Seconds

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

NOT_EMPTY = "jobq_limits_not_empty"
NOT_EMPTY_BEFORE = "concurrency IS NOT NULL OR rate_count IS NOT NULL"
NOT_EMPTY_NOW = "concurrency IS NOT NULL OR rate_count IS NOT NULL OR paused"


def _limits_at_0009() -> sa.Table:
    """jobq_limits as revision 0006 made it: SQLite's rebuild copies this definition, so
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
        sa.CheckConstraint("concurrency >= 1", name="jobq_limits_concurrency_positive"),
        sa.CheckConstraint(
            "(rate_count IS NULL AND rate_period IS NULL) OR (rate_count IS NOT NULL"
            " AND rate_period IS NOT NULL AND rate_count >= 1 AND rate_period > 0)",
            name="jobq_limits_rate_valid",
        ),
        sa.CheckConstraint(NOT_EMPTY_BEFORE, name=NOT_EMPTY),
    )


def upgrade() -> None:
    op.add_column(
        "jobq_tasks", sa.Column("trace_context", sa.JSON(none_as_null=True), nullable=True)
    )
    paused = sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.false())
    with op.batch_alter_table("jobq_limits", copy_from=_limits_at_0009()) as batch:
        batch.add_column(paused)
        batch.drop_constraint(NOT_EMPTY, type_="check")
        batch.create_check_constraint(NOT_EMPTY, sa.text(NOT_EMPTY_NOW))


def downgrade() -> None:
    # A pause alone is not a limit: those rows go, and the limits stay, unpaused.
    op.execute("DELETE FROM jobq_limits WHERE concurrency IS NULL AND rate_count IS NULL")
    limits_now = _limits_at_0009()
    limits_now.append_column(
        sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.false())
    )
    for constraint in list(limits_now.constraints):
        if constraint.name == NOT_EMPTY:
            limits_now.constraints.remove(constraint)
    limits_now.append_constraint(sa.CheckConstraint(NOT_EMPTY_NOW, name=NOT_EMPTY))
    with op.batch_alter_table("jobq_limits", copy_from=limits_now) as batch:
        batch.drop_constraint(NOT_EMPTY, type_="check")
        batch.drop_column("paused")
        batch.create_check_constraint(NOT_EMPTY, sa.text(NOT_EMPTY_BEFORE))
    op.drop_column("jobq_tasks", "trace_context")
