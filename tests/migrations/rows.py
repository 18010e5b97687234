"""Task rows read and written with plain SQL, on a database that an older revision left.

This jobq's Store reads every column of jobq/dialects/schema.py, so on a database below head (one
without 0009's progress, cancel_requested_at and awaited, say) it says to migrate. The
step-by-step migration tests read rows here instead, naming the columns the revision has
and using the Core table of jobq/dialects/schema.py for them (so values are decoded alike at every
revision: datetimes, JSON, booleans).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

import jobq
from jobq.db.tasks import Status
from jobq.dialects.schema import tasks

#: The columns revision 0009 added to jobq_tasks.
ADDED_BY_0009 = ("progress", "cancel_requested_at", "awaited")

#: The columns revision 0010 added to jobq_tasks.
ADDED_BY_0010 = ("trace_context",)

#: The columns revision 0011 added to jobq_tasks.
ADDED_BY_0011 = ("workflow_id",)

#: The columns revision 0016 added to jobq_tasks.
ADDED_BY_0016 = ("fair_key",)

#: The columns of jobq_tasks that revisions 0011 and later added, with (on MySQL) the
#: generated columns of their partial indexes.
COLUMNS_SINCE_0011 = {
    "workflow_id",
    "jobq_tasks_workflow_on",
    "jobq_tasks_blocked_on",
    "fair_key",
    "jobq_tasks_fair_on",
    "jobq_tasks_fair_running_on",
}

#: The tables revisions 0011 and later added.
TABLES_SINCE_0011 = {
    "jobq_workflows",
    "jobq_task_edges",
    "jobq_queue_retention",
    "jobq_fair_keys",
}

#: The columns jobq_tasks had from 0001 to 0008 (no revision before 0009 changed the set).
COLUMNS_BEFORE_0009 = tuple(
    col.name
    for col in tasks.c
    if col.name not in ADDED_BY_0009 + ADDED_BY_0010 + ADDED_BY_0011 + ADDED_BY_0016
)
#: The columns jobq_tasks had at 0009.
COLUMNS_AT_0009 = COLUMNS_BEFORE_0009 + ADDED_BY_0009


def task_rows(
    store: jobq.Store, columns: Sequence[str] = COLUMNS_BEFORE_0009
) -> list[dict[str, Any]]:
    """Every task row as a dict of ``columns``, ordered by id: for 'nothing changed' checks."""
    query = sa.select(*(tasks.c[name] for name in columns)).order_by(tasks.c.id)
    with store.engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(query)]


def task_row(
    store: jobq.Store, task_id: int, columns: Sequence[str] = COLUMNS_BEFORE_0009
) -> dict[str, Any] | None:
    """Task ``task_id``'s row as a dict of ``columns``, or None when there is none."""
    query = sa.select(*(tasks.c[name] for name in columns)).where(tasks.c.id == task_id)
    with store.engine.connect() as conn:
        row = conn.execute(query).one_or_none()
    return None if row is None else dict(row._mapping)


def capture_in_sql(store: jobq.Store, task_id: int, worker_id: str = "w") -> int:
    """Start a run of task ``task_id`` (queued, or a schedule's done row) as capture does;
    its attempt, the fence that ends the run.

    The SET clause of jobq.dialects.base.Dialect.capture_values, written out here rather
    than reused: that one may come to set columns that later revisions add.
    """
    dialect = store.dialect
    c = tasks.c
    capturable = sa.or_(
        c.status == Status.QUEUED.value, sa.and_(c.status == Status.DONE.value, c.recurring)
    )
    with store.engine.begin() as conn:
        started = conn.execute(
            sa.update(tasks)
            .where(c.id == task_id, capturable)
            .values(
                status=Status.IN_PROGRESS.value,
                attempt=c.attempt + 1,
                locked_by=worker_id,
                locked_until=dialect.now_plus(sa.func.coalesce(c.lease, 30.0, type_=sa.Float)),
                started_at=dialect.now(),
                finished_at=None,
            )
        )
        assert started.rowcount == 1, f"task {task_id} is not capturable"
        return conn.execute(sa.select(c.attempt).where(c.id == task_id)).scalar_one()


def end_in_sql(store: jobq.Store, task_id: int, attempt: int, result: Any = None) -> None:
    """End run ``attempt`` of task ``task_id`` done with ``result``, as set_status does."""
    c = tasks.c
    with store.engine.begin() as conn:
        ended = conn.execute(
            sa.update(tasks)
            .where(c.id == task_id, c.status == Status.IN_PROGRESS.value, c.attempt == attempt)
            .values(
                status=Status.DONE.value,
                result=result,
                error=None,
                locked_by=None,
                locked_until=None,
                finished_at=store.dialect.now(),
            )
        )
        assert ended.rowcount == 1, f"run {attempt} of task {task_id} is not under way"


def old_revision_store(url: str) -> jobq.Store:
    """A Store that enqueues as one of a revision before 0016 would, for rows written at
    such a revision: it never asks which queues are fair (jobq_limits has no such column
    yet), which a Store of today does at its first enqueue."""
    store = jobq.Store(url)
    store.hooks.fair_keys = None
    return store
