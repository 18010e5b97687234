"""Worker: the capture -> execute -> set_status loop, with heartbeats, rescue and signals.

One thread runs the loop and is the only one that talks to the database. The Runner
(jobq.worker.runner) runs the tasks, sync ones on slot threads and async ones on an event
loop; each run reports its Outcome back through a queue (Runs), and the loop records the
outcomes in batches (Ends, Store.set_statuses), every one fenced by its attempt. When to
look again is Pacing's; heartbeats and cancel requests are Heartbeats'.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobq.app import App
from jobq.db.errors import DatabaseUnavailable, JobqError, first_line
from jobq.db.outage import Outage
from jobq.db.tasks import DEFAULT_LEASE, Leases, Status, Task
from jobq.db.validation import check_int, check_key, check_seconds, queue_list
from jobq.limits import Limiter
from jobq.limits.sql import SQL_LIMITER
from jobq.upkeep import Upkeep
from jobq.upkeep.retention import DEFAULT_RETAIN
from jobq.worker import presence, signals
from jobq.worker.ends import Ends
from jobq.worker.heartbeats import Heartbeats
from jobq.worker.logs import stopped_summary
from jobq.worker.observers import RunObserver, RunWatch
from jobq.worker.overruns import Overruns
from jobq.worker.pacing import (
    CAPTURE_WAIT,
    IDLE_LIMITS_AGE,
    BurstEnd,
    Pacing,
    burst_over,
    held_back,
)
from jobq.worker.run_spans import for_worker
from jobq.worker.runs import Runs
from jobq.workflows import in_task as workflow_results

if TYPE_CHECKING:
    from jobq.worker.runner import Pool

log = logging.getLogger("jobq.worker")

#: Seconds within which a supervised process takes a repeated SIGTERM for the same stop.
SUPERVISED_SIGNALS_WITHIN = 1.0


class Worker:
    """Runs ``app``'s tasks from ``queues`` (None: every queue), ``concurrency`` at a time.

    What `jobq worker` runs, for a worker inside your own process. The main options, as
    `jobq worker`'s of the same names: ``lease`` (seconds a capture is held without a
    heartbeat; default: each task's own), ``grace`` (seconds running tasks get to finish
    after a stop), ``poll_interval`` and ``max_poll_interval`` (how often an idle worker
    looks), ``burst`` (exit once nothing is due within ``burst_wait`` seconds),
    ``retain`` (seconds finished tasks are kept), ``vacuum`` (vacuum the tasks table when
    its dead rows pile up, jobq.upkeep.vacuum), ``max_stuck`` and ``stuck_after`` (exit
    with status 3 once so many runs are stuck past their timeout by that long).

    Example:
        ```python
        import jobq
        from jobq.worker import Worker

        app = jobq.App()
        app.migrate()


        @app.task
        def double(n: int) -> int:
            return 2 * n


        handle = double.enqueue(n=21)
        Worker(app, concurrency=4, burst=True, burst_wait=0).run()
        assert handle.result() == 42
        ```
    """

    def __init__(
        self,
        app: App,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int = 8,
        lease: float | None = None,
        grace: float = 30.0,
        poll_interval: float = 0.5,
        max_poll_interval: float | None = None,
        burst: bool = False,
        burst_wait: float = 5.0,
        worker_id: str | None = None,
        rescue_interval: float = 5.0,
        retain: float = DEFAULT_RETAIN,
        vacuum: bool = True,
        limiter: Limiter | None = None,
        max_stuck: int | None = None,
        stuck_after: float = 60.0,
        metrics: RunObserver | None = None,
        pool: Pool | None = None,
        supervisor_pid: int | None = None,
    ) -> None:
        check_int("concurrency", concurrency, minimum=1)
        check_seconds("grace", grace)
        check_seconds("poll_interval", poll_interval, positive=True)
        if max_poll_interval is not None:
            check_seconds("max_poll_interval", max_poll_interval, positive=True)
        check_seconds("rescue_interval", rescue_interval, positive=True)
        if retain != math.inf:  # math.inf: finished tasks kept forever
            check_seconds("retain", retain, positive=True)
        check_seconds("burst_wait", burst_wait)
        if lease is not None:
            check_seconds("lease", lease, positive=True)
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        check_key("worker_id", self.worker_id, required=True)
        self.app = app
        self.store = app.store
        self.queues = queue_list(queues)
        self.concurrency = concurrency
        self.lease = lease
        #: The lease of each captured row: ``lease`` for all if given, else the row's own,
        #: else its task's definition's.
        self.leases = Leases(
            tuple((d.name, d.lease) for d in app.registry if d.lease != DEFAULT_LEASE)
        )
        self.grace = grace
        # When to look again: idle backoff, drained waits (see Pacing).
        self._pacing = Pacing(poll_interval, max_poll_interval)
        self.poll_interval = poll_interval
        #: While looks find nothing, the wait between them doubles up to this.
        self.max_poll_interval = self._pacing.max_poll_interval
        self.burst = burst
        #: In burst mode, the worker exits only once no task of its queues falls due
        #: within this many seconds (a retry due a moment later is run first).
        self.burst_wait = burst_wait
        self.rescue_interval = rescue_interval
        #: Runs past their timeouts; the worker stops (exit_code 3) once ``max_stuck`` are
        #: ``stuck_after`` seconds past them.
        self.overruns = Overruns(concurrency, max_stuck, stuck_after)
        #: 0, or 3 when the worker stopped because runs were stuck (a supervisor should
        #: start a new process: their threads cannot be stopped otherwise).
        self.exit_code = 0
        #: Enforces the queues' limits: the database itself unless given another.
        self.limiter: Limiter = limiter or SQL_LIMITER
        #: Whether the database is unreachable; logs an outage's start and end, once each.
        self.outage = Outage()
        self._burst_end = BurstEnd(self.store, self.queues, burst_wait, self.outage.reached)
        #: Counts of what happened: done, failed, released, stale, lost, timed_out, ...
        self.stats: Counter[str] = Counter()
        #: Rescue, workflow sweeps and purges, every ``rescue_interval`` s, done by the one
        #: worker of the database that holds the upkeep lease.
        self._upkeep = Upkeep(
            self.store, self.worker_id, rescue_interval, self._failed, self.stats, retain, vacuum
        )
        self._stop_listening = threading.Event()
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._grace_ends = 0.0
        #: Sync runs execute in these child processes (--pool processes), else on threads.
        self.pool = pool
        #: The `jobq worker --processes N` supervisor that started this process, if any.
        self.supervisor_pid = supervisor_pid
        #: Prometheus metrics (jobq worker --metrics-port), or None: nothing is counted.
        self.metrics = metrics
        #: The runs' trace spans if the app uses OpenTelemetry (jobq[otel]), else None.
        self.tracing = for_worker()
        # Tells the metrics and the trace spans, where they are on, what the runs do.
        watch = RunWatch(metrics, self.tracing)
        # The ends not yet recorded, and their writes.
        self._ends = Ends(
            self.store, self.limiter, self.stats, self.outage, self._burst_end, watch,
            self._pacing, self._failed,
        )  # fmt: skip
        # The runs in flight, and where they run.
        self._runs = Runs(
            app.registry, concurrency, pool, self._ends, self._pacing, watch, self.stats
        )
        # The heartbeat, the runs' leases, and their cancel requests.
        self._heartbeats = Heartbeats(
            self.store, self.worker_id, self._runs, lease, self.leases, self.limiter,
            self.stats, self.outage, watch, self._failed, self._register,
        )  # fmt: skip
        if metrics is not None:
            metrics.watch_slots(
                lambda: min(len(self._runs), self.concurrency),
                lambda: max(self.concurrency - len(self._runs), 0),
            )

    # --- lifecycle --------------------------------------------------------------------

    def run(self) -> None:
        """Work until stopped: a signal, stop(), or in burst mode nothing due within
        ``burst_wait`` seconds."""
        self.store.check_schema()
        # SimpleQueue.put is safe in a signal handler: it wakes the loop wherever it waits.
        signals.install(
            self.stop, lambda: self._runs.finished.put(None), self._stopped, self.grace,
            self._give_back,
            same_within=0.0 if self.supervisor_pid is None else SUPERVISED_SIGNALS_WITHIN,
        )  # fmt: skip
        presence.sync_schedules(self.store, self.app.schedules.values(), self.queues)
        self._register()
        log.info(
            "worker %s started: queues %s, concurrency %d%s",
            self.worker_id, ",".join(self.queues) if self.queues else "all", self.concurrency,
            "" if self.pool is None else ", sync tasks in child processes",
        )  # fmt: skip
        workflow_results.serve(self.store)  # jobq.parent_results() in its tasks
        if self.store.listen(self._on_enqueued, self._stop_listening, self.outage):
            self._pacing.idle_limits_age = IDLE_LIMITS_AGE
            log.info("woken by the database on enqueue; polling every %gs too", self.poll_interval)
        elif (why := self.store.dialect.why_polling()) is not None:
            log.info("polling every %gs: %s", self.poll_interval, why)
        try:
            self._work()
        finally:
            self._stop_listening.set()
            self._upkeep.resign()
            self._runs.runner.shutdown()
            if self.pool is not None:
                self.stats.update(self.pool.stats)  # children_died, children_recycled, ...
            self._close_limiter()
            self._unregister()
            log.info(
                "worker %s stopped: %s", self.worker_id, stopped_summary(self.stats),
                extra={"worker_id": self.worker_id, "counts": +self.stats},  # + drops zeros
            )  # fmt: skip
            self._stopped.set()

    def _register(self) -> None:
        presence.register(
            self.store, self.worker_id, self.queues, self.concurrency, self.supervisor_pid
        )

    def _unregister(self) -> None:
        presence.unregister(self.store, self.worker_id)

    def _give_back(self) -> None:
        """Exiting at once (a second signal): put the unfinished runs back in the queue as
        the end of the grace does (fenced, no retry spent; a pool's children are killed
        first), with the ends already known, then leave the registry and give the upkeep
        lease up. Called from a thread while the loop, in the main thread, is held in the
        signal handler (jobq.worker.signals.exit_at_once bounds it)."""
        released = len(self._runs.unsettled())
        self._runs.release_unfinished()
        self._unregister()
        self._upkeep.resign()
        log.info("worker %s gave back %d run(s) before exiting at once", self.worker_id, released)

    def _close_limiter(self) -> None:
        self.limiter.close()
        self.stats.update(getattr(self.limiter, "stats", {}))  # slot_expired, ...

    def stop(self) -> None:
        """Stop capturing; running tasks get ``grace`` seconds to finish, then are released."""
        if not self._stopping.is_set():
            self._grace_ends = time.monotonic() + self.grace
            self._stopping.set()
            self._runs.finished.put(None)  # wakes the loop wherever it waits
            log.info(
                "worker %s stopping: waiting up to %g s for %d running task(s)",
                self.worker_id, self.grace, len(self._runs.unsettled()),
            )  # fmt: skip

    @property
    def stragglers(self) -> int:
        """Sync task threads still running after their runs were settled (they cannot be killed)."""
        return self._runs.stragglers()

    def _on_enqueued(self, queues: set[str] | None) -> None:
        """From the notification thread: wake the loop if a queue we serve got tasks."""
        if queues is None or self.queues is None or not queues.isdisjoint(self.queues):
            self._runs.finished.put(None)

    # --- the loop ---------------------------------------------------------------------

    def _work(self) -> None:
        """Capture, start, collect and record until stopped (see run())."""
        runs, ends, pacing, heartbeats = self._runs, self._ends, self._pacing, self._heartbeats
        next_heartbeat = 0.0
        free_since: float | None = None  # since when slots have been free, unfilled
        while True:
            runs.collect(wait=0)
            now = time.monotonic()
            self._expire_timeouts(now)
            if now >= next_heartbeat:
                heartbeats.beat()
                next_heartbeat = now + heartbeats.interval()
            if heartbeats.control_due(now):
                heartbeats.control_runs(now)
            self._upkeep.tick(now, busy=bool(runs))  # rescue and the rest, if elected
            if self._stopping.is_set():
                ends.record()
                if not runs.unsettled() and not ends.unrecorded:
                    return
                stuck_only = self.exit_code and all(run.timed_out for run in runs.unsettled())
                if now >= self._grace_ends or stuck_only:
                    runs.release_unfinished()
                    return
                runs.collect(wait=0.05)
                continue
            # Short runs: capture a few ahead, to wait in line for a slot (jobq.worker.ahead).
            ahead = 0 if pacing.serves_limited else runs.ahead.extra(now)
            free = max(self.concurrency + ahead - len(runs), 0)
            if free == 0:
                free_since = None
            elif free_since is None:
                free_since = now
            # Fewer, fuller round trips: capture once every slot is free (or, capturing
            # ahead, once the line is half empty), or when free slots have waited 10 ms (a long
            # task must not hold the others back). The wait counts from when slots came
            # free, not from when the last capture began: a capture can take longer than
            # 10 ms on a busy machine, and then the next would leave at once with a few
            # slots, ever more, ever smaller.
            worth_it = (
                not runs
                or (ahead > 0 and free >= max(ahead // 2, 1))
                or (free_since is not None and now - free_since >= CAPTURE_WAIT)
                or ends.capture_again
            ) and not self._drained(now)
            # A capture in the statement that records failures cannot see them come back.
            recorded_failures = any(end.status is Status.FAILED for end in ends.unrecorded)
            if free > 0 and worth_it:
                if now >= pacing.next_due:
                    pacing.next_due = math.inf  # this capture looks for what fell due
                # An idle look may read the queues' limits less often: a plain capture
                # leaves every limited queue out whatever it knows of them.
                limits = self.store.queue_limits
                limits.limits_max_age = pacing.idle_limits_age if pacing.idle_polls else None
                captured = self._capture(free)  # records finished runs in the same commit
                free_since = None  # slots it left free count from its end
                short = len(captured) < free and not (pacing.serves_limited or ends.capture_again)
                pacing.drained_at = now if short else None
            else:
                # The capture due within CAPTURE_WAIT records the ends in its statement,
                # but a limited queue's freed slot must be free at once: held for this
                # worker's own next capture, no other worker would ever get it.
                if free == 0 or pacing.serves_limited:
                    ends.record()
                captured = []
            if captured:
                # The new leases run from now: renew them in time even if the last
                # heartbeat, taken while idle, planned the next one 10 s away.
                shortest = min(heartbeats.lease_of(task) for task in captured)
                next_heartbeat = min(next_heartbeat, time.monotonic() + shortest / 3)
            idle = not captured and not runs and not ends.unrecorded
            done = idle and not recorded_failures and not ends.capture_again
            # Empty looks in a row: the wait between them grows (see Pacing.idle_wait). Not
            # where a limited queue is served: a look may find nothing because its slots
            # are full, and the slot another worker frees must not wait for a slow look.
            looked = done and free > 0 and worth_it and not pacing.serves_limited
            pacing.idle_polls = pacing.idle_polls + 1 if looked else 0
            if self.burst and done and not held_back(self.store, self.queues, self._failed):
                if burst_over(self._burst_end, self._failed):
                    return
                if self._burst_end.confirming:
                    continue  # nothing due within --burst-wait: one more capture confirms it
            if captured and len(captured) == free:
                continue  # every slot filled; more may be waiting
            if ends.capture_again:
                # Tasks waiting for the lock keys just freed are capturable now.
                ends.capture_again = False
                continue
            wait = pacing.idle_wait(now) if not runs else min(pacing.poll_interval, 0.05)
            if self._drained(now):
                assert pacing.drained_at is not None
                wait = min(wait, max(pacing.drained_at + pacing.poll_interval - now, 0.001))
            elif free > 0 and not worth_it:
                # Free slots wait for the others only until CAPTURE_WAIT is up.
                assert free_since is not None
                wait = min(wait, max(CAPTURE_WAIT - (now - free_since), 0.001))
            runs.collect(wait=wait)

    def _drained(self, now: float) -> bool:
        """Whether free slots beside running ones wait to look again (see Pacing.drained)."""
        return self._pacing.drained(now, bool(self._runs), bool(self._ends.unrecorded))

    def _capture(self, free: int) -> list[Task]:
        """Record the finished runs and capture up to ``free`` tasks, in one transaction
        (in two when a queue served is limited: the limits must see the slots freed)."""
        try:
            limited = self._pacing.serves_limited = bool(self.store.limited_queues(self.queues))
        except JobqError as error:
            self._failed("reading the queues' limits", error)
            time.sleep(self._pacing.poll_interval)
            return []
        if limited:
            self._ends.record()
        batch, frees_lock_key = self._ends.take()
        try:
            applied, captured = self.store.complete_and_capture(
                batch, free, queues=self.queues, worker_id=self.worker_id,
                lease=self.lease or self.leases, limiter=self.limiter,
            )  # fmt: skip
        except JobqError as error:
            self._failed("capture", error)
            self._ends.put_back(batch, frees_lock_key)
            time.sleep(self._pacing.poll_interval)
            return []
        except Exception as error:  # the database refused something: retrying will not mend it
            log.error("capture failed: %s", first_line(error))
            self._ends.put_back(batch, frees_lock_key)
            self._ends.record()  # records each end on its own when the batch is refused
            time.sleep(self._pacing.poll_interval)
            return []
        self.outage.reached()
        self._burst_end.wrote(len(batch), captured=len(captured))
        # Capture may share a statement (one snapshot) with the ends it records.
        self._ends.capture_again = frees_lock_key and len(captured) < free
        self._ends.recorded(batch, applied)
        self._runs.start(captured)
        self.stats["captured"] += len(captured)
        return captured

    def _expire_timeouts(self, now: float) -> None:
        """Cancel the runs past their timeouts; stop if too many are stuck (see Overruns).
        Give back the runs captured ahead that waited in line too long."""
        self._runs.give_back_waiting(now)
        running = self._runs.unsettled()
        self.stats["timed_out"] += self.overruns.check(
            running, now, self._runs.runner.cancel, kills=self.pool is not None
        )
        if not self._stopping.is_set() and self.overruns.too_many_stuck(running, now):
            self.exit_code = 3
            self.stop()

    def _failed(self, what: str, error: JobqError) -> None:
        """Log that ``what`` failed and will be tried again: once per outage when the
        database could not be reached (see Outage), every time for anything else."""
        if isinstance(error, DatabaseUnavailable):
            self.outage.lost(what, error)
        else:
            log.error("%s failed, will retry: %s", what, error)
