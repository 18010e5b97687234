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

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from jobq.core import run_end
from jobq.core.capture_options import (
    capture_options,
    capture_parameters,
    capture_shape,
    lease_parameters,
)
from jobq.core.ends import EndRecorder
from jobq.core.enqueue import Enqueuer
from jobq.core.hooks import Hooks
from jobq.core.retry import Backoff, ExponentialBackoff
from jobq.core.workers import WorkerRegistry
from jobq.db.database import Database
from jobq.db.outage import Outage
from jobq.db.schema import status_is, tasks
from jobq.db.tasks import CANCELLED_ON_REQUEST, Leases, Status, Task
from jobq.db.validation import check_int, check_key, check_seconds
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
        #: The fenced ends of runs.
        self.ends = EndRecorder(self)
        self.set_status = self.ends.set_status
        self.set_statuses = self.ends.set_statuses
        self.complete_and_capture = self.ends.complete_and_capture

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
        names = capture_options(limit, queues, worker_id, lease)
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
        shape = (*capture_shape(names, lease), unlimited_only)
        params = capture_parameters(limit, names, worker_id, lease)
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
        _, named = capture_shape(None, lease)
        stmt = self.dialect.memo(("heartbeat", named), lambda: self._heartbeat_statement(named))
        params: dict[str, Any] = {"worker_id": worker_id, **lease_parameters(lease)}

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
