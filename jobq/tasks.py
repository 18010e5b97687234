"""Task rows as Python values: the Status enum and the frozen Task dataclass. No I/O."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from jobq.errors import UnknownStatus


class Status(enum.StrEnum):
    """Where a task is in its life; see the state machine in DESIGN.md."""

    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @classmethod
    def parse(cls, value: str | Status) -> Status:
        """Return the Status named by ``value``, or raise UnknownStatus naming it."""
        try:
            return cls(value)
        except ValueError:
            raise UnknownStatus(status=value, expected=", ".join(s.value for s in cls)) from None


def as_utc(moment: datetime | None) -> datetime | None:
    """Return ``moment`` as an aware UTC datetime; naive datetimes are taken to be UTC."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class Task:
    """One row of the tasks table, as read at a moment; ``attempt`` is its fencing token."""

    id: int
    name: str
    args: dict[str, Any]
    queue_id: str
    status: Status
    priority: int
    attempt: int
    retries_left: int
    run_at: datetime
    locked_by: str | None = None
    locked_until: datetime | None = None
    lease: float = 30.0
    timeout: float | None = None
    unique_key: str | None = None
    lock_key: str | None = None
    result: Any = None
    error: str | None = None
    recurring: bool = False
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @classmethod
    def from_row(cls, row: Any) -> Task:
        """Build a Task from a result row of the tasks table."""
        m = row._mapping
        return cls(
            id=m["id"],
            name=m["name"],
            args=m["args"],
            queue_id=m["queue_id"],
            status=Status(m["status"]),
            priority=m["priority"],
            attempt=m["attempt"],
            retries_left=m["retries_left"],
            run_at=as_utc(m["run_at"]),  # type: ignore[arg-type]
            locked_by=m["locked_by"],
            locked_until=as_utc(m["locked_until"]),
            lease=m["lease"],
            timeout=m["timeout"],
            unique_key=m["unique_key"],
            lock_key=m["lock_key"],
            result=m["result"],
            error=m["error"],
            recurring=bool(m["recurring"]),
            created_at=as_utc(m["created_at"]),
            started_at=as_utc(m["started_at"]),
            finished_at=as_utc(m["finished_at"]),
        )

    @property
    def fence(self) -> tuple[int, int]:
        """The (id, attempt) pair that every later write about this run must present."""
        return (self.id, self.attempt)
