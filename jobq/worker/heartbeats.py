"""A worker's heartbeat and its runs' control: leases renewed, lost ones given up, cancels.

Every heartbeat touches the worker's registry row and extends the leases of its runs, in
the database and in its limiter; a run whose lease was taken over is lost: its outcome will
be dropped. Between heartbeats, the cancel requests of the runs are looked for (and their
progress reports written) by RunControl, and the runs asked to stop are stopped.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from jobq.db.errors import JobqError
from jobq.db.tasks import CANCEL_REQUESTED, Leases, Task
from jobq.lifecycle.run_control import RunControl

if TYPE_CHECKING:
    from jobq.app.store import Store
    from jobq.db.outage import Outage
    from jobq.limits import Limiter
    from jobq.worker.observers import RunWatch
    from jobq.worker.pacing import Failed
    from jobq.worker.runs import Runs

log = logging.getLogger("jobq.worker")


class Heartbeats:
    """Keeps the worker ``worker_id`` and its ``runs`` alive in ``store``, their leases
    ``lease`` seconds if given, else each row's own (``leases``)."""

    def __init__(
        self,
        store: Store,
        worker_id: str,
        runs: Runs,
        lease: float | None,
        leases: Leases,
        limiter: Limiter,
        stats: Counter[str],
        outage: Outage,
        watch: RunWatch,
        failed: Failed,
        register: Callable[[], None],
    ) -> None:
        self.store = store
        self.worker_id = worker_id
        self.runs = runs
        self.lease = lease
        self.leases = leases
        self.limiter = limiter
        self.stats = stats
        self.outage = outage
        self.watch = watch
        self.failed = failed
        # Registers the worker again, should its registry row be gone.
        self.register = register
        # Cancel requests of our runs, and their progress reports.
        self.control = RunControl(store)

    def lease_of(self, task: Task) -> float:
        """The lease seconds ``task`` holds: the worker's --lease, else its own."""
        return self.lease or self.leases.of(task)

    def interval(self) -> float:
        """Seconds until the next heartbeat: 10, or a third of the shortest lease held."""
        return min([10.0, *(self.lease_of(run.task) / 3 for run in self.runs.unsettled())])

    def beat(self) -> None:
        """Touch the registry row and extend the runs' leases; give up the runs whose
        leases were taken over (lost)."""
        owned = [run.task.fence for run in self.runs.unsettled()]
        try:
            if not self.store.touch_worker(self.worker_id):
                self.register()
            extended = self.store.heartbeat(self.worker_id, owned, self.lease or self.leases)
        except JobqError as error:
            self.failed("heartbeat", error)
            return
        self.outage.reached()
        self.limiter.renew(
            (fence, self.lease_of(self.runs[fence].task)) for fence in owned if fence[0] in extended
        )
        lost = [fence for fence in owned if fence[0] not in extended]
        self.limiter.release(lost)
        for fence in lost:
            run = self.runs[fence]
            run.ended = True
            self.runs.runner.cancel(run)
            self.stats["lost"] += 1
            self.watch.ended(run, "lost")
            log.warning(
                "task %d attempt %d: lease lost (expired and taken over); its outcome "
                "will be dropped", fence[0], fence[1],
            )  # fmt: skip

    def control_due(self, now: float) -> bool:
        """Whether to look for cancel requests now (see control_runs)."""
        return self.control.due(now, bool(self.runs))

    def control_runs(self, now: float) -> None:
        """Stop the runs whose cancel was asked for; write the runs' progress reports."""
        try:
            requested = self.control.tick(now, [run.task.fence for run in self.runs.unsettled()])
        except JobqError as error:
            self.failed("looking for cancel requests", error)
            return
        for fence in requested - CANCEL_REQUESTED:
            # A sync run sees it through current_task().cancel_requested; an async one is
            # cancelled. Either way its end is recorded cancelled unless it finished.
            CANCEL_REQUESTED.add(fence)
            log.info("task %d attempt %d: cancel requested; stopping it", *fence)
            self.runs.runner.cancel(self.runs[fence])
