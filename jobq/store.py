"""Store: the only code that executes SQL about tasks.

Every method is one statement or one short transaction (or joins the caller's, given
``connection``); see Database.unit.
Writes about a captured run are fenced by its attempt number: they apply only while
the row is still in_progress with that attempt, and report whether they did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from jobq import migrations
from jobq.database import Database
from jobq.errors import InvalidOption
from jobq.live_workers import LiveWorker
from jobq.payload import check_args, check_result, encode_args, encode_args_array
from jobq.prepared import Prepared
from jobq.retry import Backoff, ExponentialBackoff
from jobq.schema import HAS_RETRIES, status_is, tasks, workers
from jobq.tasks import Completion, Status, Task, as_utc
from jobq.validation import check_datetime, check_int, check_key, check_seconds, queue_list

c = tasks.c

# enqueue_many sends at most this many rows per statement.
_BATCH = 5000
# heartbeat names at most this many (id, attempt) pairs per statement.
_HEARTBEAT_CHUNK = 500


class Store:
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

    # --- enqueue --------------------------------------------------------------------

    def enqueue(
        self,
        name: str,
        args: Mapping[str, Any] | None = None,
        *,
        queue: str = "default",
        priority: int = 0,
        run_at: datetime | None = None,
        delay: float | None = None,
        retries: int = 3,
        timeout: float | None = None,
        lease: float = 30,
        unique_key: str | None = None,
        lock_key: str | None = None,
        connection: Connection | None = None,
    ) -> int:
        """Add one task and return its id; with ``unique_key``, the id of the task holding it.

        Given ``connection``, the row is written in the caller's transaction and commits or
        rolls back with it.
        """
        checked = check_args(name, args)
        encode_args(name, checked)
        timing, params = self._new_row(
            name, queue, priority, run_at, delay, retries, timeout, lease, unique_key, lock_key
        )
        params["new_args"] = checked
        if unique_key is None:
            insert = self.db.prepare(
                ("insert", timing), lambda: self.dialect.insert_statement(timing)
            )
            return int(self.db.run(insert, params, connection=connection, fetch=True)[0][0])
        with self.db.unit(connection) as conn:
            # Insert-or-find, repeated in case the holder finishes between the two.
            for _ in range(100):
                task_id = self.dialect.insert_unique(conn, timing, params)
                if task_id is None:
                    task_id = self.dialect.holder_of(conn, unique_key)
                if task_id is not None:
                    return task_id
            raise RuntimeError(f"unique_key {unique_key!r} kept changing hands; try again")

    def enqueue_many(
        self,
        name: str,
        args_list: Iterable[Mapping[str, Any] | None],
        *,
        queue: str = "default",
        priority: int = 0,
        run_at: datetime | None = None,
        delay: float | None = None,
        retries: int = 3,
        timeout: float | None = None,
        lease: float = 30,
        unique_key: str | None = None,
        lock_key: str | None = None,
        connection: Connection | None = None,
    ) -> list[int]:
        """Add one task per entry of ``args_list`` sharing the options; their ids, in order.

        Rows travel in one statement per batch of 5,000. With ``unique_key``, all entries
        name the same task, so every id returned is that one task's.
        """
        args_list = list(args_list)
        batches = [
            encode_args_array(name, args_list[start : start + _BATCH])
            for start in range(0, len(args_list), _BATCH)
        ]
        options = dict(
            queue=queue, priority=priority, run_at=run_at, delay=delay, retries=retries,
            timeout=timeout, lease=lease, lock_key=lock_key, connection=connection,
        )  # fmt: skip
        if not args_list:
            return []
        if unique_key is not None:
            task_id = self.enqueue(name, args_list[0], unique_key=unique_key, **options)  # type: ignore[arg-type]
            return [task_id] * len(args_list)
        timing, params = self._new_row(
            name, queue, priority, run_at, delay, retries, timeout, lease, None, lock_key
        )
        insert = self.db.prepare(
            ("insert many", timing), lambda: self.dialect.insert_many_statement(timing)
        )
        if len(batches) == 1 and connection is None:
            return self._insert_batch(insert, params, batches[0])
        with self.db.unit(connection, atomic=True) as conn:
            return [
                task_id
                for batch in batches
                for task_id in self._insert_batch(insert, params, batch, conn)
            ]

    def _insert_batch(
        self,
        insert: Prepared,
        params: dict[str, Any],
        args_array: str,
        connection: Connection | None = None,
    ) -> list[int]:
        rows = self.db.run(
            insert, {**params, "args_array": args_array}, connection=connection, fetch=True
        )
        # Ids are assigned in array order, so sorting them restores argument order.
        return sorted(row[0] for row in rows)

    def _new_row(
        self,
        name: str,
        queue: str,
        priority: int,
        run_at: datetime | None,
        delay: float | None,
        retries: int,
        timeout: float | None,
        lease: float,
        unique_key: str | None,
        lock_key: str | None,
    ) -> tuple[str, dict[str, Any]]:
        """Validate a new task's options: its run_at timing and its ``new_*`` parameters.

        The timing is 'at' (``new_run_at``), 'delay' (``new_delay`` seconds from the
        database's now) or 'now'; see Dialect.new_row_values.
        """
        check_key("name", name, required=True)
        check_key("queue", queue, required=True)
        check_key("unique_key", unique_key)
        check_key("lock_key", lock_key)
        check_int("priority", priority)
        check_int("retries", retries, minimum=0)
        check_seconds("lease", lease, positive=True)
        if timeout is not None:
            check_seconds("timeout", timeout, positive=True)
        params: dict[str, Any] = {
            "new_name": name,
            "new_queue_id": queue,
            "new_priority": priority,
            "new_retries_left": retries,
            "new_lease": float(lease),
            "new_timeout": None if timeout is None else float(timeout),
            "new_unique_key": unique_key,
            "new_lock_key": lock_key,
        }
        if run_at is not None and delay is not None:
            raise InvalidOption(option="run_at", reason="give run_at or delay, not both")
        if run_at is not None:
            check_datetime("run_at", run_at)
            params["new_run_at"] = as_utc(run_at)
            return "at", params
        if delay is not None:
            check_seconds("delay", delay)
            params["new_delay"] = float(delay)
            return "delay", params
        return "now", params

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

    def cancel(self, id: int) -> bool:
        """Cancel task ``id`` if it is waiting (queued, or failed with retries left)."""
        check_int("id", id)
        stmt = (
            sa.update(tasks)
            .where(
                c.id == id,
                sa.or_(
                    c.status == Status.QUEUED.value,
                    sa.and_(c.status == Status.FAILED.value, c.retries_left > 0),
                ),
                sa.not_(c.recurring),
            )
            .values(status=Status.CANCELLED.value, finished_at=self.dialect.now())
        )
        with self.db.unit() as conn:
            return conn.execute(stmt).rowcount == 1

    def retry(self, id: int) -> bool:
        """Queue task ``id`` again now if it failed or was cancelled; False otherwise.

        A terminal failure gets one more attempt (its retries_left stays 0). A task whose
        unique_key another pending task holds now stays as it is.
        """
        check_int("id", id)
        with self.db.unit() as conn:
            return conn.execute(self._retry_statement(c.id == id)).rowcount == 1

    def retry_failed(self, queue: str | None = None) -> int:
        """Queue every terminally failed task (of ``queue``) again now; how many."""
        check_key("queue", queue)
        which = sa.and_(status_is(Status.FAILED), c.retries_left == 0)
        if queue is not None:
            which = sa.and_(which, c.queue_id == queue)
        with self.db.unit() as conn:
            return conn.execute(self._retry_statement(which)).rowcount

    def _retry_statement(self, which: sa.ColumnElement[bool]) -> sa.Update:
        holder = tasks.alias("holder")
        key_is_held = (
            sa.select(holder.c.id)
            .where(
                holder.c.unique_key == c.unique_key,
                holder.c.id != c.id,
                holder.c.status.in_([Status.QUEUED.value, Status.IN_PROGRESS.value])
                | ((holder.c.status == Status.FAILED.value) & (holder.c.retries_left > 0)),
            )
            .exists()
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
                status=Status.QUEUED.value,
                run_at=self.dialect.now(),
                finished_at=None,
                locked_by=None,
                locked_until=None,
            )
        )

    def listen(self, on_enqueued: Callable[[set[str] | None], None], stop: Any) -> bool:
        """Call ``on_enqueued(queues or None)`` when tasks are enqueued, until ``stop`` is set.

        Where the database can notify (PostgreSQL), a connection in a thread of its own
        does it, reconnecting by itself; elsewhere this returns False and workers poll.
        """
        return self.dialect.listen(self.engine, on_enqueued, stop)

    # --- the live-worker registry -----------------------------------------------------

    def register_worker(
        self, worker_id: str, *, host: str, pid: int, queues: Sequence[str] | None, concurrency: int
    ) -> None:
        """Record a starting worker (replacing a stale row of the same id)."""
        check_key("worker_id", worker_id, required=True)
        now = self.dialect.now()
        with self.db.unit(atomic=True) as conn:
            conn.execute(sa.delete(workers).where(workers.c.worker_id == worker_id))
            conn.execute(
                sa.insert(workers).values(
                    worker_id=worker_id, host=host[:255], pid=pid,
                    queues=None if queues is None else list(queues), concurrency=concurrency,
                    started_at=now, last_seen=now,
                )
            )  # fmt: skip

    def touch_worker(self, worker_id: str) -> bool:
        """Mark ``worker_id`` as seen now; False if it is not registered (any more)."""
        stmt = (
            sa.update(workers)
            .where(workers.c.worker_id == worker_id)
            .values(last_seen=self.dialect.now())
        )
        with self.db.unit() as conn:
            return conn.execute(stmt).rowcount == 1

    def unregister_worker(self, worker_id: str) -> None:
        """Remove a stopping worker from the registry."""
        with self.db.unit() as conn:
            conn.execute(sa.delete(workers).where(workers.c.worker_id == worker_id))

    def live_workers(self, *, stale_after: float = 60.0) -> list[LiveWorker]:
        """Every registered worker, oldest first; ``alive`` if seen within ``stale_after`` s."""
        check_seconds("stale_after", stale_after)
        recent = workers.c.last_seen >= self.dialect.now_plus(-float(stale_after))
        stmt = sa.select(workers, recent.label("alive")).order_by(workers.c.started_at)
        with self.db.unit(read_only=True) as conn:
            rows = conn.execute(stmt).all()
        return [
            LiveWorker(
                worker_id=r.worker_id, host=r.host, pid=r.pid, queues=r.queues,
                concurrency=r.concurrency, started_at=as_utc(r.started_at),  # type: ignore[arg-type]
                last_seen=as_utc(r.last_seen), alive=bool(r.alive),  # type: ignore[arg-type]
            )
            for r in rows
        ]  # fmt: skip

    def forget_workers(self, older_than: float) -> int:
        """Delete registry rows not seen for ``older_than`` seconds (crashed workers); how many."""
        check_seconds("older_than", older_than)
        stmt = sa.delete(workers).where(
            workers.c.last_seen < self.dialect.now_plus(-float(older_than))
        )
        with self.db.unit() as conn:
            return conn.execute(stmt).rowcount

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

    def list_tasks(
        self, *, status: Status | str | None = None, queue: str | None = None, limit: int = 50
    ) -> list[Task]:
        """The newest ``limit`` tasks, optionally of one status and one queue."""
        check_int("limit", limit, minimum=0)
        check_key("queue", queue)
        params: dict[str, Any] = {"limit": limit}
        if status is not None:
            params["want_status"] = Status.parse(status).value
        if queue is not None:
            params["want_queue"] = queue
        shape = (status is not None, queue is not None)
        stmt = self.db.prepare(("list", *shape), lambda: self._list_statement(*shape))
        rows = self.db.run(stmt, params, fetch=True)
        return [Task.from_values(self._read(row)) for row in rows]

    def _list_statement(self, by_status: bool, by_queue: bool) -> sa.Select[Any]:
        stmt = sa.select(tasks).order_by(c.id.desc()).limit(sa.bindparam("limit", type_=sa.Integer))
        if by_status:
            stmt = stmt.where(c.status == sa.bindparam("want_status", type_=sa.String))
        if by_queue:
            stmt = stmt.where(c.queue_id == sa.bindparam("want_queue", type_=sa.String))
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
            queue: max((as_utc(at_now) - as_utc(oldest)).total_seconds(), 0.0)  # type: ignore[operator]
            for queue, oldest, at_now in rows
        }

    def counts(self) -> dict[tuple[str, Status], int]:
        """How many tasks each (queue, status) holds."""
        stmt = sa.select(c.queue_id, c.status, sa.func.count()).group_by(c.queue_id, c.status)
        with self.db.unit(read_only=True) as conn:
            return {(q, Status(s)): n for q, s, n in conn.execute(stmt)}


def _capture_options(
    limit: int, queues: Sequence[str] | str | None, worker_id: str, lease: float | None
) -> list[str] | None:
    """Check capture's options; the queue names (None: every queue)."""
    check_int("limit", limit, minimum=0)
    check_key("worker_id", worker_id, required=True)
    if lease is not None:
        check_seconds("lease", lease, positive=True)
    return queue_list(queues)
