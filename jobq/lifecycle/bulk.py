"""Cancelling and purging a queue's waiting tasks in batches, each its own short transaction.

A queue may hold millions of waiting rows: one statement over all of them would hold one
long transaction (and its locks) while workers capture and end runs around it. Each batch
instead reads the next ids in id order, then updates or deletes those rows in the same
transaction, saying again that each must still be waiting: a row captured meanwhile is
left alone. Two statements rather than one with a LIMIT subquery: MariaDB refuses a
DELETE or UPDATE whose subquery reads the same table with a LIMIT.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.database import Database
from jobq.schema import HAS_RETRIES, status_is, task_edges, tasks
from jobq.tasks import Status
from jobq.validation import INT32, check_int, check_key

c = tasks.c


class HasDatabase(Protocol):
    """What the batches need of a jobq.Store: its database."""

    db: Database


#: How many tasks a batch takes by default.
DEFAULT_BATCH = 10_000
#: Ids named by one UPDATE or DELETE: a batch larger than this takes several statements,
#: in its one transaction, so that no statement passes a database's limit on parameters
#: (SQLite's is 32,766, PostgreSQL's 65,535).
_IDS_PER_STATEMENT = 1_000

#: A waiting task: queued, or failed with retries left; never a schedule's recurring row.
WAITING = sa.and_(
    sa.or_(status_is(Status.QUEUED), sa.and_(status_is(Status.FAILED), HAS_RETRIES)),
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


def cancel_waiting(store: HasDatabase, queue: str, *, batch_size: int = DEFAULT_BATCH) -> int:
    """Cancel every waiting task of ``queue`` (queued, or failed with retries left), as
    Store.cancel cancels one, in batches of ``batch_size``; how many were cancelled."""
    update = sa.update(tasks).values(
        status=Status.CANCELLED.value, finished_at=store.db.dialect.now()
    )

    def apply(conn: Connection, ids: Sequence[int], queue: str) -> int:
        return conn.execute(update.where(c.id.in_(ids), c.queue_id == queue, WAITING)).rowcount

    return _in_batches(store, queue, batch_size, apply)


def purge(store: HasDatabase, queue: str, *, batch_size: int = DEFAULT_BATCH) -> int:
    """Delete every waiting task of ``queue`` (queued, or failed with retries left), in
    batches of ``batch_size``, leaving running, finished and recurring rows; how many."""

    def apply(conn: Connection, ids: Sequence[int], queue: str) -> int:
        stmt = sa.delete(tasks).where(c.id.in_(ids), c.queue_id == queue, WAITING)
        deleted = conn.execute(stmt).rowcount
        # A purged workflow node's edges go too (SQLite enforces no foreign key).
        conn.execute(sa.delete(task_edges).where(task_edges.c.child_id.in_(ids), _gone))
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
