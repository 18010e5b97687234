"""Pausing a queue (``store.pauses``): no worker captures from it until it is resumed.

A paused queue has a row in jobq_limits with ``paused`` set. Every capture of unlimited
queues already leaves out the queues with a row (``queue_id NOT IN jobq_limits``), and a
limiter's capture leaves out the paused ones, so a pause holds from its commit on and
costs the captures of other queues nothing. Running tasks finish; nothing is released.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.db.validation import check_key
from jobq.dialects.schema import limits
from jobq.limits.sql import Limits

if TYPE_CHECKING:
    from jobq.core.store import TaskStore

lc = limits.c


class Pauses:
    """Pause and resume queues, and say which are paused (``store.pauses``): what
    ``app.pause_queue``, `jobq queues pause` and `jobq queues resume` do.

    A pause is a column of the queue's jobq_limits row: captures leave a paused queue to
    the limits (jobq.limits.sql.Limits), whose copy of the table every change here drops.
    A queue's pause and its limit are independent: clearing one keeps the other.

    Example:
        ```python
        import jobq

        store = jobq.Store()
        store.migrate()
        assert store.pauses.pause_queue("exports")
        assert not store.pauses.pause_queue("exports")  # paused already
        assert store.pauses.paused_queues() == ["exports"]
        store.enqueue("export", {}, queue="exports")  # enqueues still go in
        assert store.pauses.resume_queue("exports") and store.pauses.paused_queues() == []
        ```
    """

    def __init__(self, store: TaskStore) -> None:
        self.db = store.db
        self.dialect = store.dialect
        self._limits = store.capability(Limits)

    def pause_queue(self, queue: str) -> bool:
        """Stop every worker capturing from ``queue``; False if it was paused already.

        It holds from its commit on, for every worker on every host; its running tasks
        finish as they would; its waiting tasks wait, and enqueues still go in.
        InvalidOption for an empty queue name.
        """
        check_key("queue", queue, required=True)
        now = self.dialect.now()

        def pause(conn: Connection) -> bool:
            was = conn.execute(sa.select(lc.paused).where(lc.queue == queue)).scalar()
            # A new row limits nothing; its generation is drawn as every setting's is.
            row = {"queue": queue, "paused": True, "updated_at": now}
            row["generation"] = secrets.randbits(62) + 1
            update = {"paused": True, "updated_at": now}
            conn.execute(self.dialect.upsert_statement(limits, lc.queue, row, update))
            return not was

        paused = self.db.write(pause, atomic=True)
        self._limits.forget()
        return paused

    def resume_queue(self, queue: str) -> bool:
        """Let workers capture from ``queue`` again; False if it was not paused.
        InvalidOption for an empty queue name."""
        check_key("queue", queue, required=True)

        def resume(conn: Connection) -> bool:
            paused = sa.and_(lc.queue == queue, lc.paused)
            unlimited = sa.and_(lc.concurrency.is_(None), lc.rate_count.is_(None), sa.not_(lc.fair))
            resumed = conn.execute(sa.delete(limits).where(paused, unlimited)).rowcount
            if not resumed:
                update = sa.update(limits).where(paused).values(paused=False)
                resumed = conn.execute(update.values(updated_at=self.dialect.now())).rowcount
            if resumed:
                # A limited queue is captured through its limiter, which idle workers
                # know of from limits they read now and then: have them read again now.
                self.dialect.wake_for_limits(conn, queue)
            return bool(resumed)

        resumed = self.db.write(resume, atomic=True)
        self._limits.forget()
        return resumed

    def paused_queues(self) -> list[str]:
        """The paused queues, by name, as stored now."""
        stmt = sa.select(lc.queue).where(lc.paused).order_by(lc.queue)
        with self.db.unit(read_only=True) as conn:
            return list(conn.execute(stmt).scalars())
