"""Task rows as Python values: the Status enum and the frozen Task dataclass. No I/O."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, overload

from jobq.db.errors import UnknownStatus


class Status(enum.StrEnum):
    """Where a task is in its life: the ``status`` column of jobq_tasks.

    A str enum, so ``Status.DONE == "done"``. How a task moves between them is [the
    state machine](../architecture.md#the-state-machine); [Tables and
    columns](tables.md#statuses) says what each means.
    """

    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    #: A workflow node waiting for its parents (jobq.workflows): never captured; the end
    #: of its last parent makes it queued, a parent's failure for good cancels it.
    BLOCKED = "blocked"

    @classmethod
    def parse(cls, value: str | Status) -> Status:
        """Return the Status named by ``value``, or raise UnknownStatus naming it."""
        if type(value) is cls:  # a worker's own ends: no lookup
            return value
        try:
            return cls(value)
        except ValueError:
            raise UnknownStatus(status=value, expected=", ".join(s.value for s in cls)) from None


#: Status by value: a dict lookup, several times faster than calling the enum.
_STATUSES = {s.value: s for s in Status}


@overload
def as_utc(moment: datetime) -> datetime: ...


@overload
def as_utc(moment: None) -> None: ...


@overload
def as_utc(moment: datetime | None) -> datetime | None: ...


def as_utc(moment: datetime | None) -> datetime | None:
    """Return ``moment`` as an aware UTC datetime; naive datetimes are taken to be UTC."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class Task:
    """One row of the tasks table, as read at a moment; ``attempt`` is its fencing token.

    Fields are in the table's column order (jobq.dialects.schema.tasks), so a row maps onto
    them; [Tables and columns](tables.md#jobq_tasks) says what each holds. ``store.get(id)``,
    ``handle.refresh()``, ``store.list_tasks()`` and ``jobq.current_task()`` return them.
    """

    id: int
    queue_id: str
    name: str
    args: dict[str, Any]
    status: Status
    priority: int
    run_at: datetime
    retries_left: int
    attempt: int
    #: Lease and timeout given at enqueue; None: as the worker's definition of the task says.
    lease: float | None
    timeout: float | None
    locked_by: str | None
    locked_until: datetime | None
    unique_key: str | None
    lock_key: str | None
    result: Any
    error: str | None
    recurring: bool
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    #: What the task last said of its progress (jobq.set_progress): current, total, message.
    progress: dict[str, Any] | None = None
    #: When a cancel was asked for while it ran (Store.cancel of a running task).
    cancel_requested_at: datetime | None = None
    #: Someone waits for its end (a TaskHandle on PostgreSQL, which is notified of it).
    awaited: bool = False
    #: The W3C trace context of the span that enqueued it (jobq[otel]), or None.
    trace_context: dict[str, str] | None = None
    #: The workflow (jobq.workflows) it is a node of, or None for a task on its own.
    workflow_id: int | None = None
    #: The key a fair queue shares its captures by (jobq.limits.fair), or None.
    fair_key: str | None = None

    @classmethod
    def from_values(cls, values: Sequence[Any]) -> Task:
        """Build a Task from one row's final Python values, in column order."""
        id, queue_id, name, args, status, *rest = values
        return cls(id, queue_id, name, args, _STATUSES[status], *rest)

    @property
    def cancel_requested(self) -> bool:
        """A cancel of this run was asked for: as read from the row, or heard of since."""
        return self.cancel_requested_at is not None or (self.id, self.attempt) in CANCEL_REQUESTED

    @property
    def fence(self) -> tuple[int, int]:
        """The (id, attempt) pair that every later write about this run must present."""
        return (self.id, self.attempt)


#: The error a run ended by its cancel request keeps (the worker's end, rescue, the SQL).
CANCELLED_ON_REQUEST = "cancelled on request"

#: The fences (id, attempt) of this process's runs whose cancel its worker has heard of
#: since it captured them; the worker adds and removes them, task code reads them.
CANCEL_REQUESTED: set[tuple[int, int]] = set()

#: Seconds of a lease when neither the row nor a definition of its task gives one.
DEFAULT_LEASE = 30.0


@dataclass(frozen=True, slots=True)
class Leases:
    """The lease of each captured row that set none at enqueue: its task's, by name.

    A worker passes the leases of its definitions that differ from ``default``; a row of a
    task it does not know gets ``default``. A row that set a lease keeps its own.
    """

    by_name: tuple[tuple[str, float], ...] = ()
    default: float = DEFAULT_LEASE

    def of(self, task: Task) -> float:
        """The lease seconds ``task`` was captured with."""
        if task.lease is not None:
            return task.lease
        for name, seconds in self.by_name:  # a few names: only those not the default
            if name == task.name:
                return seconds
        return self.default

    def parameters(self) -> dict[str, float | str]:
        """Bound values for the capture statement (jobq.dialects.base.lease_of)."""
        params: dict[str, float | str] = {"lease_default": float(self.default)}
        for i, (name, seconds) in enumerate(self.by_name):
            params[f"lease_name_{i}"] = name
            params[f"lease_value_{i}"] = float(seconds)
        return params


#: Leases naming no task: rows that set no lease get DEFAULT_LEASE.
NO_NAMED_LEASES = Leases()


@dataclass(frozen=True, slots=True)
class Completion:
    """How run ``attempt`` of task ``id`` ended, for Store.set_statuses."""

    id: int
    attempt: int
    status: Status
    result: Any = None
    error: str | None = None
    #: Seconds before the next attempt (failed) or the next run (queued).
    retry_delay: float | None = None
    #: A failure that no retry could mend (its row cannot be decoded, say): it is final,
    #: whatever retries are left.
    terminal: bool = False
    #: The run is of a workflow node: its end may release or cancel the nodes after it.
    in_workflow: bool = False


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A stored JSON value that jobq could not decode (a row written by hand, say).

    A Task's ``args``, ``result`` or ``progress`` is one of these, instead of raising,
    so that the row can still be listed and shown. A worker that captures a task whose
    arguments are one fails it for good (no retry) with the error ``its arguments could
    not be decoded (not JSON: <reason>)``.

    Attributes:
        text: the stored text, as it is.
        reason: why it is not JSON (the decoder's message).

    Example:
        ```python
        import sqlalchemy as sa

        import jobq

        app = jobq.App()
        app.migrate()

        @app.task(queue="raw")
        def echo(text: str) -> str:
            return text

        handle = echo.enqueue(text="hi")
        with app.store.engine.begin() as conn:  # a row broken by hand
            conn.execute(sa.text("UPDATE jobq_tasks SET args = '{oops' WHERE id = :id"),
                         {"id": handle.id})
        args = app.store.get(handle).args
        assert isinstance(args, jobq.Undecodable) and args.text == "{oops"
        ```
    """

    text: str
    reason: str
