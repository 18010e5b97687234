"""Which rows a capture takes, as SQL: docs/architecture.md's capturable rows, in capture order.

The portable predicates are built once here; a dialect only says how its queries reach a
partial index (within), where it emulates them.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from jobq.schema import (
    ACTIVE,
    HAS_RETRIES,
    LOCK_KEY_HELD,
    active,
    has_retries,
    limits,
    status_is,
    tasks,
)
from jobq.tasks import Status

c = tasks.c

#: Capture order: the most urgent first, then the longest waiting.
CAPTURE_ORDER = (c.priority.desc(), c.run_at, c.id)


def waiting(columns: Any) -> sa.ColumnElement[bool]:
    """Rows that wait to be captured once due: queued, failed with retries left, or a
    recurring row that is done (of the tasks table or an alias of it)."""
    return sa.or_(
        status_is(Status.QUEUED, columns),
        sa.and_(status_is(Status.FAILED, columns), has_retries(columns)),
        sa.and_(status_is(Status.DONE, columns), columns.recurring),
    )


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

    def capturable(self, now: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
        """Rows a capture may take at ``now``: the four cases of docs/architecture.md, due,
        in the ACTIVE set, and with their lock key (if any) free. An expired recurring run
        is not among them: rescue ends it (a retry, its next tick, or rest if its schedule
        was paused)."""
        return sa.and_(
            ACTIVE,
            c.run_at <= now,
            sa.or_(
                waiting(c),
                # A lost recurring run is rescue's to end: its schedule may be paused. So is
                # a lost run whose cancel was asked for: it ends cancelled, not run again.
                sa.and_(
                    status_is(Status.IN_PROGRESS),
                    c.locked_until < now,
                    HAS_RETRIES,
                    sa.not_(c.recurring),
                    c.cancel_requested_at.is_(None),
                ),
            ),
            sa.or_(c.lock_key.is_(None), sa.not_(self.lock_key_taken(now))),
        )

    def lock_key_taken(self, now: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
        """Another row of this row's lock key runs, or is due and comes first (by id).

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
        earlier = tasks.alias("earlier")
        e = earlier.c
        earlier_due = sa.exists().where(
            self.within("jobq_tasks_lock_key", e),
            e.lock_key == c.lock_key,
            e.lock_key.is_not(None),  # these two terms and active(e) select the partial index
            active(e),
            e.id < c.id,
            e.run_at <= now,
            waiting(e),
        )
        # A row that runs (its lease expired) holds its own key: it is not held back by itself.
        return sa.or_(
            sa.and_(sa.not_(status_is(Status.IN_PROGRESS)), c.lock_key.in_(running_keys)),
            earlier_due,
        )

    def capturable_ids(
        self, now: sa.ColumnElement[Any], queue_count: int | None, unlimited_only: bool = True
    ) -> sa.Select[Any]:
        """The ids a capture takes: capturable at ``now``, in order, at most ``limit``;
        of unlimited queues only, unless told otherwise (by a limiter: then of queues not
        paused)."""
        index = "jobq_tasks_capture" if queue_count == 1 else "jobq_tasks_capture_any_queue"
        ids = sa.select(c.id).where(
            self.within(index), self.capturable(now), queue_filter(queue_count)
        )
        ids = ids.where(unlimited_queue() if unlimited_only else unpaused_queue())
        return ids.order_by(*CAPTURE_ORDER).limit(sa.bindparam("limit", type_=sa.Integer))
