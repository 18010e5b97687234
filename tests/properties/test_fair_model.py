"""Fair queues as a property, on every database: captures of one fair queue, from
several workers, in random order with enqueues and ends, checked step by step against a
reference model of the design (jobq/limits/fair_capture.py's docstring) written here.

The model keeps each key's turn (stride scheduling: a key (re)joins at the queue's present
turn; each row taken moves it on by 1/weight; a capture takes the rows of the lowest tags,
turn + r/weight), whether it is idle, and each row's state; it predicts exactly which rows
each capture takes and every key's turn after it. So, after every step: no row is lost or
captured twice, no fence is given twice, no key runs more than its cap, and each key's
share is the one its weight gives, to the last row.

Rows wait in capture order by their run_at, which the database's clock writes: the model
asks the database for that order (a read), never for which rows a capture takes.
"""

from __future__ import annotations

import heapq
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
from jobq.dialects.schema import fair_keys, tasks
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
class Key:
    turn: float = -1.0
    idle: bool = False


@dataclass
class Model:
    rows: dict[int, Row] = field(default_factory=dict)
    keys: dict[str, Key] = field(default_factory=dict)

    def weight(self, key: str) -> int:
        return WEIGHTS.get(key, 1)

    def running(self, key: str) -> int:
        return sum(1 for r in self.rows.values() if r.key == key and r.status is Status.IN_PROGRESS)

    def present(self) -> float:
        turns = [key.turn for key in self.keys.values() if not key.idle and key.turn >= 0]
        return min(turns) if turns else 0.0


class FairMachine(RuleBasedStateMachine):
    """Workers capturing from one fair queue, checked against Model each step."""

    store: jobq.Store

    def __init__(self) -> None:
        super().__init__()
        clear(self.store)
        with self.store.engine.begin() as conn:
            conn.execute(sa.delete(fair_keys))
        self.store.fair_queues.make_fair(QUEUE, weights=WEIGHTS, max_running_per_key=CAP)
        self.model = Model()
        # make_fair wrote the weighed keys' rows, idle until an enqueue wakes them.
        for key in WEIGHTS:
            self.model.keys[key] = Key(idle=True)
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
        known = self.model.keys.get(name)
        if known is None or known.idle:
            self.model.keys[name] = Key()

    @rule(worker=st.sampled_from(WORKERS), limit=st.integers(1, 5))
    def capture(self, worker: str, limit: int) -> None:
        expected, turns = self._expected(limit)
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
        for name, turn in turns.items():
            self.model.keys[name].turn = turn

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
            keys = conn.execute(sa.select(k.fair_key, k.turn, k.idle).where(k.queue == QUEUE))
            found_keys = {name: Key(turn, bool(idle)) for name, turn, idle in keys}
        found = {
            row.id: (row.fair_key, Status(row.status), row.attempt, row.retries_left, row.locked_by)
            for row in rows
        }
        model = self.model.rows
        assert found == {
            i: (r.key, r.status, r.attempt, r.retries_left, r.owner) for i, r in model.items()
        }
        assert found_keys == self.model.keys
        for name in self.model.keys:
            assert self.model.running(name) <= CAP

    # --- the model's capture --------------------------------------------------------

    def _expected(self, limit: int) -> tuple[list[int], dict[str, float]]:
        """The ids a capture of ``limit`` takes and the turns it writes, as designed."""
        model = self.model
        order = self._capture_order()
        ids: list[int] = []
        turns: dict[str, float] = {}
        after: tuple[float, str] | None = None
        for _ in range(fair_capture.PAGES):
            left = limit - len(ids)
            if left <= 0:
                break
            awake = sorted((key.turn, name) for name, key in model.keys.items() if not key.idle)
            page = [entry for entry in awake if after is None or entry > after][:left]
            if not page:
                break
            present = model.present()
            starts = {name: (present if turn < 0 else turn) for turn, name in page}
            ids += self._serve(page, starts, left, order, turns)
            if len(page) < left:
                break
            after = page[-1]
        return ids, turns

    def _serve(
        self,
        page: list[tuple[float, str]],
        starts: dict[str, float],
        left: int,
        order: list[int],
        turns: dict[str, float],
    ) -> list[int]:
        model = self.model
        full = len(page) >= left
        last = max(starts.values())
        asked = []
        for _, name in page:
            want = min(left, CAP - model.running(name))
            if full:
                want = min(want, int((last - starts[name]) * model.weight(name)) + 1)
            if want > 0:
                asked.append((name, want))
        rows = {
            name: [i for i in order if model.rows[i].key == name and model.rows[i].waiting][:want]
            for name, want in asked
        }
        heap = [(starts[name], starts[name], name, 0) for name, _ in asked if rows[name]]
        heapq.heapify(heap)
        taken: dict[str, int] = {}
        ids: list[int] = []
        while heap and len(ids) < left:
            _, start, name, r = heapq.heappop(heap)
            ids.append(rows[name][r])
            taken[name] = r + 1
            if r + 1 < len(rows[name]):
                heapq.heappush(heap, (start + (r + 1) / model.weight(name), start, name, r + 1))
        for name, _ in asked:
            if taken.get(name):
                turns[name] = starts[name] + taken[name] / model.weight(name)
            elif not rows[name]:
                key = model.keys[name]
                has_work = any(
                    r.key == name and (r.waiting or r.status is Status.IN_PROGRESS)
                    for r in model.rows.values()
                )
                if not has_work:
                    key.idle = True
                elif key.turn < 0:
                    key.turn = starts[name]
        return ids

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
