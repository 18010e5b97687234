"""The finished_at index holds the finished rows only.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07

``jobq_tasks_finished_at`` serves retention (rows finished before a cutoff) and the
dashboard (rows finished within the last minutes): every query of it compares
finished_at, so a row not finished never needs to be in it. Yet a plain index holds a
NULL entry for each waiting and running row, written at its insert and again at its
capture (neither update is HOT): two of the nine index entries a task's three writes
made, and a backlog of a million rows meant a million entries for vacuum to walk
(benchmarks/sustained_load.py, issue 42). On PostgreSQL and SQLite it becomes a partial
index of the rows with a finished_at; MySQL has no partial indexes and keeps its own.

The index is built again in the upgrade's transaction: writes to jobq_tasks wait for the
build, a scan of the table.
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

NAME = "jobq_tasks_finished_at"
# Written out rather than imported from jobq.dialects.schema, as in revision 0001.
FINISHED = sa.column("finished_at", sa.DateTime).is_not(None)


def _native_partial_indexes() -> bool:
    return op.get_bind().dialect.name in ("postgresql", "sqlite")


def upgrade() -> None:
    if _native_partial_indexes():
        op.drop_index(NAME, "jobq_tasks")
        op.create_index(
            NAME, "jobq_tasks", ["finished_at"], postgresql_where=FINISHED, sqlite_where=FINISHED
        )


def downgrade() -> None:
    if _native_partial_indexes():
        op.drop_index(NAME, "jobq_tasks")
        op.create_index(NAME, "jobq_tasks", ["finished_at"])
