"""Schedules as values: as an app defines them, as the database holds them, and what a sync
of an app's schedules changed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobq.cron.schedule import Cron
from jobq.db.tasks import Status


@dataclass(frozen=True)
class Schedule:
    """A schedule as an app defines it: run task ``task`` with ``args`` on every tick."""

    name: str
    cron: Cron
    task: str
    queue: str
    args: Mapping[str, Any] = field(default_factory=dict)
    retries: int = 0
    priority: int = 0
    lease: float = 30.0
    timeout: float | None = None
    lock_key: str | None = None

    def task_values(self) -> dict[str, Any]:
        """The columns of its task row that come from the definition."""
        return {
            "name": self.task, "queue_id": self.queue, "args": dict(self.args),
            "priority": self.priority, "lease": self.lease, "timeout": self.timeout,
            "lock_key": self.lock_key,
        }  # fmt: skip


@dataclass(frozen=True)
class ScheduleState:
    """A schedule as the database holds it, for `jobq cron list`."""

    name: str
    task: str
    queue: str
    cron: str
    timezone: str
    enabled: bool
    defined: bool
    #: The status of its task row: in_progress while a run is under way.
    status: Status
    #: When it runs next (its tick, or a retry of the last run); meaningless while paused.
    next_run: datetime
    #: When the last run started, and how it ended (None: never ended yet).
    last_run: datetime | None
    last_status: str | None
    task_id: int

    @property
    def active(self) -> bool:
        """Whether its ticks run: enabled (`jobq cron enable`) and still defined in the app
        of the workers serving its queue."""
        return self.enabled and self.defined


@dataclass(frozen=True)
class SyncReport:
    """What sync_schedules changed: schedules created, updated, and no longer defined."""

    created: list[str]
    updated: list[str]
    removed: list[str]
