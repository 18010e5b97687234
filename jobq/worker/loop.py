"""Worker: the capture -> execute -> set_status loop, with heartbeats, rescue and signals.

One thread runs the loop and is the only one that talks to the database. The Runner
(jobq.worker.runner) runs the tasks, sync ones on slot threads and async ones on an event loop;
each run reports its Outcome back through a queue, and the loop records the outcomes in
batches (Store.set_statuses), every one fenced by its attempt.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import queue
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobq.app import App
from jobq.errors import DatabaseUnavailable, JobqError, first_line
from jobq.lifecycle.run_control import RunControl
from jobq.limits import Limiter
from jobq.limits.sql import SQL_LIMITER
from jobq.logs import stopped_summary
from jobq.outage import Outage
from jobq.registry import TaskDefinition
from jobq.tasks import CANCEL_REQUESTED, DEFAULT_LEASE, Completion, Leases, Status, Task
from jobq.upkeep import Upkeep
from jobq.upkeep.retention import DEFAULT_RETAIN
from jobq.validation import check_int, check_key, check_seconds, queue_list
from jobq.worker import executor, signals
from jobq.worker.executor import Outcome
from jobq.worker.observers import RunObserver, RunWatch, outcome_label
from jobq.worker.overruns import Overruns
from jobq.worker.pacing import BurstEnd
from jobq.worker.run_spans import for_worker
from jobq.worker.runner import Run, Runner
from jobq.workflows import in_task as workflow_results

if TYPE_CHECKING:
    from jobq.pool import ProcessPool

log = logging.getLogger("jobq.worker")

Fence = tuple[int, int]

#: Seconds an idle worker's looks may rely on the queues' limits as read before (a busy
#: one: jobq.limits.sql.LIMITS_REFRESH): a listening worker is woken when a limit or a
#: pause changes (Dialect.wake_for_limits) and reads them afresh then; a polling one only
#: learns of it when it reads them, so a resumed limited queue may wait that long.
IDLE_LIMITS_AGE = 30.0
IDLE_LIMITS_AGE_POLLING = 10.0
#: Seconds free slots may wait for the others to free up before a capture anyway.
_CAPTURE_WAIT = 0.01
#: Seconds within which a supervised process takes a repeated SIGTERM for the same stop.
SUPERVISED_SIGNALS_WITHIN = 1.0
#: The least delay before the retry of a run that timed out and was recorded as the
#: worker stopped: its thread ends with the process, a moment after the write.
_STUCK_RETRY_DELAY = 5.0


class Worker:
    """Runs ``app``'s tasks from ``queues`` (None: every queue), ``concurrency`` at a time."""

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
        limiter: Limiter | None = None,
        max_stuck: int | None = None,
        stuck_after: float = 60.0,
        metrics: RunObserver | None = None,
        pool: ProcessPool | None = None,
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
        # Definitions with the timeouts runs were given at enqueue, by (name, timeout).
        self._definitions: dict[tuple[str, float | None], TaskDefinition | None] = {}
        self.grace = grace
        self.poll_interval = poll_interval
        #: While looks find nothing, the wait between them doubles up to this (default:
        #: 4 x poll_interval), so that idle workers cost the database little.
        self.max_poll_interval = max(max_poll_interval or 4 * poll_interval, poll_interval)
        self._idle_polls = 0
        # Seconds idle looks may rely on the limits read before: longer once listening.
        self._idle_limits_age = IDLE_LIMITS_AGE_POLLING
        # Some queue this worker serves is limited (as last read): it never backs off.
        self._serves_limited = False
        # time.monotonic() when a retry or snooze this worker recorded falls due (the
        # earliest not yet looked for).
        self._next_due = math.inf
        self.burst = burst
        #: In burst mode, the worker exits only once no task of its queues falls due
        #: within this many seconds (a retry due a moment later is run first).
        self.burst_wait = burst_wait
        # time.monotonic() of the last look that came back short while runs went on (see
        # _drained), or None.
        self._drained_at: float | None = None
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
            self.store, self.worker_id, rescue_interval, self._failed, self.stats, retain
        )
        self._runs: dict[Fence, Run] = {}
        # Finished runs; None is a nudge from the database's notifications: tasks arrived.
        self._finished: queue.SimpleQueue[tuple[Fence, Outcome] | None] = queue.SimpleQueue()
        self._stop_listening = threading.Event()
        self._unrecorded: list[Completion] = []
        # Some unrecorded end is of a task with a lock key: recording it frees the key.
        self._frees_lock_key = False
        # The last capture recorded ends that freed lock keys but could not see them free.
        self._capture_again = False
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._grace_ends = 0.0
        #: Sync runs execute in these child processes (--pool processes), else on threads.
        self.pool = pool
        #: The `jobq worker --processes N` supervisor that started this process, if any.
        self.supervisor_pid = supervisor_pid
        self._runner = Runner(concurrency, self._finish, pool)
        # Cancel requests of our runs, and their progress reports.
        self._control = RunControl(self.store)
        #: Prometheus metrics (jobq worker --metrics-port), or None: nothing is counted.
        self.metrics = metrics
        if metrics is not None:
            metrics.watch_slots(
                lambda: len(self._runs), lambda: max(self.concurrency - len(self._runs), 0)
            )
        #: The runs' trace spans if the app uses OpenTelemetry (jobq[otel]), else None.
        self.tracing = for_worker()
        # Tells the metrics and the trace spans, where they are on, what the runs do.
        self._watch = RunWatch(metrics, self.tracing)

    # --- lifecycle --------------------------------------------------------------------

    def run(self) -> None:
        """Work until stopped: a signal, stop(), or in burst mode nothing due within
        ``burst_wait`` seconds."""
        self.store.check_schema()
        # SimpleQueue.put is safe in a signal handler: it wakes the loop wherever it waits.
        signals.install(
            self.stop, lambda: self._finished.put(None), self._stopped, self.grace,
            self._give_back,
            same_within=0.0 if self.supervisor_pid is None else SUPERVISED_SIGNALS_WITHIN,
        )  # fmt: skip
        self._sync_schedules()
        self._register()
        log.info(
            "worker %s started: queues %s, concurrency %d%s",
            self.worker_id, ",".join(self.queues) if self.queues else "all", self.concurrency,
            "" if self.pool is None else ", sync tasks in child processes",
        )  # fmt: skip
        workflow_results.serve(self.store)  # jobq.parent_results() in its tasks
        if self.store.listen(self._on_enqueued, self._stop_listening, self.outage):
            self._idle_limits_age = IDLE_LIMITS_AGE
            log.info("woken by the database on enqueue; polling every %gs too", self.poll_interval)
        elif (why := self.store.dialect.why_polling()) is not None:
            log.info("polling every %gs: %s", self.poll_interval, why)
        try:
            self._work()
        finally:
            self._stop_listening.set()
            self._upkeep.resign()
            self._runner.shutdown()
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
        self.store.register_worker(
            self.worker_id, host=socket.gethostname(), pid=os.getpid(), queues=self.queues,
            concurrency=self.concurrency, supervisor_pid=self.supervisor_pid,
        )  # fmt: skip

    def _unregister(self) -> None:
        try:
            self.store.unregister_worker(self.worker_id)
        except JobqError as error:
            log.warning("could not unregister worker %s: %s", self.worker_id, error)

    def _give_back(self) -> None:
        """Exiting at once (a second signal): put the unfinished runs back in the queue as
        the end of the grace does (fenced, no retry spent; a pool's children are killed
        first), with the ends already known, then leave the registry and give the upkeep
        lease up. Called from a thread while the loop, in the main thread, is held in the
        signal handler (jobq.worker.signals.exit_at_once bounds it)."""
        released = len(self._unsettled())
        self._release_unfinished()
        self._unregister()
        self._upkeep.resign()
        log.info("worker %s gave back %d run(s) before exiting at once", self.worker_id, released)

    def _close_limiter(self) -> None:
        self.limiter.close()
        self.stats.update(getattr(self.limiter, "stats", {}))  # slot_expired, ...

    def _sync_schedules(self) -> None:
        """Store the app's cron schedules: new ones, changes, and those no longer defined."""
        report = self.store.sync_schedules(self.app.schedules.values(), queues=self.queues)
        for verb, names in (
            ("created", report.created), ("updated", report.updated),
            ("disabled (no longer defined)", report.removed),
        ):  # fmt: skip
            if names:
                log.info("schedules %s: %s", verb, ", ".join(names))

    def stop(self) -> None:
        """Stop capturing; running tasks get ``grace`` seconds to finish, then are released."""
        if not self._stopping.is_set():
            self._grace_ends = time.monotonic() + self.grace
            self._stopping.set()
            self._finished.put(None)  # wakes the loop wherever it waits
            log.info(
                "worker %s stopping: waiting up to %g s for %d running task(s)",
                self.worker_id, self.grace, len(self._unsettled()),
            )  # fmt: skip

    @property
    def stragglers(self) -> int:
        """Sync task threads still running after their runs were settled (they cannot be killed)."""
        return sum(1 for run in self._runs.values() if not run.finished)

    def _on_enqueued(self, queues: set[str] | None) -> None:
        """From the notification thread: wake the loop if a queue we serve got tasks."""
        if queues is None or self.queues is None or not queues.isdisjoint(self.queues):
            self._finished.put(None)

    # --- the loop ---------------------------------------------------------------------

    def _work(self) -> None:
        next_heartbeat = 0.0
        free_since: float | None = None  # since when slots have been free, unfilled
        while True:
            self._collect(wait=0)
            now = time.monotonic()
            self._expire_timeouts(now)
            if now >= next_heartbeat:
                self._heartbeat()
                next_heartbeat = now + self._heartbeat_interval()
            if self._control.due(now, bool(self._runs)):
                self._control_runs(now)
            self._upkeep.tick(now, busy=bool(self._runs))  # rescue and the rest, if elected
            if self._stopping.is_set():
                self._record()
                if not self._unsettled() and not self._unrecorded:
                    return
                stuck_only = self.exit_code and all(run.timed_out for run in self._unsettled())
                if now >= self._grace_ends or stuck_only:
                    self._release_unfinished()
                    return
                self._collect(wait=0.05)
                continue
            free = self.concurrency - len(self._runs)
            if free == 0:
                free_since = None
            elif free_since is None:
                free_since = now
            # Fewer, fuller round trips: capture once every slot is free, or when free
            # slots have waited 10 ms (a long task must not hold the others back). The
            # wait counts from when slots came free, not from when the last capture
            # began: a capture can take longer than 10 ms on a busy machine, and then
            # the next would leave at once with a few slots, ever more, ever smaller.
            worth_it = (
                free == self.concurrency
                or (free_since is not None and now - free_since >= _CAPTURE_WAIT)
                or self._capture_again
            ) and not self._drained(now)
            # A capture in the statement that records failures cannot see them come back.
            recorded_failures = any(end.status is Status.FAILED for end in self._unrecorded)
            if free > 0 and worth_it:
                if now >= self._next_due:
                    self._next_due = math.inf  # this capture looks for what fell due
                # An idle look may read the queues' limits less often: a plain capture
                # leaves every limited queue out whatever it knows of them.
                self.store.limits_max_age = self._idle_limits_age if self._idle_polls else None
                captured = self._capture(free)  # records finished runs in the same commit
                free_since = None  # slots it left free count from its end
                short = len(captured) < free and not (self._serves_limited or self._capture_again)
                self._drained_at = now if short else None
            else:
                # The capture due within _CAPTURE_WAIT records the ends in its statement,
                # but a limited queue's freed slot must be free at once: held for this
                # worker's own next capture, no other worker would ever get it.
                if free == 0 or self._serves_limited:
                    self._record()
                captured = []
            if captured:
                # The new leases run from now: renew them in time even if the last
                # heartbeat, taken while idle, planned the next one 10 s away.
                shortest = min(self._lease_of(task) for task in captured)
                next_heartbeat = min(next_heartbeat, time.monotonic() + shortest / 3)
            idle = not captured and not self._runs and not self._unrecorded
            done = idle and not recorded_failures and not self._capture_again
            # Empty looks in a row: the wait between them grows (see _idle_wait). Not where
            # a limited queue is served: a look may find nothing because its slots are
            # full, and the slot another worker frees must not wait for a slow look.
            looked = done and free > 0 and worth_it and not self._serves_limited
            self._idle_polls = self._idle_polls + 1 if looked else 0
            if self.burst and done and not self._held_back():
                if self._burst_over():
                    return
                if self._burst_end.confirming:
                    continue  # nothing due within --burst-wait: one more capture confirms it
            if captured and len(captured) == free:
                continue  # every slot filled; more may be waiting
            if self._capture_again:
                # Tasks waiting for the lock keys just freed are capturable now.
                self._capture_again = False
                continue
            wait = self._idle_wait(now) if not self._runs else min(self.poll_interval, 0.05)
            if self._drained(now):
                assert self._drained_at is not None
                wait = min(wait, max(self._drained_at + self.poll_interval - now, 0.001))
            elif free > 0 and not worth_it:
                # Free slots wait for the others only until _CAPTURE_WAIT is up.
                assert free_since is not None
                wait = min(wait, max(_CAPTURE_WAIT - (now - free_since), 0.001))
            self._collect(wait=wait)

    def _drained(self, now: float) -> bool:
        """Whether free slots beside running ones wait to look again: the last look came
        back short less than --poll-interval ago, as an idle worker's would. An enqueue
        heard, a retry falling due or ends to record (a look rides in their write) end it;
        where a limited queue is served it never begins (another worker frees its slots)."""
        return (
            self._drained_at is not None
            and bool(self._runs)
            and now - self._drained_at < self.poll_interval
            and now < self._next_due
            and not self._unrecorded
        )

    def _idle_wait(self, now: float) -> float:
        """Seconds to wait, with nothing running, before the next look for due tasks: from
        --poll-interval, doubling with each empty look up to --max-poll-interval, but no
        later than a retry or snooze this worker recorded falls due. An enqueue the worker
        hears of (Store.listen) ends the wait at once."""
        streak = max(self._idle_polls - 1, 0)
        wait = min(self.poll_interval * 2 ** min(streak, 16), self.max_poll_interval)
        return max(min(wait, self._next_due - now), 0.001)

    def _held_back(self) -> bool:
        """Whether tasks wait in limited queues that are full now (burst mode keeps going)."""
        try:
            return self.store.limited_waiting(self.queues)
        except JobqError as error:
            self._failed("looking at the limited queues", error)
            return True

    def _burst_over(self) -> bool:
        """With nothing due now in burst mode: whether to exit, because no task of our
        queues falls due within ``burst_wait`` s (see jobq.worker.pacing.BurstEnd)."""
        try:
            over = self._burst_end.over()
        except JobqError as error:
            self._failed("looking for tasks due later", error)
            return False
        return over

    def _capture(self, free: int) -> list[Task]:
        """Record the finished runs and capture up to ``free`` tasks, in one transaction
        (in two when a queue served is limited: the limits must see the slots freed)."""
        try:
            limited = self._serves_limited = bool(self.store.limited_queues(self.queues))
        except JobqError as error:
            self._failed("reading the queues' limits", error)
            time.sleep(self.poll_interval)
            return []
        if limited:
            self._record()
        batch, self._unrecorded = self._unrecorded, []
        frees_lock_key, self._frees_lock_key = self._frees_lock_key, False
        try:
            applied, captured = self.store.complete_and_capture(
                batch, free, queues=self.queues, worker_id=self.worker_id,
                lease=self.lease or self.leases, limiter=self.limiter,
            )  # fmt: skip
        except JobqError as error:
            self._failed("capture", error)
            self._unrecorded = batch + self._unrecorded
            self._frees_lock_key |= frees_lock_key
            time.sleep(self.poll_interval)
            return []
        except Exception as error:  # the database refused something: retrying will not mend it
            log.error("capture failed: %s", first_line(error))
            self._unrecorded = batch + self._unrecorded
            self._frees_lock_key |= frees_lock_key
            self._record()  # records each end on its own when the batch is refused
            time.sleep(self.poll_interval)
            return []
        self.outage.reached()
        self._burst_end.wrote(len(batch), captured=len(captured))
        # Capture may share a statement (one snapshot) with the ends it records.
        self._capture_again = frees_lock_key and len(captured) < free
        self._recorded(batch, applied)
        self._start(captured)
        self.stats["captured"] += len(captured)
        return captured

    def _start(self, tasks: list[Task]) -> None:
        """Hand the captured tasks to the runner; fail those this worker does not know."""
        runnable = []
        for task in tasks:
            run = Run.of(task, self._definition(task))
            self._runs[task.fence] = run
            self._watch.started(run)
            if run.definition is None:
                log.error("task %d: %r is not registered in this worker", task.id, task.name)
                self._finish(run, executor.not_registered(task.name))
            elif (failure := executor.undecodable(task)) is not None:
                log.error("task %d %s: %s", task.id, task.name, failure.error)
                self._finish(run, failure)
            else:
                runnable.append(run)
        self._watch.captured(tasks)
        self._runner.start(runnable)

    def _definition(self, task: Task) -> TaskDefinition | None:
        """The registered definition of ``task``, with the timeout the row was given."""
        key = (task.name, task.timeout)
        if key not in self._definitions:
            definition = self.app.registry.get(task.name)
            self._definitions[key] = definition and definition.with_timeout(task.timeout)
        return self._definitions[key]

    def _lease_of(self, task: Task) -> float:
        """The lease seconds ``task`` holds: the worker's --lease, else its own."""
        return self.lease or self.leases.of(task)

    def _finish(self, run: Run, outcome: Outcome) -> None:
        """From any thread: ``run``'s code is done; the loop records ``outcome``."""
        run.finished = True
        run.returned = time.monotonic()
        self._finished.put((run.task.fence, outcome))

    def _collect(self, wait: float) -> None:
        """Take the runs that finished (waiting up to ``wait`` s for the first)."""
        try:
            finished = [
                self._finished.get(timeout=wait) if wait > 0 else self._finished.get_nowait()
            ]
        except queue.Empty:
            return
        while True:
            try:
                finished.append(self._finished.get_nowait())
            except queue.Empty:
                break
        for item in finished:
            if item is None:
                self._idle_polls = 0  # tasks arrived: look again soon, and often
                self._drained_at = None
                continue  # a nudge: the caller's loop captures next
            fence, outcome = item
            run = self._runs.pop(fence, None)
            if CANCEL_REQUESTED:
                CANCEL_REQUESTED.discard(fence)
            if run is None or run.ended:
                continue  # settled already: timed out, released or lost
            run.ended = True
            if run.timed_out and run.definition is not None:
                outcome = executor.timed_out(run.definition, run.task.attempt, killed=run.killed)
            self._end(run, _completion(fence, outcome))
            self.stats["snoozed" if outcome.status is Status.QUEUED else outcome.status.value] += 1
            self._watch.ended(run, outcome_label(run, outcome), outcome, run.seconds())

    def _end(self, run: Run, completion: Completion) -> None:
        """Queue ``completion`` of ``run`` for the next write."""
        if completion.status in (Status.FAILED, Status.QUEUED):
            # Its retry (or the end of its snooze) is due then: look for it in time. A
            # delay the store's backoff decides is unknown here: look again soon.
            delay = self.poll_interval if completion.retry_delay is None else completion.retry_delay
            self._next_due = min(self._next_due, time.monotonic() + delay)
        if run.task.workflow_id is not None:  # its end settles the nodes after it
            completion = dataclasses.replace(completion, in_workflow=True)
        self._unrecorded.append(completion)
        self._watch.queued(run.task)
        if run.task.lock_key is not None:
            self._frees_lock_key = True

    def _record(self) -> None:
        """Write the finished runs' outcomes; kept for the next turn if the database is down."""
        if not self._unrecorded:
            return
        batch, self._unrecorded = self._unrecorded, []
        frees_lock_key, self._frees_lock_key = self._frees_lock_key, False
        try:
            applied = self.store.set_statuses(batch)
        except JobqError as error:
            self._failed(f"recording {len(batch)} outcome(s)", error)
            self._unrecorded = batch + self._unrecorded
            self._frees_lock_key |= frees_lock_key
            time.sleep(min(self.poll_interval, 1.0))
            return
        except Exception as error:
            # set_statuses writes a refused end on its own, then as a plain failure; past
            # that, retrying would refuse it forever. Their leases expire; rescue ends them.
            self.stats["unrecorded"] += len(batch)
            log.error(
                "recording %d outcome(s) failed, left to rescue: %s", len(batch), first_line(error)
            )
            return
        self.outage.reached()
        self._burst_end.wrote(len(batch))
        self._recorded(batch, applied)

    def _recorded(self, batch: list[Completion], applied: int) -> None:
        """``batch`` is written (``applied`` of them were not stale): free the runs' slots."""
        if batch:
            self.limiter.release((end.id, end.attempt) for end in batch)
        stale = len(batch) - applied
        self._watch.recorded(batch, stale)
        if stale:
            self.stats["stale"] += stale
            log.warning("%d outcome(s) were stale: their leases expired and were taken over", stale)

    def _expire_timeouts(self, now: float) -> None:
        """Cancel the runs past their timeouts; stop if too many are stuck (see Overruns)."""
        running = self._unsettled()
        self.stats["timed_out"] += self.overruns.check(
            running, now, self._runner.cancel, kills=self.pool is not None
        )
        if not self._stopping.is_set() and self.overruns.too_many_stuck(running, now):
            self.exit_code = 3
            self.stop()

    def _heartbeat(self) -> None:
        owned = [run.task.fence for run in self._unsettled()]
        try:
            if not self.store.touch_worker(self.worker_id):
                self._register()
            extended = self.store.heartbeat(self.worker_id, owned, self.lease or self.leases)
        except JobqError as error:
            self._failed("heartbeat", error)
            return
        self.outage.reached()
        self.limiter.renew(
            (fence, self._lease_of(self._runs[fence].task))
            for fence in owned
            if fence[0] in extended
        )
        lost = [fence for fence in owned if fence[0] not in extended]
        self.limiter.release(lost)
        for fence in lost:
            run = self._runs[fence]
            run.ended = True
            self._runner.cancel(run)
            self.stats["lost"] += 1
            self._watch.ended(run, "lost")
            log.warning(
                "task %d attempt %d: lease lost (expired and taken over); its outcome "
                "will be dropped", fence[0], fence[1],
            )  # fmt: skip

    def _control_runs(self, now: float) -> None:
        """Stop the runs whose cancel was asked for; write the runs' progress reports."""
        try:
            requested = self._control.tick(now, [run.task.fence for run in self._unsettled()])
        except JobqError as error:
            self._failed("looking for cancel requests", error)
            return
        for fence in requested - CANCEL_REQUESTED:
            # A sync run sees it through current_task().cancel_requested; an async one is
            # cancelled. Either way its end is recorded cancelled unless it finished.
            CANCEL_REQUESTED.add(fence)
            log.info("task %d attempt %d: cancel requested; stopping it", *fence)
            self._runner.cancel(self._runs[fence])

    def _failed(self, what: str, error: JobqError) -> None:
        """Log that ``what`` failed and will be tried again: once per outage when the
        database could not be reached (see Outage), every time for anything else."""
        if isinstance(error, DatabaseUnavailable):
            self.outage.lost(what, error)
        else:
            log.error("%s failed, will retry: %s", what, error)

    def _release_unfinished(self) -> None:
        """Grace is over: put unfinished runs back in the queue without spending a retry;
        those past their timeouts are recorded as timed out (their threads end with us)."""
        for run in self._unsettled():
            run.ended = True
            self._runner.cancel(run)
            if run.timed_out and run.definition is not None:
                outcome = executor.timed_out(run.definition, run.task.attempt)
                delay = max(outcome.retry_delay or 0.0, _STUCK_RETRY_DELAY)
                self._end(run, _completion(run.task.fence, outcome, retry_delay=delay))
                self._watch.ended(run, "timed_out")
                continue
            self._end(run, Completion(run.task.id, run.task.attempt, Status.QUEUED))
            self.stats["released"] += 1
            self._watch.ended(run, "released")
        self._record()

    # --- helpers ----------------------------------------------------------------------

    def _unsettled(self) -> list[Run]:
        return [run for run in self._runs.values() if not run.ended]

    def _heartbeat_interval(self) -> float:
        return min([10.0, *(self._lease_of(run.task) / 3 for run in self._unsettled())])


def _completion(fence: Fence, outcome: Outcome, retry_delay: float | None = None) -> Completion:
    return Completion(
        fence[0], fence[1], outcome.status, result=outcome.result, error=outcome.error,
        retry_delay=outcome.retry_delay if retry_delay is None else retry_delay,
        terminal=outcome.terminal,
    )  # fmt: skip
