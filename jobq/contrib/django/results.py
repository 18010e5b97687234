"""jobq's rows read as Django ``TaskResult``s: status, return value, errors, times, workers.

============================================  ==============
jobq row                                      TaskResult
============================================  ==============
queued, blocked, failed with retries left     READY
in_progress                                   RUNNING
done                                          SUCCESSFUL
failed for good, cancelled                    FAILED
============================================  ==============

jobq keeps a task's last error (a traceback) and its last attempt's start: ``errors`` holds
that one error, ``started_at`` and ``last_attempted_at`` that start. ``worker_ids`` has one
entry per attempt, so that ``attempts`` is jobq's count: the running attempt's worker id, and
an empty string for the ended ones, whose worker jobq does not keep.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from django.conf import settings
from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.base import TaskError
from django.utils import timezone

from jobq.db.tasks import Status
from jobq.db.tasks import Task as Row

#: The exception jobq's stored errors stand for when they are not a traceback (a timeout,
#: a result that could not be stored) and for a cancelled task.
FAILED = "jobq.db.errors.TaskFailed"
CANCELLED = "jobq.db.errors.TaskCancelled"
# The last line of a traceback names the exception: "ValueError: ..." or "pkg.mod.Error".
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")


def status_of(row: Row) -> TaskResultStatus:
    """The Django status of the jobq row ``row``."""
    if row.status is Status.IN_PROGRESS:
        return TaskResultStatus.RUNNING
    if row.status is Status.DONE:
        return TaskResultStatus.SUCCESSFUL
    if row.status is Status.CANCELLED or (row.status is Status.FAILED and row.retries_left <= 0):
        return TaskResultStatus.FAILED
    return TaskResultStatus.READY


def errors_of(row: Row) -> list[TaskError]:
    """The TaskError of the row's stored error (none if it has none)."""
    if row.status is Status.CANCELLED:
        return [TaskError(exception_class_path=CANCELLED, traceback=row.error or "cancelled")]
    if not row.error:
        return []
    return [TaskError(exception_class_path=exception_path(row.error), traceback=row.error)]


def exception_path(error: str) -> str:
    """The dotted path of the exception a stored traceback ends with (builtins' named so)."""
    for line in reversed(error.strip().splitlines()):
        match = _EXCEPTION_LINE.match(line)
        if match and not line.startswith(("Traceback", "During handling", "The above")):
            name = match.group(1)
            return name if "." in name else f"builtins.{name}"
    return FAILED


def result_of(task: Task, row: Row, *, backend: str) -> TaskResult:
    """The TaskResult of ``task`` from its jobq row ``row``, for the backend ``backend``."""
    status = status_of(row)
    arguments: dict[str, Any] = row.args
    worker_ids = [""] * row.attempt
    if row.status is Status.IN_PROGRESS and row.locked_by and worker_ids:
        worker_ids[-1] = row.locked_by
    finished = status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)
    result = TaskResult(
        task=task.using(priority=row.priority, queue_name=row.queue_id),
        id=str(row.id),
        status=status,
        enqueued_at=local_time(row.created_at),
        started_at=local_time(row.started_at),
        last_attempted_at=local_time(row.started_at),
        finished_at=local_time(row.finished_at) if finished else None,
        args=list(arguments.get("args", [])),
        kwargs=dict(arguments.get("kwargs", {})),
        backend=backend,
        errors=errors_of(row) if status is not TaskResultStatus.SUCCESSFUL else [],
        worker_ids=worker_ids,
    )
    if status is TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", row.result)
    return result


def local_time(moment: datetime | None) -> datetime | None:
    """``moment`` (aware, UTC) as Django's settings want it: aware, or naive local time."""
    if moment is None or settings.USE_TZ:
        return moment
    return timezone.make_naive(moment)
