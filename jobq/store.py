"""Store: the only code that executes SQL about tasks.

This module holds capture and the fenced writes about runs; enqueueing (enqueuer.py),
operators' actions (task_admin.py) and the worker registry (worker_registry.py) are
mixed into the same Store. Every method is one statement or one short transaction, or
joins the caller's given ``connection`` (see Database.unit). Writes about a captured run
are fenced by its attempt number: they apply only while the row is still in_progress
with that attempt, and report whether they did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from jobq import migrations
from jobq.database import Database
from jobq.enqueuer import Enqueuer
from jobq.errors import InvalidOption
from jobq.payload import check_result
from jobq.prepared import Prepared
from jobq.retry import Backoff, ExponentialBackoff
from jobq.schema import HAS_RETRIES, status_is, tasks
from jobq.task_admin import TaskAdmin
from jobq.tasks import Completion, Status, Task, as_utc
from jobq.validation import check_datetime, check_int, check_key, check_seconds, queue_list
from jobq.worker_registry import WorkerRegistry

c = tasks.c

# heartbeat names at most this many (id, attempt) pairs per statement.
_HEARTBEAT_CHUNK = 500


class Store(Enqueuer, TaskAdmin, WorkerRegistry):
    """Tasks in SQL rows: enqueue, capture, set_status, heartbeat, rescue, prune."""

    def __init__(
        self, url_or_engine: str | sa.URL | Engine | None = None, *, backoff: Backoff | None = None
    ) -> None:
        self.db = Database(url_or_engine)
        self.engine: Engine = self.db.engine
        self.dialect = self.db.dialect
        # Decodes raw task rows with SQLAlchemy's type processors.
        self._read = self.dialect.row_reader(list(tasks.c), self.engine)
        #: Chooses the delay before a failed task's retry when set_status is not told.
        self.backoff: Backoff = backoff or ExponentialBackoff()

    def __repr__(self) -> str:
        return f"Store({self.db!r})"

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.db.dispose()

    def migrate(self) -> None:
        """Create or upgrade jobq's tables to the newest revision (Alembic upgrade head)."""
        with self.db.unit(atomic=True) as conn:
            migrations.upgrade(conn)

    # --- capture and the fenced writes ----------------------------------------------

    def capture(
        self,
        limit: int,
        *,
        queues: Sequence[str] | str | None = None,
        worker_id: str,
        lease: float | None = None,
    ) -> list[Task]:
        """Atomically move at most ``limit`` capturable tasks to in_progress for ``worker_id``.

        Order: highest priority, then earliest run_at, then lowest id. ``lease`` overrides
        each task's own lease seconds. Each returned task carries its new ``attempt``.
        """
        names = _capture_options(limit, queues, worker_id, lease)
        return self._capture(None, limit, names, worker_id, lease)

    def _capture(
        self,
        connection: Connection | None,
        limit: int,
        names: list[str] | None,
        worker_id: str,
        lease: float | None,
    ) -> list[Task]:
        if limit == 0 or names == []:
            return []
        shape = (None if names is None else len(names), lease is None)
        stmt = self.db.prepare(("capture", *shape), lambda: self.dialect.capture_statement(*shape))
        params: dict[str, Any] = {"limit": limit, "worker_id": worker_id}
        if names is not None:
            params.update({f"queue_{i}": name for i, name in enumerate(names)})
        if lease is not None:
            params["lease_seconds"] = float(lease)
        rows = self.db.run(stmt, params, connection=connection, fetch=True)
        captured = [Task.from_values(self._read(row)) for row in rows]
        captured.sort(key=lambda t: (-t.priority, t.run_at, t.id))
        return captured

    def set_status(
        self,
        id: int,
        attempt: int,
        status: Status | str,
        *,
        result: Any = None,
        error: str | None = None,
        run_at: datetime | None = None,
        retry_delay: float | None = None,
        connection: Connection | None = None,
    ) -> bool:
        """End run ``attempt`` of task ``id``; True if it applied, False if the run was stale.

        - done: stores ``result``.
        - failed: with retries left, the task returns at ``run_at``, else after
          ``retry_delay`` seconds, else after the Store's backoff; with none left it is
          terminal. ``error`` is stored either way.
        - queued: a release; back to the queue (at ``run_at`` or after ``retry_delay``)
          without spending a retry.
        - cancelled: terminal.
        """
        shape, params = self._end_of_run(id, attempt, status, result, error, run_at, retry_delay)
        return self.db.run(self._set_status_prepared(shape), params, connection=connection) == 1

    def set_statuses(self, completions: Sequence[Completion]) -> int:
        """Record many ends of runs in one transaction, each fenced as set_status is.

        Runs of the same outcome go in one batched statement. Returns how many applied;
        the others were stale.
        """
        if not completions:
            return 0
        with self.db.unit(atomic=True) as conn:
            return self._record(conn, completions)

    def complete_and_capture(
        self,
        completions: Sequence[Completion],
        limit: int,
        *,
        queues: Sequence[str] | str | None = None,
        worker_id: str,
        lease: float | None = None,
    ) -> tuple[int, list[Task]]:
        """set_statuses(completions), then capture(limit, ...), in one transaction.

        A worker that finishes and takes tasks in one commit pays one disk flush, not two.
        Returns how many completions applied, and the captured tasks.
        """
        names = _capture_options(limit, queues, worker_id, lease)
        with self.db.unit(atomic=True) as conn:
            applied = self._record(conn, completions)
            captured = self._capture(conn, limit, names, worker_id, lease)
        return applied, captured

    def _record(self, conn: Connection, completions: Sequence[Completion]) -> int:
        """Write completions on ``conn``, one batched statement per outcome shape."""
        groups: dict[tuple[Status, str], list[dict[str, Any]]] = {}
        for done in completions:
            shape, params = self._end_of_run(
                done.id, done.attempt, done.status, done.result, done.error, None,
                done.retry_delay,
            )  # fmt: skip
            groups.setdefault(shape, []).append(params)
        applied = 0
        for shape, group in groups.items():
            prepared = self._set_status_prepared(shape)
            result = conn.exec_driver_sql(
                prepared.sql, [prepared.parameters(params) for params in group]
            )
            applied += result.rowcount
        return applied

    def _end_of_run(
        self,
        id: int,
        attempt: int,
        status: Status | str,
        result: Any,
        error: str | None,
        run_at: datetime | None,
        retry_delay: float | None,
    ) -> tuple[tuple[Status, str], dict[str, Any]]:
        """Check an end of run; the shape of its statement and its parameters."""
        status = Status.parse(status)
        check_int("id", id)
        check_int("attempt", attempt, minimum=1)
        if status is Status.IN_PROGRESS:
            raise InvalidOption(option="status", reason="only capture moves a task to in_progress")
        if run_at is not None and retry_delay is not None:
            raise InvalidOption(option="run_at", reason="give run_at or retry_delay, not both")
        if retry_delay is not None:
            check_seconds("retry_delay", retry_delay)
        if run_at is not None:
            check_datetime("run_at", run_at)
        if error is not None and not isinstance(error, str):
            raise InvalidOption(option="error", reason=f"{error!r} is not a string")
        if result is not None:
            check_result(result)
        params: dict[str, Any] = {
            "task_id": id, "run_attempt": attempt, "new_result": result, "new_error": error,
        }  # fmt: skip
        if run_at is not None:
            params["next_run_at"] = as_utc(run_at)
            return (status, "at"), params
        if retry_delay is None:
            retry_delay = self.backoff.delay(attempt) if status is Status.FAILED else 0.0
        params["delay"] = float(retry_delay)
        return (status, "delay"), params

    def _set_status_prepared(self, shape: tuple[Status, str]) -> Prepared:
        return self.db.prepare(("set_status", *shape), lambda: self._set_status_statement(*shape))

    def _set_status_statement(self, status: Status, timing: str) -> sa.Update:
        """The fenced UPDATE ending a run with ``status``; the next run_at is ``timing``:
        'at' (parameter ``next_run_at``) or 'delay' (parameter ``delay``, on the database clock).
        """
        now = self.dialect.now()
        if timing == "at":
            next_run: Any = sa.bindparam("next_run_at", type_=c.run_at.type)
        else:
            next_run = self.dialect.now_plus(sa.bindparam("delay", type_=sa.Float))
        error = sa.bindparam("new_error", type_=c.error.type)
        values: dict[str, Any] = {"status": status.value, "locked_by": None, "locked_until": None}
        if status is Status.DONE:
            values.update(
                result=sa.bindparam("new_result", type_=c.result.type), error=None, finished_at=now
            )
        elif status is Status.FAILED:
            values.update(
                error=error,
                run_at=sa.case((HAS_RETRIES, next_run), else_=c.run_at),
                finished_at=sa.case((HAS_RETRIES, sa.null()), else_=now),
            )
        elif status is Status.QUEUED:
            values.update(run_at=next_run)
        else:  # cancelled
            values.update(error=error, finished_at=now)
        return (
            sa.update(tasks)
            .where(
                c.id == sa.bindparam("task_id"),
                status_is(Status.IN_PROGRESS),
                c.attempt == sa.bindparam("run_attempt"),
            )
            .values(**values)
        )

    def heartbeat(
        self, worker_id: str, owned: Iterable[tuple[int, int]], lease: float | None = None
    ) -> set[int]:
        """Extend the leases of the runs in ``owned`` (id, attempt) still held by ``worker_id``.

        Returns the ids it extended; a run missing from the answer was lost (its lease
        expired and it was rescued or captured again) and must not write its outcome.
        """
        check_key("worker_id", worker_id, required=True)
        if lease is not None:
            check_seconds("lease", lease, positive=True)
        pairs = [(int(i), int(a)) for i, a in owned]
        if not pairs:
            return set()
        stmt = self.dialect.memo(
            ("heartbeat", lease is None), lambda: self._heartbeat_statement(lease is None)
        )
        params: dict[str, Any] = {"worker_id": worker_id}
        if lease is not None:
            params["lease_seconds"] = float(lease)
        extended: set[int] = set()
        with self.db.unit(atomic=len(pairs) > _HEARTBEAT_CHUNK) as conn:
            for start in range(0, len(pairs), _HEARTBEAT_CHUNK):
                params["owned"] = pairs[start : start + _HEARTBEAT_CHUNK]
                extended |= self.dialect.update_returning_ids(conn, stmt, params)
        return extended

    def _heartbeat_statement(self, row_lease: bool) -> sa.Update:
        lease_seconds = c.lease if row_lease else sa.bindparam("lease_seconds", type_=sa.Float)
        return (
            sa.update(tasks)
            .where(
                status_is(Status.IN_PROGRESS),
                c.locked_by == sa.bindparam("worker_id"),
                sa.tuple_(c.id, c.attempt).in_(sa.bindparam("owned", expanding=True)),
            )
            .values(locked_until=self.dialect.now_plus(lease_seconds))
        )

    def listen(self, on_enqueued: Callable[[set[str] | None], None], stop: Any) -> bool:
        """Call ``on_enqueued(queues or None)`` when tasks are enqueued, until ``stop`` is set.

        Where the database can notify (PostgreSQL), a connection in a thread of its own
        does it, reconnecting by itself; elsewhere this returns False and workers poll.
        """
        return self.dialect.listen(self.engine, on_enqueued, stop)

    # --- maintenance ----------------------------------------------------------------

    def rescue(self) -> int:
        """Fail every in_progress task whose lease expired ('lease expired'); how many."""
        now = self.dialect.now()
        has_retries = c.retries_left > 0
        stmt = (
            sa.update(tasks)
            .where(c.status == Status.IN_PROGRESS.value, c.locked_until < now)
            .values(
                status=Status.FAILED.value,
                error="lease expired",
                locked_by=None,
                locked_until=None,
                run_at=sa.case((has_retries, now), else_=c.run_at),
                finished_at=sa.case((has_retries, sa.null()), else_=now),
            )
        )
        with self.db.unit() as conn:
            return conn.execute(stmt).rowcount

    def prune(self, older_than: float | timedelta) -> int:
        """Delete finished tasks (done, terminal failed, cancelled) older than that; how many."""
        seconds = older_than.total_seconds() if isinstance(older_than, timedelta) else older_than
        check_seconds("older_than", seconds)
        stmt = sa.delete(tasks).where(
            c.finished_at.is_not(None),
            c.finished_at < self.dialect.now_plus(-float(seconds)),
            c.status.in_([s.value for s in (Status.DONE, Status.FAILED, Status.CANCELLED)]),
            sa.not_(c.recurring),
        )
        with self.db.unit() as conn:
            return conn.execute(stmt).rowcount

    # --- reading --------------------------------------------------------------------

    def get(self, id: int) -> Task | None:
        """Task ``id`` as it is now, or None."""
        check_int("id", id)
        stmt = self.db.prepare(
            "get", lambda: sa.select(tasks).where(c.id == sa.bindparam("task_id"))
        )
        rows = self.db.run(stmt, {"task_id": id}, fetch=True)
        return Task.from_values(self._read(rows[0])) if rows else None


def _capture_options(
    limit: int, queues: Sequence[str] | str | None, worker_id: str, lease: float | None
) -> list[str] | None:
    """Check capture's options; the queue names (None: every queue)."""
    check_int("limit", limit, minimum=0)
    check_key("worker_id", worker_id, required=True)
    if lease is not None:
        check_seconds("lease", lease, positive=True)
    return queue_list(queues)
