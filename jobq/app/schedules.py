"""The Schedule an ``@app.periodic(...)`` makes of a task's definition, checked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobq.core.registry import TaskDefinition
from jobq.cron.periodic import Schedule
from jobq.cron.schedule import Cron
from jobq.db.errors import InvalidOption
from jobq.db.validation import check_key


def schedule_of(
    definition: TaskDefinition,
    cron: Cron,
    *,
    name: str | None,
    queue: str | None,
    kwargs: Mapping[str, Any] | None,
    defined: Mapping[str, Schedule],
) -> Schedule:
    """The schedule running ``definition`` on ``cron``; InvalidOption for a bad name or
    queue, or a name among ``defined`` already, InvalidTaskArguments for bad ``kwargs``."""
    schedule_name = name or definition.name
    check_key("name", schedule_name, required=True)
    if queue is not None:
        check_key("queue", queue, required=True)
    if schedule_name in defined:
        raise InvalidOption(
            option="name",
            reason=f"a schedule named {schedule_name!r} is already defined; give "
            "each schedule of a task its own name",
        )
    arguments = definition.check_arguments(kwargs)
    return Schedule(
        name=schedule_name, cron=cron, task=definition.name,
        queue=queue or definition.queue, args=arguments, retries=definition.retries,
        priority=definition.priority, lease=definition.lease, timeout=definition.timeout,
        lock_key=definition.lock_key(arguments),
    )  # fmt: skip
