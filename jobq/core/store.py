"""TaskStore: the core's SQL about tasks: enqueue, capture, the fenced ends, heartbeat, rescue.

Enqueueing (enqueue.py) and the registry of workers (workers.py) are objects of the
TaskStore's own; capabilities reach in through the hooks of jobq.core.hooks, and are
objects of their own built on a TaskStore (``store.capability(Kind)``; the public
jobq.Store builds them all). Every method is one statement or one short transaction, or
joins the caller's given ``connection`` (see Database.unit). Writes about a captured run
are fenced by its attempt number: they apply only while the row is still in_progress
with that attempt, and report whether they did.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from jobq.core import run_end
from jobq.core.enqueue import Enqueuer
from jobq.core.hooks import Hooks
from jobq.core.retry import Backoff, ExponentialBackoff
from jobq.core.workers import WorkerRegistry
from jobq.db.database import Database
from jobq.db.errors import first_line
from jobq.db.outage import Outage
from jobq.db.prepared import Prepared
from jobq.db.schema import status_is, tasks
from jobq.db.tasks import CANCELLED_ON_REQUEST, NO_NAMED_LEASES, Completion, Leases, Status, Task
from jobq.db.validation import INT32, check_int, check_key, check_seconds, queue_list
from jobq.dialects.base import lease_of

c = tasks.c

# heartbeat names at most this many (id, attempt) pairs per statement.
_HEARTBEAT_CHUNK = 500
# Each lost lock-key race means another capture committed a run; a handful is plenty.
_LOCK_KEY_RACE_TRIES = 5

_T = TypeVar("_T")
_C = TypeVar("_C")


class TaskStore:
    """Tasks in SQL rows: enqueue, capture, set_status, heartbeat, rescue."""

    def __init__(
        self,
        url_or_engine: str | sa.URL | Engine | None = None,
        *,
        backoff: Backoff | None = None,
        listen_url: str | sa.URL | None = None,
    ) -> None:
        """``listen_url``: where workers and waiters listen for notifications when the URL
        goes through a transaction pooler (``?jobq_pooler=transaction``): the server's own."""
        self.db = Database(url_or_engine, listen_url=listen_url)
        self.engine: Engine = self.db.engine
        self.dialect = self.db.dialect
        # Decodes raw task rows with SQLAlchemy's type processors.
        self._read = self.dialect.row_reader(list(tasks.c), self.engine)
        #: Chooses the delay before a failed task's retry when set_status is not told.
        self.backoff: Backoff = backoff or ExponentialBackoff()
        #: Called by dispose(): what threads of this Store's own hold (a waiters' LISTEN).
        self.on_dispose: list[Callable[[], None]] = []
        #: What capabilities registered to act inside capture and the ends (jobq.core.hooks).
        self.hooks = Hooks()
        self._capabilities: dict[Callable[[TaskStore], Any], Any] = {}
        #: Enqueueing: new task rows, one or many per statement.
        self.enqueuer = Enqueuer(self.db, self.dialect)
        self.enqueue = self.enqueuer.enqueue
        self.enqueue_many = self.enqueuer.enqueue_many
        #: The registry of live workers (jobq_workers).
        self.workers = WorkerRegistry(self.db, self.dialect)
        self.register_worker = self.workers.register_worker
        self.touch_worker = self.workers.touch_worker
        self.unregister_worker = self.workers.unregister_worker
        self.live_workers = self.workers.live_workers
        self.forget_workers = self.workers.forget_workers

    def capability(self, kind: Callable[[TaskStore], _C]) -> _C:
        """This store's one ``kind(self)``, made on its first use: the object of a
        capability, which registers its hooks on this store as it is made."""
        made = self._capabilities.get(kind)
        if made is None:
            made = self._capabilities[kind] = kind(self)
        return made  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"Store({self.db!r})"

    def dispose(self) -> None:
        """Close every pooled connection, and stop the threads that wait on this Store."""
        for stop in self.on_dispose:
            stop()
        self.db.dispose()

    def migrate(self) -> None:
        """Create or upgrade jobq's tables to the newest revision (Alembic upgrade head)."""
        from jobq.db import migrations  # Alembic takes 60 ms to import; only these need it

        migrations.upgrade_database(self.db)

    def check_schema(self) -> None:
        """Return if the database's jobq schema is at this jobq's newest revision; else
        raise SchemaNotMigrated (never migrated, or older) or SchemaTooNew (newer)."""
        from jobq.db import migrations

        migrations.check(self.db)

    # --- capture and the fenced writes ----------------------------------------------

    def capture(
        self,
        limit: int,
        *,
        queues: Sequence[str] | str | None = None,
        worker_id: str,
        lease: float | Leases | None = None,
        limiter: Any = None,
    ) -> list[Task]:
        """Atomically move at most ``limit`` capturable tasks to in_progress for ``worker_id``.

        Order: highest priority, then earliest run_at, then lowest id. A number ``lease``
        overrides each task's own lease seconds; by default a row keeps the lease it was
        enqueued with, else gets the one ``Leases`` names for its task (else 30 s). Each
        returned task carries its new ``attempt``.
        Limited queues (set_limit) come first, as many as ``limiter`` (a jobq.limits.Limiter;
        by default the database itself) allows; each is atomic on its own. (Limits reach
        capture through the hook ``capture_filter``, jobq.core.hooks.)
        """
        names = _capture_options(limit, queues, worker_id, lease)
        limited = self._filtered(names) if limit else {}
        return self._capture_all(limit, names, worker_id, lease, limiter, limited)

    def _capture_all(
        self,
        limit: int,
        names: list[str] | None,
        worker_id: str,
        lease: float | Leases | None,
        limiter: Any,
        limited: Mapping[str, Any],
    ) -> list[Task]:
        """The ``limited`` queues through the limiter, then the others in one statement."""
        captured: list[Task] = []
        gate = self.hooks.capture_filter
        if limited and gate is not None:
            captured = self._retrying_lock_key_races(
                lambda: gate.capture_filtered(
                    limited, limit, limiter=limiter, worker_id=worker_id, lease=lease
                )
            )
        rest = limit - len(captured)
        if names is not None and gate is not None and gate.withheld(names):
            return captured  # every queue named is limited or paused: nothing is left
        return captured + self._retrying_lock_key_races(
            lambda: self._capture(None, rest, names, worker_id, lease)
        )

    def _capture(
        self,
        connection: Connection | None,
        limit: int,
        names: list[str] | None,
        worker_id: str,
        lease: float | Leases | None,
        unlimited_only: bool = True,
    ) -> list[Task]:
        if limit == 0 or names == []:
            return []
        shape = (*_capture_shape(names, lease), unlimited_only)
        params = _capture_parameters(limit, names, worker_id, lease)
        if self.dialect.capture_is_one_statement:
            stmt = self.db.prepare(
                ("capture", *shape), lambda: self.dialect.capture_statement(*shape)
            )
            rows = self.db.run(stmt, params, connection=connection, fetch=True)
        else:
            rows = self.db.write(
                lambda conn: self.dialect.capture_rows(conn, *shape, params),
                connection,
                atomic=True,
            )
        return self._captured(rows)

    def _filtered(self, names: list[str] | None) -> Mapping[str, Any]:
        """The queues of ``names`` that a capture leaves to the capture filter, if any."""
        gate = self.hooks.capture_filter
        return {} if gate is None else gate.filtered(names)

    def _captured(self, rows: Iterable[Sequence[Any]]) -> list[Task]:
        """Tasks from captured rows, in capture order."""
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

        A recurring (cron) row keeps its tick on a retry or a release; any other end
        returns it to done at its next tick (or at ``run_at``), retries renewed.
        """
        shape, params = run_end.set_status_parameters(
            id, attempt, status, result=result, error=error, run_at=run_at,
            retry_delay=retry_delay, backoff=self.backoff, room=self.db.room(),
        )  # fmt: skip
        plain = self.db.prepare(
            ("set_status", *shape), lambda: run_end.set_status_statement(self.dialect, *shape)
        )
        if self.db.run(plain, params, connection=connection) == 1:
            return True
        # A workflow node (its end settles the nodes after it, in one transaction), a
        # stale run, or a recurring row, which neither statement touches.
        node = self.db.prepare(
            ("set_status node", *shape),
            lambda: run_end.set_status_statement(self.dialect, *shape, node=True),
        )
        ended = Completion(id, attempt, shape[0], in_workflow=True)
        write = functools.partial(self.db.run, node, params)
        if self._ends_in_workflow([ended], lambda conn: write(connection=conn), connection) == 1:
            return True
        end = Completion(id, attempt, shape[0], result, params["new_error"], retry_delay)
        return self._ends_left_alone([end], connection, run_at) == 1

    def set_statuses(self, completions: Sequence[Completion]) -> int:
        """Record many ends of runs in one statement, each fenced as set_status is.

        Returns how many applied; the others were stale. Each end is made storable first
        (run_end.storable_end); should the database refuse the batch all the same, each end
        is written on its own, and one it refuses fails its run, saying why.
        """
        if not completions:
            return 0
        return self._record_safely(self._encode(completions))

    def _encode(self, completions: Sequence[Completion]) -> run_end.Encoded:
        return run_end.encode_completions(completions, self.backoff, self.db.room())

    def _record(self, encoded: run_end.Encoded) -> int:
        """Write ``encoded``'s ends; how many applied. Ends of workflow nodes settle the
        nodes after them in the same transaction (the hook ``ends_in_workflow``)."""
        record = self._record_prepared()
        ends = encoded.completions
        if not any(end.in_workflow for end in ends):
            applied = sum(self.db.run(record, {"completions": chunk}) for chunk in encoded.chunks)
            return applied + self._end_unapplied(ends, applied)

        def write(conn: Connection) -> int:
            applied = sum(
                conn.exec_driver_sql(record.sql, record.parameters({"completions": chunk})).rowcount
                for chunk in encoded.chunks
            )
            return applied + self._end_unapplied(ends, applied, conn)

        return self._ends_in_workflow(ends, write)

    def _ends_in_workflow(
        self,
        ends: Sequence[Completion],
        write: Callable[[Connection], int],
        connection: Connection | None = None,
    ) -> int:
        """``write(conn)`` (it records ``ends``; how many applied) in one transaction with
        what the ends of workflow nodes cause, if a capability hooked in (jobq.core.hooks)."""
        hook = self.hooks.ends_in_workflow
        if hook is None:
            return self.db.write(write, connection, atomic=True)
        return hook(ends, write, connection)

    def _ends_left_alone(
        self,
        ends: Sequence[Completion],
        connection: Connection | None,
        run_at: datetime | None = None,
    ) -> int:
        """Record those of ``ends`` that the fenced statements left alone (a recurring
        row's), through the hooks ``ends_left_alone``; how many applied."""
        return sum(hook(ends, connection, run_at) for hook in self.hooks.ends_left_alone)

    def _record_safely(self, encoded: run_end.Encoded) -> int:
        """_record(encoded), falling back to one end at a time if the database refuses it."""
        try:
            return self._record(encoded)
        except sa.exc.DBAPIError:  # not an outage (DatabaseUnavailable): the data
            return self._record_one_by_one(encoded.completions)

    def _record_one_by_one(self, completions: Sequence[Completion]) -> int:
        """Write each end on its own; one the database refuses fails its run instead."""
        applied = 0
        for end in completions:
            try:
                applied += self._record(self._encode([end]))
            except sa.exc.DBAPIError as error:
                why = f"its outcome could not be stored: {first_line(error)}"
                failure = Completion(
                    end.id, end.attempt, Status.FAILED, error=why, in_workflow=end.in_workflow
                )
                applied += self._record(self._encode([failure]))
        return applied

    def _end_unapplied(
        self, completions: Sequence[Completion], applied: int, connection: Connection | None = None
    ) -> int:
        """Record the ends the batch statement left alone (recurring rows'); how many applied."""
        if applied >= len(completions):
            return 0
        return self._ends_left_alone(completions, connection)

    def complete_and_capture(
        self,
        completions: Sequence[Completion],
        limit: int,
        *,
        queues: Sequence[str] | str | None = None,
        worker_id: str,
        lease: float | Leases | None = None,
        limiter: Any = None,
    ) -> tuple[int, list[Task]]:
        """set_statuses(completions), then capture(limit, ...), in one transaction.

        A worker that finishes and takes tasks in one commit pays one disk flush, not two.
        Where the dialect runs both as one statement, the capture does not see the runs it
        records come back (a failure due for retry at once waits for the next capture), and
        the ends of recurring runs follow in a transaction of their own (should the process
        die between the two, rescue ends those runs once their leases expire).
        With limited queues among ``queues``, the ends are recorded first, on their own,
        so that the limits see the slots they free.
        Returns how many completions applied, and the captured tasks.
        """
        names = _capture_options(limit, queues, worker_id, lease)
        limited = self._filtered(names) if limit else {}
        encoded = self._encode(completions) if completions else None
        # Ends of workflow nodes settle the nodes after them, which capture must then see.
        nodes = encoded is not None and any(end.in_workflow for end in encoded.completions)
        if encoded is None or limited or len(encoded.chunks) > 1 or nodes:
            applied = self._record_safely(encoded) if encoded else 0
            return applied, self._capture_all(limit, names, worker_id, lease, limiter, limited)
        try:
            return self._retrying_lock_key_races(
                lambda: self._complete_and_capture(encoded, limit, names, worker_id, lease)
            )
        except sa.exc.DBAPIError as error:
            if self.dialect.is_lock_key_conflict(error):
                raise
            # The database refused the ends' data: write them one by one, then capture.
            applied = self._record_one_by_one(encoded.completions)
            return applied, self._capture_all(limit, names, worker_id, lease, limiter, limited)

    def _complete_and_capture(
        self,
        encoded: run_end.Encoded,
        limit: int,
        names: list[str] | None,
        worker_id: str,
        lease: float | Leases | None,
    ) -> tuple[int, list[Task]]:
        completions = encoded.completions
        params = {"completions": encoded.chunks[0]}
        shape = _capture_shape(names, lease)
        together = self.db.prepare_optional(
            ("complete and capture", *shape),
            lambda: self.dialect.complete_and_capture_statement(
                run_end.record_statement(self.dialect), *shape
            ),
        )
        if together is not None:
            params = {**params, **_capture_parameters(limit, names, worker_id, lease)}
            rows = self.db.run(together, params, fetch=True)
            applied = rows[0][0] + self._end_unapplied(completions, rows[0][0])
            return applied, self._captured(row[1:] for row in rows if row[1] is not None)
        record = self._record_prepared()

        def record_and_capture(conn: Connection) -> tuple[int, list[Task]]:
            applied = conn.exec_driver_sql(record.sql, record.parameters(params)).rowcount
            applied += self._end_unapplied(completions, applied, conn)
            return applied, self._capture(conn, limit, names, worker_id, lease)

        return self.db.write(record_and_capture, atomic=True)

    def _retrying_lock_key_races(self, attempt: Callable[[], _T]) -> _T:
        """``attempt()``, run again when it lost a race for a lock key.

        Two captures can each take a row of one lock key when one of the rows fell due
        between their snapshots; the unique index fails the second statement (rolled back
        whole) once the first commits, and its next try sees that run and waits for it.
        """
        for tries in range(1, _LOCK_KEY_RACE_TRIES + 1):
            try:
                return attempt()
            except sa.exc.IntegrityError as error:
                if tries == _LOCK_KEY_RACE_TRIES or not self.dialect.is_lock_key_conflict(error):
                    raise
        raise AssertionError("unreachable")

    def _record_prepared(self) -> Prepared:
        return self.db.prepare("record", lambda: run_end.record_statement(self.dialect))

    def heartbeat(
        self,
        worker_id: str,
        owned: Iterable[tuple[int, int]],
        lease: float | Leases | None = None,
    ) -> set[int]:
        """Extend the leases of the runs in ``owned`` (id, attempt) still held by ``worker_id``.

        Each run is extended by the lease it was captured with (``lease`` as in capture),
        all in one statement. Returns the ids it extended; a run missing from the answer
        was lost (its lease expired and it was rescued or captured again) and must not
        write its outcome.
        """
        check_key("worker_id", worker_id, required=True)
        if lease is not None and not isinstance(lease, Leases):
            check_seconds("lease", lease, positive=True)
        pairs = [(int(i), int(a)) for i, a in owned]
        if not pairs:
            return set()
        _, named = _capture_shape(None, lease)
        stmt = self.dialect.memo(("heartbeat", named), lambda: self._heartbeat_statement(named))
        params: dict[str, Any] = {"worker_id": worker_id, **_lease_parameters(lease)}

        def extend(conn: Connection) -> set[int]:
            extended: set[int] = set()
            for start in range(0, len(pairs), _HEARTBEAT_CHUNK):
                chunk = {**params, "owned": pairs[start : start + _HEARTBEAT_CHUNK]}
                extended |= self.dialect.update_returning_ids(conn, stmt, chunk)
            return extended

        return self.db.write(extend, atomic=len(pairs) > _HEARTBEAT_CHUNK)

    def _heartbeat_statement(self, named_leases: int | None) -> sa.Update:
        return (
            sa.update(tasks)
            .where(
                status_is(Status.IN_PROGRESS),
                c.locked_by == sa.bindparam("worker_id"),
                sa.tuple_(c.id, c.attempt).in_(sa.bindparam("owned", expanding=True)),
            )
            .values(locked_until=self.dialect.now_plus(lease_of(named_leases)))
        )

    def listen(
        self,
        on_enqueued: Callable[[set[str] | None], None],
        stop: Any,
        outage: Outage | None = None,
    ) -> bool:
        """Call ``on_enqueued(queues or None)`` when tasks are enqueued, until ``stop`` is set.

        Where the database can notify (PostgreSQL), a connection in a thread of its own
        does it, reconnecting by itself, and tells ``outage`` while it cannot connect;
        elsewhere this returns False and workers poll.
        """
        return self.dialect.listen(self.engine, on_enqueued, stop, outage)

    # --- maintenance ----------------------------------------------------------------

    def rescue(self) -> int:
        """Fail every in_progress task whose lease expired ('lease expired'); how many.

        One whose cancel was asked for ends cancelled instead, as its run would have.

        A recurring row with no retry left goes back to its schedule's next tick (the
        hooks ``rescues`` of jobq.core.hooks).
        """
        now = self.dialect.now()
        # A run whose cancel was asked for ends cancelled rather than waiting for a retry.
        cancelled = run_end.CANCEL_PENDING
        retried = sa.and_(c.retries_left > 0, sa.not_(cancelled))
        stmt = (
            sa.update(tasks)
            .where(
                self.dialect.within("jobq_tasks_lease_expiry"),
                c.status == Status.IN_PROGRESS.value,
                c.locked_until < now,
                sa.not_(c.recurring),
            )
            .values(
                status=sa.case((cancelled, Status.CANCELLED.value), else_=Status.FAILED.value),
                error=sa.case((cancelled, CANCELLED_ON_REQUEST), else_="lease expired"),
                locked_by=None,
                locked_until=None,
                run_at=sa.case((retried, now), else_=c.run_at),
                finished_at=sa.case((retried, sa.null()), else_=now),
            )
        )
        rescued = self.db.write(lambda conn: conn.execute(stmt).rowcount)
        return rescued + sum(rescue() for rescue in self.hooks.rescues)

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
    limit: int, queues: Sequence[str] | str | None, worker_id: str, lease: float | Leases | None
) -> list[str] | None:
    """Check capture's options; the queue names (None: every queue)."""
    check_int("limit", limit, minimum=0, maximum=INT32[1])
    check_key("worker_id", worker_id, required=True)
    if lease is not None and not isinstance(lease, Leases):
        check_seconds("lease", lease, positive=True)
    return queue_list(queues)


def _capture_shape(
    names: list[str] | None, lease: float | Leases | None
) -> tuple[int | None, int | None]:
    """What a capture statement is built for: how many queues, and how many named leases
    (None: one lease for every row)."""
    named = len(_leases(lease).by_name) if lease is None or isinstance(lease, Leases) else None
    return (None if names is None else len(names), named)


def _leases(lease: float | Leases | None) -> Leases:
    return lease if isinstance(lease, Leases) else NO_NAMED_LEASES


def _capture_parameters(
    limit: int, names: list[str] | None, worker_id: str, lease: float | Leases | None
) -> dict[str, Any]:
    params: dict[str, Any] = {"limit": limit, "worker_id": worker_id, **_lease_parameters(lease)}
    if names is not None:
        params.update({f"queue_{i}": name for i, name in enumerate(names)})
    return params


def _lease_parameters(lease: float | Leases | None) -> dict[str, Any]:
    """The bound values of jobq.dialects.base.lease_of for ``lease``."""
    if lease is None or isinstance(lease, Leases):
        return _leases(lease).parameters()
    return {"lease_seconds": float(lease)}
