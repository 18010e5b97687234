"""Every queue as `jobq queues list` shows it: its tasks by status, whether it is paused,
its limit, whether it is fair, how long it keeps finished tasks, and the live workers that
serve it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobq.db.tasks import Status
from jobq.lifecycle.admin import TaskAdmin
from jobq.limits import FairShare, Limit
from jobq.limits.fair import FairQueues
from jobq.limits.pause import Pauses
from jobq.limits.sql import Limits
from jobq.queues.retention import QueueRetention

if TYPE_CHECKING:
    from jobq.core.store import TaskStore


@dataclass(frozen=True)
class QueueState:
    """One queue: ``counts`` by status value (every status, 0 if none), ``paused``, its
    ``limit`` (None: unlimited), ``fair``: its FairShare (None: captured in plain order)
    and how many of its keys have work (``fair_keys``), ``retain``: seconds its finished
    tasks are kept (math.inf: forever; None: the workers' --retain), and the ids of the
    live ``workers`` serving it."""

    name: str
    counts: dict[str, int]
    paused: bool
    limit: Limit | None
    fair: FairShare | None
    fair_keys: int
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
    fair_queues = store.capability(FairQueues)
    fair = fair_queues.shares()
    fair_keys = fair_queues.waiting_keys() if fair else {}
    retentions = store.capability(QueueRetention).retentions()
    live = [worker for worker in store.live_workers() if worker.alive]
    named = {queue for worker in live for queue in worker.queues or ()}
    names = {queue for queue, _ in counts} | set(limits) | paused | named | set(retentions)
    names |= set(fair)
    return [
        QueueState(
            name=name,
            counts={status.value: counts.get((name, status), 0) for status in Status},
            paused=name in paused,
            limit=limits.get(name),
            fair=fair.get(name),
            fair_keys=fair_keys.get(name, 0),
            retain=retentions.get(name),
            workers=[w.worker_id for w in live if w.queues is None or name in w.queues],
        )
        for name in sorted(names)
    ]
