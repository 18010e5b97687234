"""The fenced ends of runs: set_status, set_statuses and complete_and_capture.

Every end is one UPDATE fenced by the run's attempt (jobq.core.run_end builds them): it
applies only while the row is still in_progress with that attempt, and says whether it
did. The ends of workflow nodes and of recurring rows go through the hooks of
jobq.core.hooks, in the same transaction or right after.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.core import run_end
from jobq.core.capture import Capturer
from jobq.core.capture_options import capture_options, capture_parameters, capture_shape
from jobq.core.hooks import Hooks
from jobq.core.retry import Backoff
from jobq.db.errors import first_line
from jobq.db.prepared import Prepared
from jobq.db.tasks import Completion, Leases, Status, Task
from jobq.dialects.base import Dialect
from jobq.engine.database import Database

if TYPE_CHECKING:
    from collections.abc import Callable


class EndRecorder:
    """Records the ends of runs for one TaskStore (its set_status, set_statuses and
    complete_and_capture)."""

    def __init__(
        self, db: Database, dialect: Dialect, hooks: Hooks, capturer: Capturer, backoff: Backoff
    ) -> None:
        self.db = db
        self.dialect = dialect
        self.hooks = hooks
        self.capturer = capturer
        #: Chooses the delay before a failed task's retry when set_status is not told.
        self.backoff = backoff

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

        The end is fenced by ``attempt`` (``task.attempt`` of the capture): once the run's
        lease expired and another capture took the task, or the task was cancelled or
        ended, this run's end changes nothing and returns False. A workflow node's end
        settles the nodes after it in the same transaction.

        Args:
            id: the task's id; ``attempt`` its run's, as captured.
            status: a jobq.Status or its name: done, failed, queued or cancelled.
            result: what the run returned (JSON), for done.
            error: the error to store (a traceback, say).
            run_at: when a retry, a release or a recurring row's next run falls due.
            retry_delay: seconds before a retry or release, when not ``run_at``.
            connection: a SQLAlchemy connection whose transaction records the end.

        Raises:
            UnknownStatus: ``status`` is not one of jobq.Status.
            InvalidOption: a bad id or attempt; ``blocked`` or ``in_progress`` as the
                status; ``run_at`` with ``retry_delay``; a negative delay.
            PayloadTooLarge: ``result`` takes more than the database takes.
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
        names = capture_options(limit, queues, worker_id, lease)
        limited = self.capturer.filtered(names) if limit else {}
        encoded = self._encode(completions) if completions else None
        # Ends of workflow nodes settle the nodes after them, which capture must then see.
        nodes = encoded is not None and any(end.in_workflow for end in encoded.completions)
        if encoded is None or limited or len(encoded.chunks) > 1 or nodes:
            applied = self._record_safely(encoded) if encoded else 0
            return applied, self.capturer.capture_all(
                limit, names, worker_id, lease, limiter, limited
            )
        try:
            return self.capturer.retrying_lock_key_races(
                lambda: self._complete_and_capture(encoded, limit, names, worker_id, lease)
            )
        except sa.exc.DBAPIError as error:
            if self.dialect.is_lock_key_conflict(error):
                raise
            # The database refused the ends' data: write them one by one, then capture.
            applied = self._record_one_by_one(encoded.completions)
            return applied, self.capturer.capture_all(
                limit, names, worker_id, lease, limiter, limited
            )

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
        shape = capture_shape(names, lease)
        together = self.db.prepare_optional(
            ("complete and capture", *shape),
            lambda: self.dialect.complete_and_capture_statement(
                run_end.record_statement(self.dialect), *shape
            ),
        )
        if together is not None:
            params = {**params, **capture_parameters(limit, names, worker_id, lease)}
            rows = self.db.run(together, params, fetch=True)
            applied = rows[0][0] + self._end_unapplied(completions, rows[0][0])
            return applied, self.capturer.captured(row[1:] for row in rows if row[1] is not None)
        record = self._record_prepared()

        def record_and_capture(conn: Connection) -> tuple[int, list[Task]]:
            applied = conn.exec_driver_sql(record.sql, record.parameters(params)).rowcount
            applied += self._end_unapplied(completions, applied, conn)
            return applied, self.capturer.take(conn, limit, names, worker_id, lease)

        return self.db.write(record_and_capture, atomic=True)

    def _record_prepared(self) -> Prepared:
        return self.db.prepare("record", lambda: run_end.record_statement(self.dialect))
