"""WorkerRegistry: the jobq_workers rows that say which workers are alive, for `jobq status`.

A part of Store (mixed in); it runs on the Store's database.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.core.live_workers import LiveWorker
from jobq.db.tasks import Status, as_utc
from jobq.db.validation import check_key, check_seconds
from jobq.dialects.base import Dialect
from jobq.dialects.schema import status_is, tasks, workers
from jobq.engine.database import Database

#: Seconds after which a worker not seen is forgotten: every worker's rescue pass deletes
#: its row. Until then `jobq status` lists it as stale (once unseen for 60 s).
FORGET_AFTER = 3600.0


class WorkerRegistry:
    """Workers register when they start, touch their row as they run, and leave."""

    def __init__(self, db: Database, dialect: Dialect) -> None:
        self.db = db
        self.dialect = dialect

    def register_worker(
        self,
        worker_id: str,
        *,
        host: str,
        pid: int,
        queues: Sequence[str] | None,
        concurrency: int,
        supervisor_pid: int | None = None,
    ) -> None:
        """Record a starting worker (replacing a stale row of the same id); a worker
        process of a `jobq worker --processes N` group names its supervisor's pid."""
        check_key("worker_id", worker_id, required=True)
        now = self.dialect.now()
        insert = sa.insert(workers).values(
            worker_id=worker_id, host=host[:255], pid=pid,
            queues=None if queues is None else list(queues), concurrency=concurrency,
            started_at=now, last_seen=now, supervisor_pid=supervisor_pid,
        )  # fmt: skip

        def register(conn: Connection) -> None:
            conn.execute(sa.delete(workers).where(workers.c.worker_id == worker_id))
            conn.execute(insert)

        self.db.write(register, atomic=True)

    def touch_worker(self, worker_id: str) -> bool:
        """Mark ``worker_id`` as seen now; False if it is not registered (any more)."""
        stmt = (
            sa.update(workers)
            .where(workers.c.worker_id == worker_id)
            .values(last_seen=self.dialect.now())
        )
        return self.db.write(lambda conn: conn.execute(stmt).rowcount == 1)

    def unregister_worker(self, worker_id: str) -> None:
        """Remove a stopping worker from the registry."""
        stmt = sa.delete(workers).where(workers.c.worker_id == worker_id)
        self.db.write(lambda conn: conn.execute(stmt))

    def live_workers(self, *, stale_after: float = 60.0) -> list[LiveWorker]:
        """Every registered worker, oldest first, as `jobq workers` lists them: a
        LiveWorker per row (id, host, pid, queues, concurrency, started_at, last_seen and
        ``last_seen_ago`` on the database's clock, runs past their timeouts), ``alive``
        if seen within ``stale_after`` seconds. InvalidOption for a negative
        ``stale_after``."""
        check_seconds("stale_after", stale_after)
        recent = workers.c.last_seen >= self.dialect.now_plus(-float(stale_after))
        overrun = (
            sa.select(sa.func.count())
            .where(
                # Inline constant and the index's flag: a generic plan (or MySQL) reaches
                # the partial index of running rows, not a scan of every finished one.
                self.dialect.within("jobq_tasks_lease_expiry"),
                status_is(Status.IN_PROGRESS),
                tasks.c.locked_by == workers.c.worker_id,
                tasks.c.timeout.is_not(None),
                tasks.c.started_at < self.dialect.now_plus(-tasks.c.timeout),
            )
            .scalar_subquery()
        )
        stmt = sa.select(
            workers,
            recent.label("alive"),
            overrun.label("timed_out"),
            self.dialect.now().label("db_now"),
        ).order_by(workers.c.started_at)
        with self.db.unit(read_only=True) as conn:
            rows = conn.execute(stmt).all()
        return [
            LiveWorker(
                worker_id=r.worker_id, host=r.host, pid=r.pid, queues=r.queues,
                concurrency=r.concurrency, started_at=as_utc(r.started_at),
                last_seen=as_utc(r.last_seen), alive=bool(r.alive),
                last_seen_ago=(as_utc(r.db_now) - as_utc(r.last_seen)).total_seconds(),
                timed_out=int(r.timed_out), supervisor_pid=r.supervisor_pid,
            )
            for r in rows
        ]  # fmt: skip

    def forget_workers(self, older_than: float) -> int:
        """Delete registry rows not seen for ``older_than`` seconds (crashed workers); how many."""
        check_seconds("older_than", older_than)
        stmt = sa.delete(workers).where(
            workers.c.last_seen < self.dialect.now_plus(-float(older_than))
        )
        return self.db.write(lambda conn: conn.execute(stmt).rowcount)
