"""How long each queue's finished tasks are kept (``store.retention``).

A queue without a row in jobq_queue_retention keeps them for the workers' ``--retain``
(7 days by default); a row gives the queue a time of its own, or NULL: forever. The
worker elected for the upkeep prunes them (jobq.upkeep.retention).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.db.validation import check_key, check_seconds
from jobq.dialects.schema import queue_retention

if TYPE_CHECKING:
    from jobq.core.store import TaskStore

rc = queue_retention.c

#: What Store.retentions() gives for a queue that keeps its finished tasks forever.
FOREVER = math.inf


class QueueRetention:
    """Set, clear and read the queues' own retention times (``store.retention``): how
    long the workers keep each queue's finished tasks before they prune them.

    A queue without one keeps its finished tasks for the workers' ``--retain`` (7 days by
    default). ``jobq.queues.retention.FOREVER`` (``math.inf``) keeps them forever.

    Example:
        ```python
        import math

        import jobq

        store = jobq.Store()
        store.migrate()
        store.retention.set_retention("audit", math.inf)  # never pruned
        store.retention.set_retention("thumbnails", 3600)  # an hour
        assert store.retention.retentions() == {"audit": math.inf, "thumbnails": 3600.0}
        assert store.retention.clear_retention("thumbnails")  # back to --retain
        ```
    """

    def __init__(self, store: TaskStore) -> None:
        self.db = store.db
        self.dialect = store.dialect

    def set_retention(self, queue: str, seconds: float) -> None:
        """Keep the finished tasks of ``queue`` for ``seconds`` (FOREVER: never prune them),
        whatever the workers' --retain says (`jobq queues retain`); it replaces the
        queue's previous time.
        InvalidOption for an empty queue name, or ``seconds`` not > 0."""
        check_key("queue", queue, required=True)
        if seconds != FOREVER:
            check_seconds("seconds", seconds, positive=True)
        value = None if seconds == FOREVER else float(seconds)
        row = {"queue": queue, "retain_seconds": value, "updated_at": self.dialect.now()}
        update = {"retain_seconds": value, "updated_at": self.dialect.now()}

        def upsert(conn: Connection) -> None:
            conn.execute(self.dialect.upsert_statement(queue_retention, rc.queue, row, update))

        self.db.write(upsert, atomic=True)

    def clear_retention(self, queue: str) -> bool:
        """Let ``queue`` keep its finished tasks for the workers' --retain again; False if
        it had no time of its own."""
        check_key("queue", queue, required=True)
        stmt = sa.delete(queue_retention).where(rc.queue == queue)
        return bool(self.db.write(lambda conn: conn.execute(stmt).rowcount))

    def retentions(self) -> dict[str, float]:
        """Each queue with a retention of its own: its seconds (FOREVER: kept forever)."""
        with self.db.unit(read_only=True) as conn:
            rows = conn.execute(sa.select(rc.queue, rc.retain_seconds)).all()
        return {queue: FOREVER if seconds is None else float(seconds) for queue, seconds in rows}
