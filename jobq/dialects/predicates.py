"""Which rows a capture takes, as SQL: docs/architecture.md's capturable rows, in capture order.

The portable predicates are built once here; a dialect only says how its queries reach a
partial index (within), where it emulates them.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from jobq.db.tasks import Status
from jobq.dialects.schema import (
    HAS_RETRIES,
    LOCK_KEY_HELD,
    WAITING,
    active,
    limits,
    status_is,
    tasks,
    waiting,
)

c = tasks.c

#: Capture order: the most urgent first, then the longest waiting.
CAPTURE_ORDER = (c.priority.desc(), c.run_at, c.id)


def queue_filter(queue_count: int | None) -> sa.ColumnElement[bool]:
    """Every queue (None), or the ``queue_count`` named by parameters ``queue_0``, ..."""
    if queue_count is None:
        return sa.true()
    return c.queue_id.in_([sa.bindparam(f"queue_{i}", type_=sa.String) for i in range(queue_count)])


def unlimited_queue() -> sa.ColumnElement[bool]:
    """Rows of queues without a limit (jobq_limits): captures of unlimited queues take only
    these, so a limited queue is only ever captured by its limiter."""
    return sa.not_(c.queue_id.in_(sa.select(limits.c.queue)))


def unpaused_queue() -> sa.ColumnElement[bool]:
    """Rows of queues that are not paused: what a limiter's capture adds, so that a pause
    holds from its commit on, whatever a Store's copy of jobq_limits still says."""
    return sa.not_(c.queue_id.in_(sa.select(limits.c.queue).where(limits.c.paused)))


class CapturePredicates:
    """The conditions of a capture; a part of Dialect."""

    def within(self, index: str, columns: Any = c) -> sa.ColumnElement[bool]:
        """A condition that lets a query use partial index ``index`` of the tasks table (or
        of the alias whose ``columns`` are given); true where partial indexes are native."""
        return sa.true()

    def capturable_waiting(self, now: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
        """Waiting rows a capture may take at ``now``: due, and with their lock key (if
        any) free (the first three cases of docs/architecture.md).

        A row of a running key waits (it stays as it is: no retry spent, nothing written),
        and among the due rows of one key only the earliest is capturable, so one capture
        never takes two rows of one key. The unique index jobq_tasks_lock_key_held settles
        the rare race this snapshot cannot see (a row of the key falling due while another
        is taken).
        """
        running = tasks.alias("running")
        r = running.c
        # Computed once per statement and looked up by hash: a backlog of rows behind
        # running keys costs a lookup each, not an index probe each.
        running_keys = sa.select(r.lock_key).where(
            self.within(LOCK_KEY_HELD, r),
            r.lock_key.is_not(None),
            status_is(Status.IN_PROGRESS, r),
        )
        return sa.and_(
            WAITING,
            c.run_at <= now,
            sa.or_(
                c.lock_key.is_(None),
                sa.not_(sa.or_(c.lock_key.in_(running_keys), self.earlier_due(now))),
            ),
        )

    def capturable_expired(self, now: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
        """Running rows a capture may take at ``now``: their lease expired, a retry left,
        and no due row of their lock key (if any) ahead of them (a run holds its own key).

        An expired recurring run is not among them: rescue ends it (a retry, its next
        tick, or rest if its schedule was paused), for its schedule may be paused. Nor is
        a lost run whose cancel was asked for: rescue ends it cancelled, not run again.
        """
        return sa.and_(
            status_is(Status.IN_PROGRESS),
            c.locked_until < now,
            HAS_RETRIES,
            sa.not_(c.recurring),
            c.cancel_requested_at.is_(None),
            c.run_at <= now,
            sa.or_(c.lock_key.is_(None), sa.not_(self.earlier_due(now))),
        )

    def earlier_due(self, now: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
        """Another row of this row's lock key is due and comes first (by id)."""
        earlier = tasks.alias("earlier")
        e = earlier.c
        return sa.exists().where(
            self.within("jobq_tasks_lock_key", e),
            e.lock_key == c.lock_key,
            e.lock_key.is_not(None),  # these two terms and active(e) select the partial index
            active(e),
            e.id < c.id,
            e.run_at <= now,
            waiting(e),
        )

    def capturable_ids(
        self,
        now: sa.ColumnElement[Any],
        queue_count: int | None,
        unlimited_only: bool = True,
        skip: sa.ColumnElement[bool] | None = None,
    ) -> sa.Select[Any]:
        """The ids a capture takes: capturable at ``now``, in order, at most ``limit``;
        of unlimited queues only, unless told otherwise (by a limiter: then of queues not
        paused); none matching ``skip``.

        Each kind of capturable row is read from its own index, in capture order, and
        the two short lists are merged: the waiting rows along a capture index, the
        expired runs (few, usually none) along jobq_tasks_lease_expiry.
        """
        index = "jobq_tasks_capture" if queue_count == 1 else "jobq_tasks_capture_any_queue"
        limit = sa.bindparam("limit", type_=sa.Integer)
        queues = sa.and_(
            queue_filter(queue_count), unlimited_queue() if unlimited_only else unpaused_queue()
        )
        branches = []
        for name, within, rows in (
            ("waiting", self.within(index), self.capturable_waiting(now)),
            ("expired", self.within("jobq_tasks_lease_expiry"), self.capturable_expired(now)),
        ):
            branch = sa.select(c.id, c.priority, c.run_at).where(within, rows, queues)
            if skip is not None:
                branch = branch.where(sa.not_(skip))
            branches.append(self.capture_branch(branch.order_by(*CAPTURE_ORDER).limit(limit), name))
        both = sa.union_all(*branches).subquery("capturable")
        return (
            sa.select(both.c.id)
            .order_by(both.c.priority.desc(), both.c.run_at, both.c.id)
            .limit(limit)
        )

    def capture_branch(self, rows: sa.Select[Any], name: str) -> sa.Select[Any]:
        """One kind of capturable rows (``rows``: id, priority, run_at, in order, limited)
        as a member of capturable_ids' UNION ALL, locked where the database locks them
        (FOR UPDATE SKIP LOCKED, so that concurrent captures pass each other)."""
        sub = rows.subquery(name)
        return sa.select(sub.c.id, sub.c.priority, sub.c.run_at)
