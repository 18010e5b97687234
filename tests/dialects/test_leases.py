"""Leases from the worker's definitions, on every database and every capture path.

A row that set no lease at enqueue (lease NULL) is held for the lease its worker's
definition of the task names (jobq.db.tasks.Leases), else the default; a row that set one
keeps it; a number given to capture overrides both. Held = locked_until - started_at,
both written by the capture itself.
"""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

import jobq
from jobq import Status
from jobq.db.tasks import DEFAULT_LEASE, NO_NAMED_LEASES, Completion, Leases, as_utc
from jobq.dialects.schema import limits
from tests import shared_database

#: One migrated database per backend for the module, emptied before each test.
backend, shared_url, db_url = shared_database.FIXTURES

LEASES = Leases(by_name=(("short", 5.0), ("long", 500.0)), default=20.0)


def held(task: jobq.Task) -> float:
    assert task.locked_until is not None and task.started_at is not None
    return (task.locked_until - task.started_at).total_seconds()


def held_by_name(tasks: list[jobq.Task]) -> dict[str, float]:
    return {task.name: round(held(task), 1) for task in tasks}


def enqueue_four(store: jobq.Store, queue: str = "default") -> None:
    for name in ("short", "long", "unknown"):
        store.enqueue(name, {}, queue=queue)
    store.enqueue("own", {}, queue=queue, lease=7)


EXPECTED = {"short": 5.0, "long": 500.0, "unknown": 20.0, "own": 7.0}


def test_a_row_without_a_lease_stores_null(store: jobq.Store) -> None:
    task = store.get(store.enqueue("short", {}))
    assert task is not None and task.lease is None


@pytest.mark.parametrize("queues", [None, ["default"], ["default", "other"]])
def test_capture_gives_each_row_its_definitions_lease(
    store: jobq.Store, queues: list[str] | None
) -> None:
    enqueue_four(store)
    captured = store.capture(10, worker_id="w", queues=queues, lease=LEASES)
    assert held_by_name(captured) == EXPECTED


def test_without_named_leases_a_row_gets_the_default(store: jobq.Store) -> None:
    enqueue_four(store)
    captured = store.capture(10, worker_id="w", lease=NO_NAMED_LEASES)
    assert held_by_name(captured) == {
        "short": DEFAULT_LEASE, "long": DEFAULT_LEASE, "unknown": DEFAULT_LEASE, "own": 7.0
    }  # fmt: skip
    assert held_by_name(store.capture(10, worker_id="w")) == {}  # nothing left
    enqueue_four(store, queue="again")
    assert set(held_by_name(store.capture(10, worker_id="w")).values()) <= {DEFAULT_LEASE, 7.0}


def test_a_number_overrides_every_rows_lease(store: jobq.Store) -> None:
    enqueue_four(store)
    captured = store.capture(10, worker_id="w", lease=3)
    assert set(held_by_name(captured).values()) == {3.0}


def test_complete_and_capture_gives_the_definitions_lease(store: jobq.Store) -> None:
    store.enqueue("first", {})
    (first,) = store.capture(1, worker_id="w", lease=LEASES)
    enqueue_four(store)
    done = Completion(first.id, first.attempt, Status.DONE)
    applied, captured = store.complete_and_capture([done], 10, worker_id="w", lease=LEASES)
    assert applied == 1
    assert held_by_name(captured) == EXPECTED


def test_a_limited_queue_gives_the_definitions_lease(store: jobq.Store) -> None:
    store.set_limit("limited", concurrency=10)
    enqueue_four(store, queue="limited")
    captured = store.capture(10, worker_id="w", queues=["limited"], lease=LEASES)
    assert held_by_name(captured) == EXPECTED


def test_a_limited_capture_that_waited_for_its_queues_lock_gives_whole_leases(
    store: jobq.Store,
) -> None:
    """The sql limiter captures after it locked the queue's jobq_limits row; a capture that
    waited for that lock holds each row for its whole lease from the run's start, not from
    when its transaction began (seen on a loaded machine: 4.8 s of a 5 s lease)."""
    store.set_limit("limited", concurrency=10)
    enqueue_four(store, queue="limited")
    captured: list[jobq.Task] = []
    with store.engine.connect() as holder:
        holder.begin()
        # The queue's limit row, locked (on SQLite: the database's write lock) until commit.
        holder.execute(sa.update(limits).where(limits.c.queue == "limited").values(concurrency=10))
        capture = threading.Thread(
            target=lambda: captured.extend(
                store.capture(10, worker_id="w", queues=["limited"], lease=LEASES)
            )
        )
        capture.start()
        capture.join(timeout=1.0)  # it cannot end before the lock is given up
        assert capture.is_alive() and not captured
        released = holder.execute(sa.select(store.dialect.clock())).scalar_one()
        holder.commit()
    capture.join(timeout=60)
    assert held_by_name(captured) == EXPECTED
    assert all(as_utc(task.started_at) >= as_utc(released) for task in captured)  # type: ignore[arg-type]


def test_a_heartbeat_renews_with_the_lease_it_is_given_else_the_rows(store: jobq.Store) -> None:
    enqueue_four(store)
    captured = {task.name: task for task in store.capture(10, worker_id="w", lease=LEASES)}
    short = captured["short"]
    assert store.heartbeat("w", [short.fence], lease=5) == {short.id}
    renewed = store.get(short.id)
    assert renewed is not None and renewed.locked_until is not None
    assert renewed.locked_until >= short.locked_until  # type: ignore[operator]
    own, unknown = captured["own"], captured["unknown"]
    assert store.heartbeat("w", [own.fence, unknown.fence]) == {own.id, unknown.id}
    own_now, unknown_now = store.get(own.id), store.get(unknown.id)
    assert own_now is not None and unknown_now is not None
    assert own_now.locked_until < unknown_now.locked_until  # type: ignore[operator]


def test_one_heartbeat_renews_each_run_by_its_definitions_lease(store: jobq.Store) -> None:
    enqueue_four(store)
    captured = store.capture(10, worker_id="w", lease=LEASES)
    before = store.get(captured[0].id)
    assert before is not None and before.locked_until is not None
    extended = store.heartbeat("w", [task.fence for task in captured], lease=LEASES)
    assert extended == {task.id for task in captured}
    renewed = {task.name: store.get(task.id) for task in captured}
    # locked_until - now is each run's lease: compare the runs to each other.
    until = {name: task.locked_until for name, task in renewed.items() if task is not None}
    assert until["short"] < until["own"] < until["unknown"] < until["long"]  # 5 < 7 < 20 < 500
