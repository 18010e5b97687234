"""Fair queues by deficit round robin: a cursor in the queue's row, no turn per key.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-08

A fair queue's captures visit its keys in key order, round and round, each visit taking up
to the key's weight in rows (jobq.limits.fair_capture). What a capture writes is where it
stopped, in the queue's jobq_limits row, which it holds locked anyway:

- ``jobq_limits.fair_cursor`` and ``fair_cursor_taken``: the last key visited, and the rows
  it took of a visit the full capture cut short (0: the visit ended).
- ``jobq_fair_keys.turn`` goes, and with it the index of the keys in turn order, which
  every capture rewrote for each key it served; ``jobq_fair_keys_awake`` holds the keys
  that are not idle in key order (partial where the database can).

Fairness restarts at the first key: the virtual times of stride scheduling have no
meaning in a round.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from jobq.dialects.types import Double, Moment, Seconds, table_options

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

NOT_IDLE = sa.column("idle", sa.Boolean) == sa.false()


def _fair_keys_at_0016() -> sa.Table:
    """jobq_fair_keys as revision 0016 made it: SQLite's rebuild copies this definition,
    so its named CHECK constraint survives."""
    return sa.Table(
        "jobq_fair_keys",
        sa.MetaData(),
        sa.Column("queue", sa.String(255), primary_key=True),
        sa.Column("fair_key", sa.String(255), primary_key=True),
        sa.Column("turn", Double, nullable=False, server_default="-1"),
        sa.Column("weight", sa.Integer(), nullable=True),
        sa.Column("idle", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("version", sa.BigInteger(), nullable=False, server_default="0"),
        sa.CheckConstraint("weight >= 1", name="jobq_fair_keys_weight_positive"),
        **table_options(),
    )


def _limits_at_0017() -> sa.Table:
    """jobq_limits as this revision leaves it, for SQLite's rebuild in the downgrade."""
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
        sa.Column("fair", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("default_weight", sa.Integer(), nullable=True),
        sa.Column("max_running_per_key", sa.Integer(), nullable=True),
        *_cursor_columns(),
        sa.CheckConstraint("concurrency >= 1", name="jobq_limits_concurrency_positive"),
        sa.CheckConstraint(
            "(rate_count IS NULL AND rate_period IS NULL) OR (rate_count IS NOT NULL"
            " AND rate_period IS NOT NULL AND rate_count >= 1 AND rate_period > 0)",
            name="jobq_limits_rate_valid",
        ),
        sa.CheckConstraint(
            "concurrency IS NOT NULL OR rate_count IS NOT NULL OR paused OR fair",
            name="jobq_limits_not_empty",
        ),
        sa.CheckConstraint(
            "default_weight >= 1 AND max_running_per_key >= 1", name="jobq_limits_fair_valid"
        ),
        **table_options(),
    )


def _cursor_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("fair_cursor", sa.String(255), nullable=True),
        sa.Column("fair_cursor_taken", sa.Integer(), nullable=False, server_default="0"),
    ]


def _index(name: str, columns: list[str]) -> None:
    op.create_index(
        name, "jobq_fair_keys", columns, postgresql_where=NOT_IDLE, sqlite_where=NOT_IDLE
    )


def upgrade() -> None:
    for column in _cursor_columns():
        op.add_column("jobq_limits", column)
    op.drop_index("jobq_fair_keys_turn", "jobq_fair_keys")
    with op.batch_alter_table("jobq_fair_keys", copy_from=_fair_keys_at_0016()) as batch:
        batch.drop_column("turn")
    _index("jobq_fair_keys_awake", ["queue", "fair_key"])


def downgrade() -> None:
    op.drop_index("jobq_fair_keys_awake", "jobq_fair_keys")
    op.add_column("jobq_fair_keys", sa.Column("turn", Double, nullable=False, server_default="-1"))
    _index("jobq_fair_keys_turn", ["queue", "turn", "fair_key"])
    with op.batch_alter_table("jobq_limits", copy_from=_limits_at_0017()) as batch:
        batch.drop_column("fair_cursor_taken")
        batch.drop_column("fair_cursor")
