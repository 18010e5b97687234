"""Capture: at most ``limit`` capturable tasks moved to in_progress, atomically.

One statement where the dialect can (else one transaction), whose text the dialect builds
(jobq.dialects: predicates.py says which rows are capturable). Queues that the capture
filter (jobq.core.hooks) takes over are captured through it first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.core.capture_options import capture_options, capture_parameters, capture_shape
from jobq.core.hooks import Hooks
from jobq.db.tasks import Leases, Task
from jobq.dialects.base import Dialect
from jobq.engine.database import Database

# Each lost lock-key race means another capture committed a run; a handful is plenty.
_LOCK_KEY_RACE_TRIES = 5

_T = TypeVar("_T")


class Capturer:
    """The captures of one TaskStore (its ``capture``)."""

    def __init__(
        self, db: Database, dialect: Dialect, hooks: Hooks, read: Callable[[Any], Any]
    ) -> None:
        self.db = db
        self.dialect = dialect
        self.hooks = hooks
        # Decodes raw task rows with SQLAlchemy's type processors.
        self._read = read

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
        capture through the hook ``capture_filter``, jobq.core.hooks.) Paused queues are
        never captured. Workers call this; call it yourself only to run tasks your own way,
        ending each run with set_status(task.id, task.attempt, ...).

        Args:
            limit: the most tasks to take (0 or more).
            queues: a queue's name or a list of them; None: every queue.
            worker_id: who takes them (``locked_by``): a non-empty string.
            lease: seconds (> 0) each run is held unrenewed (see heartbeat), or a
                jobq.db.tasks.Leases (seconds per task name).

        Returns:
            The captured tasks, now ``in_progress``.

        Raises:
            InvalidOption: a negative ``limit``, an empty ``worker_id`` or queue name.
        """
        names = capture_options(limit, queues, worker_id, lease)
        limited = self.filtered(names) if limit else {}
        return self.capture_all(limit, names, worker_id, lease, limiter, limited)

    def capture_all(
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
            captured = self.retrying_lock_key_races(
                lambda: gate.capture_filtered(
                    limited, limit, limiter=limiter, worker_id=worker_id, lease=lease
                )
            )
        rest = limit - len(captured)
        if names is not None and gate is not None and gate.withheld(names):
            return captured  # every queue named is limited or paused: nothing is left
        return captured + self.retrying_lock_key_races(
            lambda: self.take(None, rest, names, worker_id, lease)
        )

    def take(
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
        return self.captured(rows)

    def filtered(self, names: list[str] | None) -> Mapping[str, Any]:
        """The queues of ``names`` that a capture leaves to the capture filter, if any."""
        gate = self.hooks.capture_filter
        return {} if gate is None else gate.filtered(names)

    def captured(self, rows: Iterable[Sequence[Any]]) -> list[Task]:
        """Tasks from captured rows, in capture order."""
        captured = [Task.from_values(self._read(row)) for row in rows]
        captured.sort(key=lambda t: (-t.priority, t.run_at, t.id))
        return captured

    def retrying_lock_key_races(self, attempt: Callable[[], _T]) -> _T:
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
