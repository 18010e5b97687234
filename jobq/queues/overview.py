"""Every queue as `jobq queues list` shows it: its tasks by status, whether it is paused,
its limit, how long it keeps finished tasks, and the live workers that serve it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobq.db.tasks import Status
from jobq.lifecycle.admin import TaskAdmin
from jobq.limits import Limit
from jobq.limits.pause import Pauses
from jobq.limits.sql import Limits
from jobq.queues.retention import QueueRetention

if TYPE_CHECKING:
    from jobq.core.store import TaskStore


@dataclass(frozen=True)
class QueueState:
    """One queue: ``counts`` by status value (every status, 0 if none), ``paused``, its
    ``limit`` (None: unlimited), ``retain``: seconds its finished tasks are kept (math.inf:
    forever; None: the workers' --retain), and the ids of the live ``workers`` serving it."""

    name: str
    counts: dict[str, int]
    paused: bool
    limit: Limit | None
    retain: float | None
    workers: list[str]


def queue_states(store: TaskStore) -> list[QueueState]:
    """Every queue that has tasks, a limit, a pause or a retention of its own, or that a
    live worker names; by name.

    A worker serving every queue is counted among the workers of each.
    """
    counts = store.capability(TaskAdmin).counts()
    limits = store.capability(Limits).limits()
    paused = set(store.capability(Pauses).paused_queues())
    retentions = store.capability(QueueRetention).retentions()
    live = [worker for worker in store.live_workers() if worker.alive]
    named = {queue for worker in live for queue in worker.queues or ()}
    names = {queue for queue, _ in counts} | set(limits) | paused | named | set(retentions)
    return [
        QueueState(
            name=name,
            counts={status.value: counts.get((name, status), 0) for status in Status},
            paused=name in paused,
            limit=limits.get(name),
            retain=retentions.get(name),
            workers=[w.worker_id for w in live if w.queues is None or name in w.queues],
        )
        for name in sorted(names)
    ]
