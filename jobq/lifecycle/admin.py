"""TaskAdmin: what an operator does to tasks by hand: list, count, retry, cancel, prune.

A capability object on a TaskStore (``store.admin`` of jobq.Store); what a cancel or a
retry does to the tasks after it (a workflow's) is the hooks' (jobq.core.hooks).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from jobq.core.cancel import cancel_update
from jobq.db.errors import TaskNotFound
from jobq.db.tasks import Status, Task, as_utc
from jobq.db.validation import INT32, check_int, check_key, check_seconds, queue_list
from jobq.dialects.schema import HOLDS_UNIQUE_KEY, status_is, task_edges, tasks
from jobq.lifecycle import bulk

if TYPE_CHECKING:
    from jobq.core.store import TaskStore

c = tasks.c


class TaskAdmin:
    """Listing, counting, retrying and cancelling tasks; purging and pruning queues
    (``store.admin``): what `jobq list`, `jobq status`, `jobq retry`, `jobq cancel` and
    `jobq queues` do.

    Every method takes ids, names and numbers it checks first: a bad one raises
    jobq.InvalidOption and changes nothing.

    Example:
        ```python
        import jobq

        store = jobq.Store()
        store.migrate()
        first, second = (store.enqueue("resize", {"n": n}, queue="images") for n in (1, 2))
        assert store.admin.counts()[("images", jobq.Status.QUEUED)] == 2
        assert [t.id for t in store.admin.list_tasks(queue="images")] == [second, first]
        assert store.admin.cancel(first) and not store.admin.cancel(first)  # ended already
        assert store.admin.retry(first)  # queued again
        assert store.admin.cancel_queue("images") == 2
        assert store.admin.prune(0, queue="images") == 2  # finished: deleted
        ```
    """

    def __init__(self, store: TaskStore) -> None:
        self.store = store
        self.db = store.db
        self.dialect = store.dialect

    def cancel(self, id: int) -> bool:
        """Cancel task ``id``: a waiting one at once, a running one by a request.

        A workflow node's blocked descendants are cancelled with it, their errors naming it.

        A waiting task (queued, or failed with retries left) ends cancelled here. A running
        one gets a cancel request: its worker hears of it within a second and stops the run
        (see jobq.check_cancelled), which then ends cancelled unless it had finished.

        Returns:
            True if it did either (again for a repeated request); False if the task has
            ended already or is a schedule's row (see `jobq cron disable`).

        Raises:
            TaskNotFound: there is no task ``id``.
            InvalidOption: ``id`` is not an int.
        """
        check_int("id", id)
        stmt = self.db.prepare("cancel", self._cancel_statement)
        exists = self.db.prepare(
            "exists", lambda: sa.select(c.id).where(c.id == sa.bindparam("id"))
        )

        def cancel(conn: Any) -> bool:
            if self.db.run(stmt, {"id": id}, connection=conn) == 1:
                self.store.hooks.cancelled(conn, [id])  # a workflow node's descendants, if any
                return True
            if not self.db.run(exists, {"id": id}, connection=conn, fetch=True):
                raise TaskNotFound(id=id)
            return False

        return self.db.write(cancel, atomic=True)

    def _cancel_statement(self) -> sa.Update:
        return cancel_update(
            self.dialect, sa.and_(c.id == sa.bindparam("id"), sa.not_(c.recurring))
        )

    def running_lock_keys(self) -> list[tuple[str, str | None, Any, Any]]:
        """The lock keys of running tasks: (lock_key, locked_by, started_at, locked_until)."""
        stmt = (
            sa.select(c.lock_key, c.locked_by, c.started_at, c.locked_until)
            .where(
                self.dialect.within("jobq_tasks_lock_key_held"),
                c.lock_key.is_not(None),
                status_is(Status.IN_PROGRESS),
            )
            .order_by(c.lock_key)
        )
        with self.db.unit(read_only=True) as conn:
            return [tuple(row) for row in conn.execute(stmt)]

    def retry(self, id: int) -> bool:
        """Queue task ``id`` again now if it failed or was cancelled; False otherwise.

        A terminal failure gets one more attempt (its retries_left stays 0). A task whose
        unique_key another pending task holds now stays as it is. A workflow node waits
        (blocked) while a parent is not done, and the nodes after it that were cancelled
        before they ever ran wait for it again. InvalidOption if ``id`` is not an int.
        """
        check_int("id", id)
        stmt = self._retry_statement(c.id == id)

        def retry(conn: Any) -> bool:
            if conn.execute(stmt).rowcount != 1:
                return False
            self.store.hooks.retried(conn, id)  # a workflow node's descendants, if any
            return True

        return self.db.write(retry, atomic=True)

    def retry_failed(self, queue: str | None = None) -> int:
        """Queue every terminally failed task (of ``queue``, else of every queue) again
        now, as retry() does each; how many. InvalidOption for an empty queue name."""
        check_key("queue", queue)
        which = sa.and_(status_is(Status.FAILED), c.retries_left == 0)
        if queue is not None:
            which = sa.and_(which, c.queue_id == queue)
        stmt = self._retry_statement(which)
        return self.db.write(lambda conn: conn.execute(stmt).rowcount)

    def _retry_statement(self, which: sa.ColumnElement[bool]) -> sa.Update:
        # The rows holding unique keys, as a derived table: MySQL refuses an UPDATE whose
        # subquery reads the updated table itself, but not one reading a materialised
        # derived table of it (DISTINCT keeps it from being merged into the UPDATE).
        holders = (
            sa.select(c.unique_key, c.id)
            .where(self.dialect.within("jobq_tasks_unique_key"), HOLDS_UNIQUE_KEY)
            .distinct()
            .subquery("holder")
        )
        key_is_held = sa.exists().where(holders.c.unique_key == c.unique_key, holders.c.id != c.id)
        edges = task_edges.c
        waits_for_parent = sa.exists().where(
            edges.child_id == c.id, edges.parent_done == sa.false()
        )
        return (
            sa.update(tasks)
            .where(
                which,
                c.status.in_([Status.FAILED.value, Status.CANCELLED.value]),
                sa.not_(c.recurring),
                sa.not_(key_is_held),
            )
            .values(
                # A workflow node with a parent not done yet waits for it again.
                status=sa.case((waits_for_parent, Status.BLOCKED.value), else_=Status.QUEUED.value),
                run_at=self.dialect.now(),
                finished_at=None,
                locked_by=None,
                locked_until=None,
                cancel_requested_at=None,  # a fresh start: no earlier request holds
                progress=None,
            )
        )

    def get_with_now(self, id: int) -> tuple[Task, datetime] | None:
        """Task ``id`` as it is now, with the database's clock read in the same statement
        (for ages shown to people: the machine's own clock may be off); None if there is
        no such task."""
        check_int("id", id)
        now = self.dialect.now().label("db_now")
        stmt = self.db.prepare(
            "get_with_now", lambda: sa.select(tasks, now).where(c.id == sa.bindparam("task_id"))
        )
        rows = self.db.run(stmt, {"task_id": id}, fetch=True)
        if not rows:
            return None
        read = self.dialect.row_reader([*tasks.c, now], self.db.engine)
        *values, at = read(rows[0])
        return Task.from_values(values), as_utc(at)

    def list_tasks(
        self,
        *,
        status: Status | str | None = None,
        queue: str | None = None,
        name: str | None = None,
        limit: int = 50,
    ) -> list[Task]:
        """The newest ``limit`` tasks (highest ids first), optionally of one status, one
        queue and one task name, as `jobq list` shows them.

        Args:
            status: a jobq.Status or its name (``"failed"``).
            queue: a queue's name.
            name: a task's name.
            limit: how many at most (0 or more).

        Raises:
            UnknownStatus: ``status`` is not one of jobq.Status.
            InvalidOption: an empty queue or name, a negative ``limit``.
        """
        check_int("limit", limit, minimum=0, maximum=INT32[1])
        check_key("queue", queue)
        check_key("name", name)
        params: dict[str, Any] = {"limit": limit}
        if status is not None:
            params["want_status"] = Status.parse(status).value
        if queue is not None:
            params["want_queue"] = queue
        if name is not None:
            params["want_name"] = name
        shape = (status is not None, queue is not None, name is not None)
        stmt = self.db.prepare(("list", *shape), lambda: self._list_statement(*shape))
        rows = self.db.run(stmt, params, fetch=True)
        return [Task.from_values(self.store._read(row)) for row in rows]

    def _list_statement(self, by_status: bool, by_queue: bool, by_name: bool) -> sa.Select[Any]:
        stmt = sa.select(tasks).order_by(c.id.desc()).limit(sa.bindparam("limit", type_=sa.Integer))
        if by_status:
            stmt = stmt.where(c.status == sa.bindparam("want_status", type_=sa.String))
        if by_queue:
            stmt = stmt.where(c.queue_id == sa.bindparam("want_queue", type_=sa.String))
        if by_name:
            stmt = stmt.where(c.name == sa.bindparam("want_name", type_=sa.String))
        return stmt

    def oldest_waiting(self) -> dict[str, float]:
        """Per queue, how many seconds its longest-waiting due queued task has waited."""
        now = self.dialect.now()
        stmt = (
            sa.select(c.queue_id, sa.func.min(c.run_at), now)
            .where(status_is(Status.QUEUED), c.run_at <= now)
            .group_by(c.queue_id)
        )
        with self.db.unit(read_only=True) as conn:
            rows = conn.execute(stmt).all()
        return {
            queue: max((as_utc(at_now) - as_utc(oldest)).total_seconds(), 0.0)
            for queue, oldest, at_now in rows
        }

    def due_later(
        self, queues: Sequence[str] | None = None, *, since: float = 0.0
    ) -> tuple[int, float | None]:
        """How many tasks of ``queues`` (None: every queue) wait for a later time, queued or
        failed with retries left, and in how many seconds the first falls due (None: no
        task waits). A schedule's row resting until its next tick is not one of them.

        Tasks that fell due in the last ``since`` seconds count too, due in 0 s: a burst
        worker passes the time since its last capture began, which could not see them.
        """
        check_seconds("since", since)
        names = queue_list(queues)
        now = self.dialect.now()
        stmt = sa.select(sa.func.count(), sa.func.min(c.run_at), now).where(
            sa.or_(status_is(Status.QUEUED), sa.and_(status_is(Status.FAILED), c.retries_left > 0)),
            c.run_at > (self.dialect.now_plus(-float(since)) if since else now),
        )
        if names is not None:
            stmt = stmt.where(c.queue_id.in_(names))
        with self.db.unit(read_only=True) as conn:
            count, first, at_now = conn.execute(stmt).one()
        if not count:
            return 0, None
        return count, max((as_utc(first) - as_utc(at_now)).total_seconds(), 0.0)

    def counts(self) -> dict[tuple[str, Status], int]:
        """How many tasks each (queue, status) holds, as `jobq status` counts them:
        ``{("emails", Status.QUEUED): 12, ...}``; a pair with no task is absent.

        A schedule's recurring row counts only while one of its runs is under way or
        waiting (in_progress, queued, failed): resting between ticks (done) or paused
        (cancelled, `jobq cron disable`) it is a schedule, not a task; see schedules().
        """
        resting = sa.and_(c.recurring, c.status.in_([Status.DONE.value, Status.CANCELLED.value]))
        stmt = (
            sa.select(c.queue_id, c.status, sa.func.count())
            .where(sa.not_(resting))
            .group_by(c.queue_id, c.status)
        )
        with self.db.unit(read_only=True) as conn:
            return {(q, Status(s)): n for q, s, n in conn.execute(stmt)}

    def cancel_queue(self, queue: str, *, batch_size: int = 10_000) -> int:
        """Cancel every waiting task of ``queue`` (queued, blocked, or failed with retries
        left), in transactions of ``batch_size`` tasks; how many. Running tasks are left
        alone; a workflow node's blocked descendants are cancelled with it. This is
        `jobq cancel --queue`; InvalidOption for an empty queue name or a bad ``batch_size``."""
        return bulk.cancel_waiting(self.store, queue, batch_size=batch_size)

    def purge(self, queue: str, *, batch_size: int = 10_000) -> int:
        """Delete every waiting task of ``queue`` (queued, blocked, or failed with retries
        left), in transactions of ``batch_size`` tasks; how many. Running and finished ones
        stay; a workflow node's blocked descendants elsewhere are cancelled. Their handles
        then raise TaskNotFound. This is `jobq purge`; InvalidOption for an empty
        queue name or a bad ``batch_size``."""
        return bulk.purge(self.store, queue, batch_size=batch_size)

    def prune(
        self,
        older_than: float | timedelta,
        *,
        queue: str | None = None,
        batch_size: int = bulk.PRUNE_BATCH,
    ) -> int:
        """Delete finished tasks (done, terminal failed, cancelled) that finished more
        than ``older_than`` (seconds or a timedelta) ago, of ``queue`` or of every queue,
        ``batch_size`` a short transaction; how many. A finished workflow node that a node
        after it still needs is kept. Workers prune by themselves (see
        QueueRetention); this is `jobq prune`. InvalidOption for a negative age or an
        empty queue name."""
        seconds = older_than.total_seconds() if isinstance(older_than, timedelta) else older_than
        check_seconds("older_than", seconds)
        if queue is not None:
            check_key("queue", queue, required=True)
        return bulk.prune(self.store, float(seconds), queue=queue, batch_size=batch_size)

    def running_tasks(self) -> dict[str, list[Task]]:
        """The running (in_progress) tasks by the worker id that captured them (locked_by),
        each worker's oldest run first: what `jobq workers` shows."""

        def statement() -> sa.Select[Any]:
            # The partial index of running rows; MySQL needs its emulated flag named.
            running = sa.and_(
                self.dialect.within("jobq_tasks_lease_expiry"), status_is(Status.IN_PROGRESS)
            )
            return sa.select(tasks).where(running).order_by(c.started_at, c.id)

        by_worker: dict[str, list[Task]] = {}
        for row in self.db.run(self.db.prepare("running_tasks", statement), {}, fetch=True):
            task = Task.from_values(self.store._read(row))
            by_worker.setdefault(task.locked_by or "", []).append(task)
        return by_worker
