"""Cancelling and purging a queue's waiting tasks, and pruning finished ones, in batches,
each its own short transaction.

A queue may hold millions of waiting rows: one statement over all of them would hold one
long transaction (and its locks) while workers capture and end runs around it. Each batch
instead reads the next ids in id order, then updates or deletes those rows in the same
transaction, saying again that each must still be waiting: a row captured meanwhile is
left alone. Two statements rather than one with a LIMIT subquery: MariaDB refuses a
DELETE or UPDATE whose subquery reads the same table with a LIMIT.

A blocked workflow node (waiting for its parents) is a waiting task too. Cancelling or
deleting a node settles the nodes after it in the same transaction, as a single cancel
does: their blocked descendants outside the queue end cancelled, naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.core.hooks import Hooks
from jobq.db.tasks import Status
from jobq.db.validation import INT32, check_int, check_key
from jobq.dialects.schema import HAS_RETRIES, status_is, task_edges, tasks
from jobq.engine.database import Database

c = tasks.c


class HasDatabase(Protocol):
    """What the batches need of a jobq.Store: its database."""

    db: Database


class SettlesNodes(HasDatabase, Protocol):
    """What cancelling and purging need of a TaskStore: its database, and its hooks, which
    settle the nodes after the workflow nodes a batch took (Hooks.after_removal)."""

    hooks: Hooks


#: How many tasks a batch takes by default.
DEFAULT_BATCH = 10_000
#: Ids named by one UPDATE or DELETE: a batch larger than this takes several statements,
#: in its one transaction, so that no statement passes a database's limit on parameters
#: (SQLite's is 32,766, PostgreSQL's 65,535).
_IDS_PER_STATEMENT = 1_000

#: A waiting task: queued, blocked (a workflow node waiting for its parents), or failed
#: with retries left; never a schedule's recurring row.
WAITING = sa.and_(
    sa.or_(
        status_is(Status.QUEUED),
        status_is(Status.BLOCKED),
        sa.and_(status_is(Status.FAILED), HAS_RETRIES),
    ),
    sa.not_(c.recurring),
)

# The next ids of a batch: the queue's waiting tasks after the last batch's, in id order.
_NEXT_IDS = (
    sa.select(c.id)
    .where(
        c.queue_id == sa.bindparam("queue", type_=sa.String),
        WAITING,
        c.id > sa.bindparam("after", type_=sa.BigInteger),
    )
    .order_by(c.id)
    .limit(sa.bindparam("batch", type_=sa.Integer))
)

#: One batch's work on the ids it read, in its transaction: how many rows it changed.
Apply = Callable[[Connection, Sequence[int], str], int]


def cancel_waiting(store: SettlesNodes, queue: str, *, batch_size: int = DEFAULT_BATCH) -> int:
    """Cancel every waiting task of ``queue`` (queued, blocked, or failed with retries
    left), as TaskStore.cancel cancels one, in batches of ``batch_size``; how many were
    cancelled (of ``queue``: not the descendants elsewhere cancelled with them)."""
    update = sa.update(tasks).values(
        status=Status.CANCELLED.value, finished_at=store.db.dialect.now()
    )

    def apply(conn: Connection, ids: Sequence[int], queue: str) -> int:
        cancelled = conn.execute(update.where(c.id.in_(ids), c.queue_id == queue, WAITING)).rowcount
        store.hooks.removed(conn, ids, queue)  # workflow nodes' descendants, if any
        return cancelled

    return _in_batches(store, queue, batch_size, apply)


def purge(store: SettlesNodes, queue: str, *, batch_size: int = DEFAULT_BATCH) -> int:
    """Delete every waiting task of ``queue`` (queued, blocked, or failed with retries
    left), in batches of ``batch_size``, leaving running, finished and recurring rows;
    how many (of ``queue``: not the descendants elsewhere that their deletion cancelled)."""

    def apply(conn: Connection, ids: Sequence[int], queue: str) -> int:
        stmt = sa.delete(tasks).where(c.id.in_(ids), c.queue_id == queue, WAITING)
        deleted = conn.execute(stmt).rowcount
        # A purged workflow node's edges go too (SQLite enforces no foreign key); the
        # edges out of it stay until its children settle, which find it gone.
        conn.execute(sa.delete(task_edges).where(task_edges.c.child_id.in_(ids), _gone))
        store.hooks.removed(conn, ids, queue)
        return deleted

    return _in_batches(store, queue, batch_size, apply)


# An edge whose child row is gone.
_gone = ~sa.exists().where(c.id == task_edges.c.child_id)


def _in_batches(store: HasDatabase, queue: str, batch_size: int, apply: Apply) -> int:
    """``apply`` to the waiting tasks of ``queue``, ``batch_size`` of them a transaction,
    in id order until none is left; the sum of what it returned."""
    check_key("queue", queue, required=True)
    check_int("batch_size", batch_size, minimum=1, maximum=INT32[1])
    total = 0
    after = 0  # ids start at 1

    def batch(conn: Connection) -> tuple[int, list[int]]:
        """(rows changed, ids read) of the next batch."""
        params: dict[str, Any] = {"queue": queue, "after": after, "batch": batch_size}
        ids = list(conn.execute(_NEXT_IDS, params).scalars())
        changed = sum(
            apply(conn, ids[start : start + _IDS_PER_STATEMENT], queue)
            for start in range(0, len(ids), _IDS_PER_STATEMENT)
        )
        return changed, ids

    while True:
        changed, ids = store.db.write(batch, atomic=True)
        total += changed
        if len(ids) < batch_size:  # the last batch: none was left after it
            return total
        after = ids[-1]


def finished(columns: Any = c) -> sa.ColumnElement[bool]:
    """A finished task: done, failed for good or cancelled (the ends that set finished_at);
    never a schedule's recurring row (of the tasks table or an alias of it)."""
    return sa.and_(
        columns.finished_at.is_not(None),
        columns.status.in_([s.value for s in (Status.DONE, Status.FAILED, Status.CANCELLED)]),
        sa.not_(columns.recurring),
    )


FINISHED = finished()

_needing = tasks.alias("needing")
#: A task whose row no workflow node still needs: outside workflows, or with no child
#: that has not finished (a child's parent_results() reads its parents' rows). For each
#: workflow node the pick meets, one probe along jobq_task_edges_parent and the children's
#: primary key, stopping at the first child not finished; a task outside workflows costs
#: none. A scalar subquery with a LIMIT rather than NOT EXISTS: PostgreSQL plans a NOT
#: EXISTS as a hash of every edge with a child not finished, built by a scan of the whole
#: edge table in every batch.
UNNEEDED = sa.or_(
    c.workflow_id.is_(None),
    sa.select(task_edges.c.child_id)
    .join(_needing, _needing.c.id == task_edges.c.child_id)
    .where(task_edges.c.parent_id == c.id, sa.not_(finished(_needing.c)))
    .limit(1)
    .scalar_subquery()
    .is_(None),
)

#: How many finished tasks a batch of pruning deletes by default: a few tens of ms.
PRUNE_BATCH = 1_000


def prune_batch(
    store: HasDatabase, older_than: float, scope: sa.ColumnElement[bool], batch_size: int
) -> tuple[int, bool]:
    """Delete the ``batch_size`` oldest finished tasks of ``scope`` that finished over
    ``older_than`` s ago, in one short transaction: (how many, whether more may be left).

    A workflow node is kept while a node after it has not finished: that node's
    parent_results() reads it (UNNEEDED)."""
    old = sa.and_(FINISHED, scope, c.finished_at < store.db.dialect.now_plus(-older_than))
    # Oldest first, along the finished_at index: a batch reads only the rows it deletes
    # (and steps over the parents kept for their children).
    pick = sa.select(c.id).where(old, UNNEEDED).order_by(c.finished_at).limit(batch_size)

    def batch(conn: Connection) -> tuple[int, int]:
        ids = list(conn.execute(pick).scalars())
        deleted = 0
        for start in range(0, len(ids), _IDS_PER_STATEMENT):
            chunk = ids[start : start + _IDS_PER_STATEMENT]
            # Saying again that each is old and finished: `jobq retry` may have sent one back.
            # Not UNNEEDED again (MySQL refuses a DELETE whose subquery reads its table):
            # a child that the pick saw finished stays finished but for a `jobq retry`,
            # which could as well come a moment after this delete.
            deleted += conn.execute(sa.delete(tasks).where(c.id.in_(chunk), old)).rowcount
            # A pruned workflow node's edges go too (SQLite enforces no foreign key).
            conn.execute(sa.delete(task_edges).where(task_edges.c.child_id.in_(chunk), _gone))
        return deleted, len(ids)

    deleted, picked = store.db.write(batch, atomic=True)
    return deleted, picked == batch_size


def prune(
    store: HasDatabase,
    older_than: float,
    *,
    queue: str | None = None,
    batch_size: int = PRUNE_BATCH,
) -> int:
    """Delete the finished tasks (of ``queue``, or of every queue) that finished over
    ``older_than`` s ago, ``batch_size`` a transaction, oldest first; how many."""
    check_int("batch_size", batch_size, minimum=1, maximum=INT32[1])
    scope = sa.true() if queue is None else c.queue_id == queue
    total = 0
    more = True
    while more:
        deleted, more = prune_batch(store, older_than, scope, batch_size)
        total += deleted
    return total
