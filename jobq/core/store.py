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

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from jobq.core import run_end
from jobq.core.capture import Capturer
from jobq.core.capture_options import (
    capture_shape,
    lease_parameters,
)
from jobq.core.ends import EndRecorder
from jobq.core.enqueue import Enqueuer
from jobq.core.hooks import Hooks
from jobq.core.retry import Backoff, ExponentialBackoff
from jobq.core.workers import WorkerRegistry
from jobq.db.outage import Outage
from jobq.db.tasks import CANCELLED_ON_REQUEST, Leases, Status, Task
from jobq.db.validation import check_int, check_key, check_seconds
from jobq.dialects.base import lease_of
from jobq.dialects.schema import status_is, tasks
from jobq.engine.database import Database

c = tasks.c

# heartbeat names at most this many (id, attempt) pairs per statement.
_HEARTBEAT_CHUNK = 500

_C = TypeVar("_C")


class TaskStore:
    """Tasks in SQL rows: enqueue, capture, set_status, heartbeat, rescue."""

    def __init__(
        self,
        url_or_engine: str | sa.URL | Engine | None = None,
        *,
        backoff: Backoff | None = None,
        listen_url: str | sa.URL | None = None,
        enqueue_wait: float | None = None,
    ) -> None:
        """``listen_url``: where workers and waiters listen for notifications when the URL
        goes through a transaction pooler (``?jobq_pooler=transaction``): the server's own.
        ``enqueue_wait``: seconds an enqueue waits for an unreachable database (None:
        $JOBQ_ENQUEUE_WAIT, else 5; see jobq.core.enqueue_wait)."""
        self.db = Database(url_or_engine, listen_url=listen_url)
        self.engine: Engine = self.db.engine
        self.dialect = self.db.dialect
        # Decodes raw task rows with SQLAlchemy's type processors.
        self._read = self.dialect.row_reader(list(tasks.c), self.engine)
        #: Called by dispose(): what threads of this Store's own hold (a waiters' LISTEN).
        self.on_dispose: list[Callable[[], None]] = []
        #: What capabilities registered to act inside capture and the ends (jobq.core.hooks).
        self.hooks = Hooks()
        self._capabilities: dict[Callable[[TaskStore], Any], Any] = {}
        #: Enqueueing: new task rows, one or many per statement.
        self.enqueuer = Enqueuer(self.db, self.dialect, enqueue_wait, self.hooks)
        self.enqueue = self.enqueuer.enqueue
        self.enqueue_many = self.enqueuer.enqueue_many
        #: The registry of live workers (jobq_workers).
        self.workers = WorkerRegistry(self.db, self.dialect)
        self.register_worker = self.workers.register_worker
        self.touch_worker = self.workers.touch_worker
        self.unregister_worker = self.workers.unregister_worker
        self.live_workers = self.workers.live_workers
        self.forget_workers = self.workers.forget_workers
        #: Capture (jobq.core.capture).
        self.capturer = Capturer(self.db, self.dialect, self.hooks, self._read)
        self.capture = self.capturer.capture
        #: The fenced ends of runs (jobq.core.ends).
        self.ends = EndRecorder(
            self.db, self.dialect, self.hooks, self.capturer, backoff or ExponentialBackoff()
        )
        self.set_status = self.ends.set_status
        self.set_statuses = self.ends.set_statuses
        self.complete_and_capture = self.ends.complete_and_capture

    @property
    def enqueue_wait(self) -> float:
        """Seconds an enqueue not in a caller's transaction waits for a database it cannot
        reach before it raises DatabaseUnavailable; 0: at once. Settable."""
        return self.enqueuer.wait

    @enqueue_wait.setter
    def enqueue_wait(self, seconds: float) -> None:
        self.enqueuer.wait = seconds

    @property
    def backoff(self) -> Backoff:
        """Chooses the delay before a failed task's retry when set_status is not told."""
        return self.ends.backoff

    @backoff.setter
    def backoff(self, backoff: Backoff) -> None:
        self.ends.backoff = backoff

    def capability(self, kind: Callable[[TaskStore], _C]) -> _C:
        """This store's one ``kind(self)``, made on its first use: the object of a
        capability, which registers its hooks on this store as it is made."""
        made = self._capabilities.get(kind)
        if made is None:
            made = self._capabilities[kind] = kind(self)
        return made

    def __repr__(self) -> str:
        return f"Store({self.db!r})"

    def dispose(self) -> None:
        """Close every pooled connection, and stop the threads that wait on this Store."""
        for stop in self.on_dispose:
            stop()
        self.db.dispose()

    def migrate(self) -> None:
        """Create or upgrade jobq's tables to the newest revision (Alembic upgrade head)."""
        from jobq.engine import migrations  # Alembic takes 60 ms to import; only these need it

        migrations.upgrade_database(self.db)

    def check_schema(self) -> None:
        """Return if the database's jobq schema is at this jobq's newest revision; else
        raise SchemaNotMigrated (never migrated, or older) or SchemaTooNew (newer)."""
        from jobq.engine import migrations

        migrations.check(self.db)

    # --- heartbeat and notifications --------------------------------------------------

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
