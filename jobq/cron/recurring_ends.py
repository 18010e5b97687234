"""The ends of recurring rows' runs: the fenced ends that the core's end statements leave
alone, and those of runs whose lease expired (each rescue pass).

A retry or a release keeps the tick; any other end returns the row to done at its
schedule's next tick, and adds the run to the schedule's history (jobq.cron.runs) in the
same transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.core.run_end import end_values, next_delay
from jobq.cron.runs import record_run, run_error, run_status
from jobq.cron.schedule_rows import db_now, resting
from jobq.db.tasks import Completion, Status, as_utc
from jobq.dialects.schema import schedules, status_is, tasks

if TYPE_CHECKING:
    from jobq.core.store import TaskStore

c = tasks.c
s = schedules.c


class RecurringEnds:
    """Records the ends of recurring rows' runs on a TaskStore (Periodic hooks it in)."""

    def __init__(self, store: TaskStore) -> None:
        self.store = store
        self.db = store.db
        self.dialect = store.dialect

    def end(
        self,
        completions: Sequence[Completion],
        *,
        connection: Connection | None = None,
        run_at: datetime | None = None,
        lease_expired: bool = False,
    ) -> int:
        """Record the ends of recurring rows' runs among ``completions``; how many applied.

        Each is fenced like any end (and, with ``lease_expired``, applies only while the
        run's lease has expired). A retry (failed with retries left) or a release keeps
        the tick; any other end finishes it: the row returns to done at the next tick
        after the database's now (or at ``run_at``), with its retries renewed. Each end
        that applies adds the run to its schedule's history (jobq.cron.runs) in the
        same transaction; one that does not (stale) adds nothing.
        """
        expired = c.locked_until < self.dialect.now() if lease_expired else sa.true()
        ends: dict[tuple[int, int], Completion] = {}
        for end in completions:
            ends.setdefault((end.id, end.attempt), end)
        if not ends:
            return 0
        query = (
            sa.select(
                c.id, c.attempt, c.retries_left, c.run_at, c.started_at, s.name, s.cron,
                s.timezone, s.retries, s.enabled, s.defined,
                s.lock_key.label("defined_lock_key"),
            )
            .select_from(tasks.outerjoin(schedules, s.task_id == c.id))
            .where(
                c.recurring,
                status_is(Status.IN_PROGRESS),
                expired,
                sa.tuple_(c.id, c.attempt).in_(sa.bindparam("fences", expanding=True)),
            )
        )  # fmt: skip

        def end_each(conn: Connection) -> int:
            rows = conn.execute(query, {"fences": list(ends)}).all()
            if not rows:
                return 0
            applied = 0
            now = db_now(conn, self.dialect.now())
            for row in rows:
                end = ends[(row.id, row.attempt)]
                values, last_status = self._values(row, end, now, run_at)
                fenced = sa.and_(
                    c.id == row.id, status_is(Status.IN_PROGRESS), c.attempt == row.attempt, expired
                )
                if conn.execute(sa.update(tasks).where(fenced).values(**values)).rowcount != 1:
                    continue
                applied += 1
                if row.name is None:
                    continue
                if last_status is not None:
                    conn.execute(
                        sa.update(schedules)
                        .where(s.name == row.name)
                        .values(last_status=last_status, updated_at=now)
                    )
                record_run(
                    conn, schedule=row.name, task_id=row.id, attempt=row.attempt,
                    status=run_status(end.status, end.error, lease_expired=lease_expired),
                    started_at=as_utc(row.started_at) or now, finished_at=now,
                    error=run_error(end.status, end.error),
                )  # fmt: skip
            return applied

        return self.db.write(end_each, connection, atomic=True)

    def _values(
        self, row: Any, end: Completion, now: datetime, run_at: datetime | None
    ) -> tuple[dict[str, Any], str | None]:
        """The SET clause ending ``row``'s run as ``end`` says, and the schedule's last status."""
        delay = next_delay(end.status, end.attempt, end.retry_delay, self.store.backoff)
        next_run = self.dialect.now_plus(delay) if run_at is None else as_utc(run_at)
        if row.name is None:
            # Its schedule is gone (a database without foreign keys lost it): end it as a
            # plain task, so it cannot come straight back.
            values = end_values(
                self.dialect, end.status, next_run=next_run, result=end.result, error=end.error
            )
            return {**values, "recurring": False}, None
        active = row.enabled and row.defined
        last_status = None if end.status is Status.QUEUED else end.status.value
        # A terminal failure (a task this worker does not know, undecodable arguments)
        # would fail the same way on a retry: it ends the tick like the last retry.
        keeps_tick = end.status is Status.QUEUED or (
            end.status is Status.FAILED and row.retries_left > 0 and not end.terminal
        )
        if keeps_tick and active:
            values = end_values(
                self.dialect, end.status, next_run=next_run, result=end.result, error=end.error
            )
            return values, last_status
        # The tick is over, or the schedule is paused: the row rests until its next tick.
        if run_at is None or not active:
            # After the tick it ran for even if the database's clock stepped back.
            ran_for = as_utc(row.run_at)
            assert ran_for is not None  # run_at is NOT NULL
            after = max(now, ran_for)
            values = resting(row.cron, row.timezone, after, row.retries, active=active)
        else:
            values = {
                "status": Status.DONE.value, "run_at": as_utc(run_at), "retries_left": row.retries
            }  # fmt: skip
        done = end.status is Status.DONE
        values.update(
            locked_by=None, locked_until=None, finished_at=now,
            result=end.result if done else None, error=None if done else end.error,
            # The key of the arguments it runs with next (a sync may have changed them).
            lock_key=row.defined_lock_key,
        )  # fmt: skip
        return values, last_status

    def rescue(self) -> int:
        """End recurring runs whose lease expired as failed ('lease expired'); how many."""
        expired = sa.select(c.id, c.attempt).where(
            self.dialect.within("jobq_tasks_lease_expiry"),
            status_is(Status.IN_PROGRESS),
            c.locked_until < self.dialect.now(),
            c.recurring,
        )
        with self.db.unit(read_only=True) as conn:
            fences = conn.execute(expired).all()
        lost = [
            Completion(i, a, Status.FAILED, error="lease expired", retry_delay=0) for i, a in fences
        ]
        return self.end(lost, lease_expired=True) if lost else 0
