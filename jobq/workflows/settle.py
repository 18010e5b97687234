"""What the end of a workflow node does to the nodes after it, as statements.

- A parent done marks its own out-edges done (``parent_done``); a child with no edge
  left undone is queued (from ``blocked``). The marking writes only the parent's edge
  rows, and finding the children with nothing left to wait for is a plain read, so
  parents ending at once into one child never wait for each other's locks.
- Two last parents may end in concurrent transactions, each seeing the other's edge
  undone: neither queues the child. So the writer looks again once it has committed (a
  read then sees every commit before its own), and every worker's rescue pass sweeps
  for blocked nodes with nothing left to wait for.
- A parent failed for good or cancelled (or gone: purged) cancels every blocked
  descendant, with an error naming it.

Statements are built once per dialect (Dialect.memo); ids travel as expanding IN lists of
at most CHUNK ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.db.tasks import Status
from jobq.dialects.base import Dialect
from jobq.dialects.schema import status_is, task_edges, tasks

c = tasks.c
e = task_edges.c

#: Ids per expanding IN list (SQLite allows 32,766 variables a statement).
CHUNK = 5000
#: Blocked nodes a sweep looks at per pass.
SWEEP_LIMIT = 1000


def chunks(ids: Sequence[int]) -> Iterator[list[int]]:
    """``ids`` in lists of at most CHUNK."""
    for start in range(0, len(ids), CHUNK):
        yield list(ids[start : start + CHUNK])


def _finished_not_done(columns: Any = c) -> sa.ColumnElement[bool]:
    """Ended without being done: cancelled, or failed for good."""
    return sa.or_(
        status_is(Status.CANCELLED, columns),
        sa.and_(status_is(Status.FAILED, columns), columns.finished_at.is_not(None)),
    )


def mark_done(dialect: Dialect) -> sa.Update:
    """The edges out of the tasks ``ids`` that are done now: marked done."""

    def build() -> sa.Update:
        # Both tables looked up by the ids given: planned from statistics that may be
        # stale (a fan-out just inserted), a join was hashed against a scan of a table.
        done = sa.select(c.id).where(dialect.among_ids(c.id), status_is(Status.DONE))
        return (
            sa.update(task_edges)
            .where(
                dialect.among_ids(e.parent_id), e.parent_id.in_(done), e.parent_done == sa.false()
            )
            .values(parent_done=True)
        )

    return dialect.memo(("workflow", "mark done"), build)


def _nothing_pending(child_id: Any) -> sa.ColumnElement[bool]:
    pending = task_edges.alias("pending")
    return ~sa.exists().where(pending.c.child_id == child_id, pending.c.parent_done == sa.false())


def ready_children(dialect: Dialect) -> sa.Select[Any]:
    """Blocked children of the tasks ``ids`` with no edge left undone."""

    def build() -> sa.Select[Any]:
        # Each child once, however many of its parents are among ``ids``: one probe each.
        children = sa.select(e.child_id).distinct().where(dialect.among_ids(e.parent_id)).subquery()
        child_id = children.c.child_id
        return (
            sa.select(child_id)
            .join(tasks, sa.and_(c.id == child_id, status_is(Status.BLOCKED)))
            .where(_nothing_pending(child_id))
        )

    return dialect.memo(("workflow", "ready children"), build)


def parents_of_blocked(dialect: Dialect) -> sa.Select[Any]:
    """Those of the tasks ``ids`` with a child still blocked."""
    return dialect.memo(
        ("workflow", "parents of blocked"),
        lambda: (
            sa.select(e.parent_id)
            .distinct()
            .join(tasks, sa.and_(c.id == e.child_id, status_is(Status.BLOCKED)))
            .where(dialect.among_ids(e.parent_id))
        ),
    )


def queue_ready(dialect: Dialect) -> sa.Update:
    """The blocked tasks ``ids``, queued: due now, or at their own run_at if later."""

    def build() -> sa.Update:
        now = dialect.now()
        return (
            sa.update(tasks)
            .where(dialect.among_ids(c.id), status_is(Status.BLOCKED))
            .values(
                status=Status.QUEUED.value, run_at=sa.case((c.run_at > now, c.run_at), else_=now)
            )
        )

    return dialect.memo(("workflow", "queue ready"), build)


def failed_parents(dialect: Dialect) -> sa.Select[Any]:
    """Of the tasks ``ids``, those ended without being done that have children: (id, name,
    status)."""
    return dialect.memo(
        ("workflow", "failed parents"),
        lambda: sa.select(c.id, c.name, c.status).where(
            dialect.among_ids(c.id), _finished_not_done(), sa.exists().where(e.parent_id == c.id)
        ),
    )


def descendants(dialect: Dialect) -> sa.Select[Any]:
    """Every task after task ``parent_id``, at any depth (a recursive walk of the edges)."""

    def build() -> sa.Select[Any]:
        walk = (
            sa.select(e.child_id.label("id"))
            .where(e.parent_id == sa.bindparam("parent_id"))
            .cte("descendants", recursive=True)
        )
        below = task_edges.alias("below")
        walk = walk.union(sa.select(below.c.child_id).where(below.c.parent_id == walk.c.id))
        return sa.select(walk.c.id)

    return dialect.memo(("workflow", "descendants"), build)


def cancel_blocked(dialect: Dialect, sparing_queue: bool = False) -> sa.Update:
    """The blocked tasks ``ids``: cancelled, with error ``reason``; with ``sparing_queue``,
    only those not of queue ``spared``."""

    def build() -> sa.Update:
        which = sa.and_(dialect.among_ids(c.id), status_is(Status.BLOCKED))
        if sparing_queue:
            which = sa.and_(which, c.queue_id != sa.bindparam("spared", type_=sa.String))
        return (
            sa.update(tasks)
            .where(which)
            .values(
                status=Status.CANCELLED.value,
                error=sa.bindparam("reason", type_=sa.Text),
                finished_at=dialect.now(),
            )
        )

    return dialect.memo(("workflow", "cancel blocked", sparing_queue), build)


def revive_cancelled(dialect: Dialect) -> sa.Update:
    """The tasks ``ids`` cancelled before they ever ran: blocked again, error cleared."""

    def build() -> sa.Update:
        return (
            sa.update(tasks)
            .where(dialect.among_ids(c.id), status_is(Status.CANCELLED), c.attempt == 0)
            .values(status=Status.BLOCKED.value, error=None, finished_at=None)
        )

    return dialect.memo(("workflow", "revive cancelled"), build)


def stuck_ready(dialect: Dialect) -> sa.Select[Any]:
    """Blocked tasks with no edge left undone (their last parents' ends raced, or the
    writer died before it looked again), at most SWEEP_LIMIT."""
    return dialect.memo(
        ("workflow", "stuck ready"),
        lambda: (
            sa.select(c.id)
            .where(
                dialect.within("jobq_tasks_blocked"),
                status_is(Status.BLOCKED),
                _nothing_pending(c.id),
            )
            .limit(SWEEP_LIMIT)
        ),
    )


def stuck_parents(dialect: Dialect) -> sa.Select[Any]:
    """Parents that blocked tasks still wait for though they will never be done
    (ended otherwise, or deleted), or that are done with their edges unmarked: (id,
    name, status; None for a deleted one)."""

    def build() -> sa.Select[Any]:
        parent = tasks.alias("parent")
        child = tasks.alias("child")
        never = sa.or_(
            parent.c.id.is_(None),
            _finished_not_done(parent.c),
            status_is(Status.DONE, parent.c),
        )
        return (
            sa.select(e.parent_id, parent.c.name, parent.c.status)
            .distinct()
            .select_from(
                child.join(task_edges, e.child_id == child.c.id).outerjoin(
                    parent, parent.c.id == e.parent_id
                )
            )
            .where(
                dialect.within("jobq_tasks_blocked", child.c),
                status_is(Status.BLOCKED, child.c),
                e.parent_done == sa.false(),
                never,
            )
            .limit(SWEEP_LIMIT)
        )

    return dialect.memo(("workflow", "stuck parents"), build)


def cancelled_because(parent_id: int, name: str | None, status: str | None) -> str:
    """The error of a node cancelled because task ``parent_id``, which it waits for,
    will never be done."""
    if name is None:
        return f"cancelled: task {parent_id}, which it waits for, no longer exists"
    how = "was cancelled" if status == Status.CANCELLED.value else "failed"
    return f"cancelled: task {parent_id} ({name}), which it waits for, {how}"


#: ``(conn, ids)``: tasks ``ids`` were just queued (FairKeys.released wakes their keys).
Released = Callable[[Connection, Sequence[int]], None]


def queue_children(
    conn: Connection, dialect: Dialect, parent_ids: Sequence[int], released: Released
) -> int:
    """Queue the blocked children of ``parent_ids`` that wait for nothing more; how many."""
    ready: list[int] = []
    for part in chunks(parent_ids):
        ready.extend(conn.execute(ready_children(dialect), {"ids": part}).scalars())
    return queue_tasks(conn, dialect, ready, released)


def with_blocked_children(conn: Connection, dialect: Dialect, ids: Sequence[int]) -> list[int]:
    """Those of the tasks ``ids`` with a child still blocked (a chain's step, whose one
    child it just queued, has none: no look after the commit is needed for it)."""
    statement = parents_of_blocked(dialect)
    return [p for part in chunks(ids) for p in conn.execute(statement, {"ids": part}).scalars()]


def queue_tasks(conn: Connection, dialect: Dialect, ids: Sequence[int], released: Released) -> int:
    """Queue those of the tasks ``ids`` that are blocked, tell ``released``, and wake the
    workers of their queues where the database can; how many."""
    queued = 0
    for part in chunks(ids):
        if (count := conn.execute(queue_ready(dialect), {"ids": part}).rowcount) > 0:
            queued += count
            released(conn, part)
            dialect.wake_workers(conn, part)
    return queued


def cancel_descendants(
    conn: Connection, dialect: Dialect, parent_id: int, reason: str, spared: str | None = None
) -> int:
    """Cancel every blocked task after ``parent_id`` (but those of queue ``spared``, if
    given), saying ``reason``; how many."""
    below = list(conn.execute(descendants(dialect), {"parent_id": parent_id}).scalars())
    statement = cancel_blocked(dialect, sparing_queue=spared is not None)
    params: dict[str, Any] = {"reason": reason}
    if spared is not None:
        params["spared"] = spared
    return sum(conn.execute(statement, {**params, "ids": part}).rowcount for part in chunks(below))
