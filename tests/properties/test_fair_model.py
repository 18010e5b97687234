"""Fair queues as a property, on every database: captures of one fair queue, from
several workers, in random order with enqueues and ends, checked step by step against a
reference model of the design (jobq/limits/fair_capture.py's docstring) written here.

The model keeps the queue's cursor (deficit round robin: captures visit the keys that are
not idle in key order, round and round from where the last one stopped, each visit taking
up to the key's weight in rows, a visit cut short by a full capture finished by the next),
whether each key is idle, and each row's state; it predicts exactly which rows each capture
takes and where it stops. So, after every step: no row is lost or captured twice, no fence
is given twice, no key runs more than its cap, and each key's share is the one its weight
gives, to the last row.

Rows wait in capture order by their run_at, which the database's clock writes: the model
asks the database for that order (a read), never for which rows a capture takes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import jobq
from jobq import Status
from jobq.dialects.schema import fair_keys, limits, tasks
from jobq.limits import fair_capture
from tests.properties.test_state_machine import SETTINGS, clear

c = tasks.c
k = fair_keys.c

QUEUE = "f"
KEYS = (None, "a", "b", "c")  # None: a row given no key (the key "")
WEIGHTS = {"a": 2}
CAP = 2
WORKERS = ("w1", "w2", "w3")
LONG = 3600.0


@dataclass
class Row:
    key: str
    priority: int
    status: Status = Status.QUEUED
    retries_left: int = 3
    attempt: int = 0
    owner: str | None = None

    @property
    def waiting(self) -> bool:
        return self.status is Status.QUEUED or (
            self.status is Status.FAILED and self.retries_left > 0
        )


@dataclass
class Model:
    rows: dict[int, Row] = field(default_factory=dict)
    #: Each key of the queue: whether it is idle.
    idle: dict[str, bool] = field(default_factory=dict)
    #: Where the last capture stopped: the last key visited, the rows of a visit cut short.
    cursor: tuple[str | None, int] = (None, 0)

    def weight(self, key: str) -> int:
        return WEIGHTS.get(key, 1)

    def running(self, key: str) -> int:
        return sum(1 for r in self.rows.values() if r.key == key and r.status is Status.IN_PROGRESS)

    def ring(self) -> list[str]:
        """The keys not idle in the order captures visit them from the cursor."""
        awake = sorted(name for name, idle in self.idle.items() if not idle)
        start, taken = self.cursor
        if start is None:
            return awake
        if taken > 0:  # the cursor's key first: its visit goes on
            return [n for n in awake if n >= start] + [n for n in awake if n < start]
        return [n for n in awake if n > start] + [n for n in awake if n <= start]


class FairMachine(RuleBasedStateMachine):
    """Workers capturing from one fair queue, checked against Model each step."""

    store: jobq.Store

    def __init__(self) -> None:
        super().__init__()
        clear(self.store)
        with self.store.engine.begin() as conn:
            conn.execute(sa.delete(fair_keys))
            conn.execute(sa.delete(limits))  # and the cursor of the example before
        self.store.fair_queues.make_fair(QUEUE, weights=WEIGHTS, max_running_per_key=CAP)
        self.model = Model()
        # make_fair wrote the weighed keys' rows, idle until an enqueue wakes them.
        for key in WEIGHTS:
            self.model.idle[key] = True
        self.held: dict[str, list[tuple[int, int]]] = {w: [] for w in WORKERS}
        self.given: set[tuple[int, int]] = set()

    @rule(key=st.sampled_from(KEYS), n=st.integers(1, 3), priority=st.sampled_from([0, 1]))
    def enqueue(self, key: str | None, n: int, priority: int) -> None:
        ids = self.store.enqueue_many(
            "job", [{}] * n, queue=QUEUE, fair_key=key, priority=priority, lease=LONG
        )
        name = key if key is not None else ""
        for task_id in ids:
            self.model.rows[task_id] = Row(name, priority)
        self.model.idle[name] = False

    @rule(worker=st.sampled_from(WORKERS), limit=st.integers(1, 5))
    def capture(self, worker: str, limit: int) -> None:
        expected, cursor = self._expected(limit)
        got = self.store.capture(limit, queues=QUEUE, worker_id=worker)
        assert sorted(task.id for task in got) == sorted(expected)
        for task in got:
            row = self.model.rows[task.id]
            assert task.fence not in self.given, f"fence {task.fence} given twice"
            assert (task.attempt, task.fair_key) == (row.attempt + 1, row.key)
            self.given.add(task.fence)
            if row.status is Status.FAILED:
                row.retries_left -= 1
            row.status, row.attempt, row.owner = Status.IN_PROGRESS, task.attempt, worker
            self.held[worker].append(task.fence)
        self.model.cursor = cursor

    @precondition(lambda self: any(self.held.values()))
    @rule(data=st.data(), status=st.sampled_from([Status.DONE, Status.FAILED]))
    def end(self, data: st.DataObject, status: Status) -> None:
        worker = data.draw(st.sampled_from([w for w in WORKERS if self.held[w]]), "worker")
        fence = data.draw(st.sampled_from(self.held[worker]), "run")
        self.held[worker].remove(fence)
        assert self.store.set_status(*fence, status, retry_delay=0)
        row = self.model.rows[fence[0]]
        row.status, row.owner = status, None

    # --- invariants -------------------------------------------------------------------

    @invariant()
    def rows_and_keys_match_the_model(self) -> None:
        with self.store.engine.connect() as conn:
            rows = conn.execute(
                sa.select(c.id, c.fair_key, c.status, c.attempt, c.retries_left, c.locked_by)
            ).all()
            keys = conn.execute(sa.select(k.fair_key, k.idle).where(k.queue == QUEUE))
            found_keys = {name: bool(idle) for name, idle in keys}
            cursor = conn.execute(
                sa.select(limits.c.fair_cursor, limits.c.fair_cursor_taken).where(
                    limits.c.queue == QUEUE
                )
            ).one()
        found = {
            row.id: (row.fair_key, Status(row.status), row.attempt, row.retries_left, row.locked_by)
            for row in rows
        }
        model = self.model.rows
        assert found == {
            i: (r.key, r.status, r.attempt, r.retries_left, r.owner) for i, r in model.items()
        }
        assert found_keys == self.model.idle
        assert tuple(cursor) == self.model.cursor
        for name in self.model.idle:
            assert self.model.running(name) <= CAP

    # --- the model's capture --------------------------------------------------------

    def _expected(self, limit: int) -> tuple[list[int], tuple[str | None, int]]:
        """The ids a capture of ``limit`` takes and where it stops, as designed; the keys it
        finds with nothing waiting or running idled."""
        model = self.model
        order = self._capture_order()
        ring = model.ring()
        start, taken = model.cursor
        ids: list[int] = []
        stop = model.cursor
        empty: list[str] = []
        seen = 0
        for n in range(fair_capture.PAGES):
            left = limit - len(ids)
            if left <= 0:
                break
            page = ring[seen : seen + left]
            seen += len(page)
            if not page:
                break
            done = len(page) < left  # the page holds the rest of the ring
            owed = taken if n == 0 and page[0] == start else 0
            got, stop = self._serve(page, left, owed, n == 0 and done, order, empty)
            ids += got
            if done:
                break
        for name in empty:
            has_work = any(
                r.key == name and (r.waiting or r.status is Status.IN_PROGRESS)
                for r in model.rows.values()
            )
            if not has_work:
                model.idle[name] = True
        return ids, stop

    def _serve(
        self,
        page: list[str],
        left: int,
        owed: int,
        every_key: bool,
        order: list[int],
        empty: list[str],
    ) -> tuple[list[int], tuple[str | None, int]]:
        """One page's visits: round 0 gives each key up to its weight (the first key less
        ``owed``); more rounds only when the page is the whole ring."""
        model = self.model
        quota = {name: model.weight(name) for name in page}
        quota[page[0]] = max(quota[page[0]] - owed, 0)
        rows: dict[str, list[int]] = {}
        for name in page:
            room = min(left, CAP - model.running(name))
            want = min(room, left if every_key else quota[name])
            if want > 0:
                waiting = [i for i in order if model.rows[i].key == name and model.rows[i].waiting]
                rows[name] = waiting[:want]
                if not rows[name]:
                    empty.append(name)
        ids: list[int] = []
        round_ = 0
        while True:
            before = len(ids)
            for name in page:
                visit = quota[name] if round_ == 0 else model.weight(name)
                have = rows.get(name, [])
                give = min(visit, len(have), left - len(ids))
                ids += have[:give]
                rows[name] = have[give:]
                if len(ids) == left:
                    cut_short = give < visit and give < len(have)
                    had = give + (owed if round_ == 0 and name == page[0] else 0)
                    return ids, (name, had if cut_short else 0)
            round_ += 1
            if len(ids) == before or not every_key:
                return ids, (page[-1], 0)

    def _capture_order(self) -> list[int]:
        """Every row of the queue in capture order (priority, then run_at, then id), as the
        database compares its own run_at values."""
        query = (
            sa.select(c.id).where(c.queue_id == QUEUE).order_by(c.priority.desc(), c.run_at, c.id)
        )
        with self.store.engine.connect() as conn:
            return list(conn.execute(query).scalars())


def test_random_fair_captures_follow_the_model(store: jobq.Store) -> None:
    """Random enqueues with keys, captures by several workers and ends leave the rows and
    the keys' turns exactly as the model says; no fence is given twice; no key passes
    its cap. (No lease expires here: expired runs are looked for at most once a second.)"""
    machine = type("FairMachineOnStore", (FairMachine,), {"store": store})
    run_state_machine_as_test(machine, settings=SETTINGS)
