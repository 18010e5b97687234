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
    """A schedule as an app defines it: run task ``task`` with ``args`` on every tick.

    ``@app.periodic(...)`` makes one and keeps it in ``app.schedules`` by name; each
    `jobq worker` stores its app's schedules as it starts (``store.cron.sync_schedules``).
    The task row's options (queue, retries, priority, lease, timeout, lock key) come
    from the task's definition.

    Attributes:
        name: the schedule's name (`jobq cron list`, `jobq cron run NAME`).
        cron: when it ticks: a jobq.Cron (expression and time zone).
        task: the name of the task each tick runs.
        queue: the queue its runs wait in.
        args: the arguments of every run.
    """

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
    """A schedule as the database holds it, as `jobq cron list` shows it:
    ``store.cron.schedules()`` returns them.

    Attributes:
        name: the schedule's name.
        task: the task its ticks run; ``task_id`` is its recurring row.
        queue: the queue of its runs.
        cron: its expression, read in ``timezone``.
        enabled: False once `jobq cron disable` paused it.
        defined: False once the last worker to start on its queue no longer had it in
            its app.
        status: the status of its row: ``in_progress`` while a run is under way, ``done``
            between ticks, ``cancelled`` while it does not run.
        next_run: when it runs next (meaningless while it does not run).
        last_run: when its last run started, and ``last_status`` how it ended (None
            before the first end): done, failed, timed out, lease expired, cancelled or
            released.

    Example:
        ```python
        import jobq

        app = jobq.App()
        app.migrate()

        @app.periodic(cron="0 6 * * *", timezone="Europe/Paris")
        def morning_report() -> None: ...

        app.store.cron.sync_schedules(app.schedules.values())  # what a worker does
        [state] = [s for s in app.store.cron.schedules() if s.name == "morning_report"]
        assert state.active and state.last_run is None and state.next_run.hour in (4, 5)
        app.store.cron.set_schedule_enabled("morning_report", False)  # `jobq cron disable`
        ```
    """

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
