"""jobq's state machine (DESIGN.md) as a property, on every database.

Hypothesis interleaves enqueue, capture, set_status, heartbeat and rescue from several
simulated workers, with time passing (a lease expiring, a run_at falling due) and a cron
row among the tasks, and checks every step against a small reference model of the state
machine written here. Each worker keeps every (id, attempt) fence it was ever given, so
stale fences come back often: they must never change a row.

Time never passes by itself during an example: leases and delays are long, and a cron
row's next tick is months away. Only the rules that write a moment long past into a row
(on the database, whose clock jobq compares with) move time, so the model knows exactly
which rows are due and whose leases have expired.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import jobq
from jobq import Cron, Schedule, Status
from jobq.dialects.schema import schedules, tasks
from tests.helpers import all_rows

c = tasks.c

#: Before every database's clock, whatever its time zone or skew: an ended lease, a
#: run_at that fell due.
PAST = datetime(2000, 1, 1, tzinfo=UTC)
#: Seconds no example lasts: a lease or a delay this long ends only when a rule says so.
LONG = 3600.0
#: Midnight on 1 January: a cron row's next tick never comes during a test.
YEARLY = "0 0 1 1 *"
WORKERS = ("w1", "w2", "w3")
QUEUES = ("a", "b")
CRON_QUEUE = "a"

#: Bounded for CI: a few seconds on SQLite, about ten on each server. No example database
#: (nothing is written to .hypothesis/), and no deadline (a step is a few round trips to a
#: server, whose latency varies).
SETTINGS = settings(
    max_examples=50,
    stateful_step_count=50,
    deadline=None,
    database=None,
    derandomize=False,
    # Explaining a failure reruns it many times over, a slow thing with a database.
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@dataclass
class Row:
    """What one task row holds, as far as the state machine goes.

    The model keeps one per task and updates it as DESIGN.md says each step should; the
    database's rows are read into the same shape to be compared with it.
    """

    queue: str
    recurring: bool
    status: Status
    retries_left: int
    attempt: int = 0
    #: locked_by: the worker of the run in progress, else None.
    owner: str | None = None
    #: run_at <= the database's now.
    due: bool = True
    #: locked_until < the database's now; None when there is no lease (not in progress).
    lease_expired: bool | None = None
    #: finished_at is set.
    finished: bool = False

    @property
    def capturable(self) -> bool:
        """DESIGN.md's capturable rows (an expired recurring run is rescue's, not capture's)."""
        if not self.due:
            return False
        if self.status is Status.QUEUED:
            return True
        if self.status is Status.FAILED:
            return self.retries_left > 0
        if self.status is Status.IN_PROGRESS:
            return bool(self.lease_expired) and self.retries_left > 0 and not self.recurring
        return self.status is Status.DONE and self.recurring

    def capture(self, worker: str) -> None:
        """A capture: a new attempt for ``worker``; a failed or crashed attempt spends a retry."""
        if self.status in (Status.FAILED, Status.IN_PROGRESS):
            assert self.retries_left > 0, "the model captured a row with no retry left"
            self.retries_left -= 1
        self.status = Status.IN_PROGRESS
        self.attempt += 1
        self.owner = worker
        self.lease_expired = False
        self.finished = False

    def end(self, status: Status, retry_delay: float, cron_retries: int) -> None:
        """The end of the run in progress (set_status, or rescue as failed with no delay).

        A failure with retries left comes back after ``retry_delay``; without, it is
        terminal. A cron row instead returns to done at its next tick, its retries renewed
        to the schedule's ``cron_retries``, unless it failed with retries left.
        """
        self.owner = None
        self.lease_expired = None
        retrying = status is Status.FAILED and self.retries_left > 0
        if retrying:
            self.status = Status.FAILED
            self.due = retry_delay == 0
            self.finished = False
        elif self.recurring:
            self.status = Status.DONE
            self.due = False
            self.retries_left = cron_retries
            self.finished = True
        else:
            # run_at stays as it was when captured: due.
            self.status = status
            self.finished = True


def clear(store: jobq.Store) -> None:
    """Delete every task and schedule: a fresh start per example, cheaper than migrating."""
    with store.engine.begin() as conn:
        conn.execute(sa.delete(schedules))
        conn.execute(sa.delete(tasks))


def set_moment(store: jobq.Store, task_id: int, column: str, moment: datetime) -> None:
    """Write ``moment`` into one time column of one row, as a bound parameter."""
    with store.engine.begin() as conn:
        conn.execute(sa.update(tasks).where(c.id == task_id).values({column: moment}))


class StateMachine(RuleBasedStateMachine):
    """Workers acting on one Store in random order, checked against the model each step."""

    #: Set by machine_for: the Store of the database under test.
    store: jobq.Store

    def __init__(self) -> None:
        super().__init__()
        clear(self.store)
        self.model: dict[int, Row] = {}
        #: Every fence each worker was given, stale ones included.
        self.fences: dict[str, list[tuple[int, int]]] = {worker: [] for worker in WORKERS}
        #: The fences each worker has not ended yet: the runs it believes it holds (a
        #: zombie's may have been captured again since).
        self.held: dict[str, list[tuple[int, int]]] = {worker: [] for worker in WORKERS}
        #: The worker each fence was given to: a fence is given once.
        self.given_to: dict[tuple[int, int], str] = {}
        self.cron_id: int | None = None
        self.cron_retries = 0

    # --- rules ------------------------------------------------------------------------

    @initialize(retries=st.integers(0, 2))
    def register_cron_row(self, retries: int) -> None:
        """A schedule's row starts done, due at its next tick."""
        cron = Schedule(
            name="tick", cron=Cron(YEARLY), task="tick", queue=CRON_QUEUE, retries=retries,
            lease=LONG,
        )  # fmt: skip
        self.store.sync_schedules([cron])
        (state,) = self.store.schedules()
        self.cron_id, self.cron_retries = state.task_id, retries
        self.model[state.task_id] = Row(
            queue=CRON_QUEUE, recurring=True, status=Status.DONE, retries_left=retries, due=False
        )

    @rule(
        queue=st.sampled_from(QUEUES),
        retries=st.integers(0, 3),
        when=st.sampled_from(["now", "delay 0", "later"]),
    )
    def enqueue(self, queue: str, retries: int, when: str) -> None:
        options: dict[str, Any] = {"now": {}, "delay 0": {"delay": 0}, "later": {"delay": LONG}}
        task_id = self.store.enqueue(
            "job", {}, queue=queue, retries=retries, lease=LONG, **options[when]
        )
        assert task_id not in self.model
        self.model[task_id] = Row(
            queue=queue, recurring=False, status=Status.QUEUED, retries_left=retries,
            due=when != "later",
        )  # fmt: skip

    @rule(
        worker=st.sampled_from(WORKERS),
        limit=st.integers(1, 3),
        queues=st.sampled_from([None, "a", "b", ("a", "b")]),
        lease=st.sampled_from([None, 600.0]),
    )
    def capture(
        self, worker: str, limit: int, queues: str | tuple[str, ...] | None, lease: float | None
    ) -> None:
        names = None if queues is None else [queues] if isinstance(queues, str) else list(queues)
        candidates = [
            task_id
            for task_id, row in self.model.items()
            if row.capturable and (names is None or row.queue in names)
        ]
        expected = self._in_capture_order(candidates)[:limit]
        captured = self.store.capture(limit, queues=names, worker_id=worker, lease=lease)
        assert sorted(task.id for task in captured) == sorted(expected)
        for task in captured:
            row = self.model[task.id]
            assert task.fence not in self.given_to, f"fence {task.fence} given twice"
            assert (task.status, task.attempt, task.locked_by) == (
                Status.IN_PROGRESS, row.attempt + 1, worker,
            )  # fmt: skip
            row.capture(worker)
            self.given_to[task.fence] = worker
            self.fences[worker].append(task.fence)
            self.held[worker].append(task.fence)

    @precondition(lambda self: any(self.fences.values()))
    @rule(
        data=st.data(),
        status=st.sampled_from([Status.DONE, Status.FAILED]),
        retry_delay=st.sampled_from([0.0, LONG]),
    )
    def set_status(self, data: st.DataObject, status: Status, retry_delay: float) -> None:
        """A worker ends a run it holds, or replays an end of any run it was given."""
        worker = data.draw(st.sampled_from([w for w in WORKERS if self.fences[w]]), "worker")
        # Mostly the runs it holds, or stale runs would make up nearly every end.
        held = self.held[worker]
        replay = not held or data.draw(st.booleans(), "replay")
        fence = data.draw(st.sampled_from(self.fences[worker] if replay else held), "fence")
        if fence in held:
            held.remove(fence)
        task_id, attempt = fence
        row = self.model[task_id]
        live = row.status is Status.IN_PROGRESS and row.attempt == attempt
        before = all_rows(self.store)
        if status is Status.FAILED:
            applied = self.store.set_status(
                task_id, attempt, status, error="boom", retry_delay=retry_delay
            )
        else:
            applied = self.store.set_status(task_id, attempt, status, result={"ok": True})
        assert applied == live, f"set_status({task_id}, {attempt}) of {row}"
        if live:
            row.end(status, retry_delay, self.cron_retries)
        else:
            assert all_rows(self.store) == before, "a stale set_status changed the table"

    @rule(
        worker=st.sampled_from(WORKERS),
        holder=st.sampled_from(WORKERS),
        lease=st.sampled_from([None, 600.0]),
    )
    def heartbeat(self, worker: str, holder: str, lease: float | None) -> None:
        """``worker`` renews the fences ``holder`` was given (another worker's, at times)."""
        owned = self.fences[holder]
        expected = {
            task_id
            for task_id, attempt in owned
            if (row := self.model[task_id]).status is Status.IN_PROGRESS
            and row.attempt == attempt
            and row.owner == worker
        }
        before = all_rows(self.store)
        extended = self.store.heartbeat(worker, owned, lease=lease)
        assert extended == expected
        # Only the leases of the runs it extended moved; nothing else in the table did.
        after = all_rows(self.store)
        for row_before, row_after in zip(before, after, strict=True):
            if row_before["id"] in extended:
                row_before, row_after = dict(row_before), dict(row_after)
                del row_before["locked_until"], row_after["locked_until"]
            assert row_before == row_after
        for task_id in extended:
            self.model[task_id].lease_expired = False

    @rule()
    def rescue(self) -> None:
        lost = [
            task_id
            for task_id, row in self.model.items()
            if row.status is Status.IN_PROGRESS and row.lease_expired
        ]
        assert self.store.rescue() == len(lost)
        for task_id in lost:
            self.model[task_id].end(Status.FAILED, 0.0, self.cron_retries)

    @precondition(lambda self: any(r.status is Status.IN_PROGRESS for r in self.model.values()))
    @rule(data=st.data())
    def expire_lease(self, data: st.DataObject) -> None:
        """Time passes for one run: its worker stopped renewing its lease long ago."""
        running = sorted(i for i, r in self.model.items() if r.status is Status.IN_PROGRESS)
        task_id = data.draw(st.sampled_from(running), "running task")
        set_moment(self.store, task_id, "locked_until", PAST)
        self.model[task_id].lease_expired = True

    @precondition(lambda self: any(not r.due for r in self.model.values()))
    @rule(data=st.data())
    def fall_due(self, data: st.DataObject) -> None:
        """Time passes for one waiting row: a delayed task, a retry, the cron row's tick."""
        waiting = sorted(i for i, r in self.model.items() if not r.due)
        task_id = data.draw(st.sampled_from(waiting), "waiting task")
        set_moment(self.store, task_id, "run_at", PAST)
        self.model[task_id].due = True

    # --- invariants -------------------------------------------------------------------

    @invariant()
    def database_matches_model(self) -> None:
        """Every row is as the model says; a running row is the latest fence's, alone."""
        now = self.store.dialect.now()
        query = sa.select(
            c.id, c.queue_id, c.recurring, c.status, c.retries_left, c.attempt, c.locked_by,
            c.locked_until, c.finished_at, (c.run_at <= now).label("due"),
            (c.locked_until < now).label("lease_expired"),
        ).order_by(c.id)  # fmt: skip
        with self.store.engine.connect() as conn:
            rows = conn.execute(query).all()
        found = {
            row.id: Row(
                queue=row.queue_id, recurring=bool(row.recurring), status=Status(row.status),
                retries_left=row.retries_left, attempt=row.attempt, owner=row.locked_by,
                due=bool(row.due),
                lease_expired=None if row.locked_until is None else bool(row.lease_expired),
                finished=row.finished_at is not None,
            )
            for row in rows
        }  # fmt: skip
        assert found == self.model
        for task_id, row in found.items():
            assert row.retries_left >= 0
            if row.status is Status.IN_PROGRESS:
                # Only the worker given this attempt can write: every older fence is stale.
                assert self.given_to[(task_id, row.attempt)] == row.owner

    @invariant()
    def cron_row_is_never_lost(self) -> None:
        """The schedule's row exists, and runs or waits to be captured again."""
        if self.cron_id is None:
            return
        query = sa.select(schedules.c.task_id, c.recurring, c.status, c.retries_left).select_from(
            schedules.outerjoin(tasks, c.id == schedules.c.task_id)
        )
        with self.store.engine.connect() as conn:
            (row,) = conn.execute(query).all()
        assert row.task_id == self.cron_id and row.recurring, row
        assert row.status in (Status.IN_PROGRESS, Status.DONE) or (
            row.status == Status.FAILED and row.retries_left > 0
        ), row

    # --- helpers ----------------------------------------------------------------------

    def _in_capture_order(self, ids: list[int]) -> list[int]:
        """``ids`` in DESIGN.md's capture order, by the database's own comparison of run_at."""
        if not ids:
            return []
        query = sa.select(c.id).where(c.id.in_(ids)).order_by(c.priority.desc(), c.run_at, c.id)
        with self.store.engine.connect() as conn:
            return list(conn.execute(query).scalars())


def machine_for(store: jobq.Store) -> type[StateMachine]:
    """The state machine bound to ``store`` (Hypothesis builds machines without arguments)."""
    return type("StateMachineOnStore", (StateMachine,), {"store": store})


def test_random_runs_follow_the_state_machine(store: jobq.Store) -> None:
    """Random interleavings of every operation leave the database as the model says.

    Proves, after each step: only the latest fence of a running task can write, and a
    stale one (set_status, heartbeat) changes nothing at all; capture takes exactly the
    capturable rows, in order, an in-progress one only once its lease expired;
    retries_left is spent by capturing a failed or crashed attempt and by nothing else,
    never below 0; rescue fails exactly the expired runs; the cron row is never lost.
    """
    run_state_machine_as_test(machine_for(store), settings=SETTINGS)
