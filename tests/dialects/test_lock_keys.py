"""Per-task lock keys in capture, on every database: no two runs of one key at a time."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

import jobq
from jobq import Status
from jobq.db.tasks import Completion
from jobq.dialects.schema import tasks
from tests import shared_database
from tests.helpers import all_rows, expire_lease, set_columns

#: One migrated database per backend for the module, emptied before each test.
backend, shared_url, db_url = shared_database.FIXTURES

PAST = datetime(2020, 1, 1, tzinfo=UTC)


def enqueue(store: jobq.Store, key: str | None, **options: object) -> int:
    return store.enqueue("t", {}, lock_key=key, **options)  # type: ignore[arg-type]


def captured_ids(store: jobq.Store, limit: int = 10, worker: str = "w1") -> list[int]:
    return [task.id for task in store.capture(limit, worker_id=worker)]


def test_one_capture_takes_only_the_earliest_due_row_of_each_key(store: jobq.Store) -> None:
    a1, b1, a2, free1, b2, a3, free2 = (
        enqueue(store, key) for key in ("a", "b", "a", None, "b", "a", None)
    )
    assert sorted(captured_ids(store)) == sorted([a1, b1, free1, free2])
    assert {store.get(i).status for i in (a2, a3, b2)} == {Status.QUEUED}  # type: ignore[union-attr]


def test_a_running_key_holds_back_its_other_rows_without_touching_them(store: jobq.Store) -> None:
    first, second = enqueue(store, "ledger:1"), enqueue(store, "ledger:1")
    (run,) = store.capture(10, worker_id="w1")
    assert run.id == first
    before = all_rows(store)
    for _ in range(3):
        assert captured_ids(store, worker="w2") == []
    assert all_rows(store) == before, "a blocked capture wrote something"
    assert store.set_status(run.id, run.attempt, Status.DONE)
    (next_run,) = store.capture(10, worker_id="w2")
    assert (next_run.id, next_run.attempt, next_run.retries_left) == (second, 1, 3)


def test_every_end_of_a_run_frees_its_key(store: jobq.Store) -> None:
    """done, terminal failure, a failure waiting for its retry, and a release."""
    ends = [(Status.DONE, 0), (Status.FAILED, 0), (Status.FAILED, 3), (Status.QUEUED, 3)]
    for n, (status, retries) in enumerate(ends):
        key = f"k{n}"
        enqueue(store, key, retries=retries)
        waiting = enqueue(store, key)
        (run,) = store.capture(1, worker_id="w1")
        delay = None if status is Status.QUEUED else 3600
        assert store.set_status(run.id, run.attempt, status, retry_delay=delay)
        if status is Status.QUEUED:
            # A run released now is due again and the earliest row of its key: first.
            assert captured_ids(store) == [run.id]
            assert store.set_status(run.id, run.attempt + 1, Status.DONE)
        assert captured_ids(store) == [waiting]
        assert store.set_status(waiting, 1, Status.DONE)


def test_priority_does_not_reorder_the_rows_of_one_key(store: jobq.Store) -> None:
    early = enqueue(store, "k", priority=0)
    enqueue(store, "k", priority=10)
    assert captured_ids(store) == [early]


def test_an_earlier_row_not_yet_due_does_not_hold_back_a_due_one(store: jobq.Store) -> None:
    later_run = enqueue(store, "k", delay=3600)
    due = enqueue(store, "k")
    (run,) = store.capture(10, worker_id="w1")
    assert run.id == due
    # It falls due while the other runs: it waits for the key like any other row.
    set_columns(store, later_run, run_at=PAST)
    assert captured_ids(store) == []
    assert store.set_status(run.id, run.attempt, Status.DONE)
    assert captured_ids(store) == [later_run]


def test_an_expired_run_keeps_its_key_until_captured_again_or_rescued(store: jobq.Store) -> None:
    stuck, waiting = enqueue(store, "k", retries=1), enqueue(store, "k")
    run = store.capture(1, worker_id="w1")[0]
    expire_lease(store, stuck)
    # Capturable itself (a retry is left), and still the holder of the key.
    again = store.capture(10, worker_id="w2")
    assert [(t.id, t.attempt) for t in again] == [(stuck, 2)]
    assert not store.set_status(run.id, run.attempt, Status.DONE), "the zombie's write applied"
    # No retries left: it is not capturable, and its key stays taken until rescue ends it.
    expire_lease(store, stuck)
    assert captured_ids(store) == []
    assert store.rescue() == 1
    assert captured_ids(store) == [waiting]


def test_the_database_refuses_two_running_rows_of_one_key(store: jobq.Store) -> None:
    """The unique index is the guarantee, whatever the capture query does."""
    first, second = enqueue(store, "k"), enqueue(store, "k")
    set_columns(store, first, status=Status.IN_PROGRESS.value)
    with pytest.raises(sa.exc.IntegrityError):
        set_columns(store, second, status=Status.IN_PROGRESS.value)
    set_columns(store, second, status=Status.DONE.value)  # other statuses are fine


def test_a_capture_that_loses_a_race_for_a_key_retries_and_takes_nothing(
    store: jobq.Store,
) -> None:
    """Row A of key k falls due while another capture is taking row B of k.

    The second capture's snapshot sees neither run, so it picks A; the unique index makes
    it wait for the first and then fail, and the Store retries it: it must come back with
    nothing, not with an error and not with A.
    """
    a = enqueue(store, "k", delay=3600)
    b = enqueue(store, "k")
    outcome: dict[str, object] = {}
    set_columns(store, a, run_at=PAST)  # A falls due: the second capture's snapshot picks A
    with store.engine.connect() as first:
        first.begin()
        # The first capture, still uncommitted: B runs.
        first.execute(
            sa.update(tasks)
            .where(tasks.c.id == b)
            .values(status=Status.IN_PROGRESS.value, attempt=1, locked_by="w1",
                    locked_until=store.dialect.now_plus(60.0))
        )  # fmt: skip

        def second_capture() -> None:
            try:
                outcome["captured"] = captured_ids(store, worker="w2")
            except Exception as error:  # the test reports it
                outcome["error"] = error

        thread = threading.Thread(target=second_capture)
        thread.start()
        time.sleep(0.5)  # let it block on the first capture's row or write lock
        first.commit()
        thread.join(timeout=60)
    assert outcome == {"captured": []}
    assert store.get(a).status is Status.QUEUED  # type: ignore[union-attr]


def test_complete_and_capture_never_runs_two_rows_of_a_key(store: jobq.Store) -> None:
    _, second, third = (enqueue(store, "k") for _ in range(3))
    (run,) = store.capture(10, worker_id="w1")
    applied, captured = store.complete_and_capture(
        [Completion(run.id, run.attempt, Status.DONE)], 10, worker_id="w1"
    )
    assert applied == 1
    # Where recording and capturing share one statement, the key is still taken in its
    # snapshot; either way, at most the next row of the key runs.
    assert [t.id for t in captured] in ([], [second])
    if not captured:
        assert captured_ids(store) == [second]
    assert captured_ids(store) == []
    assert store.get(third).status is Status.QUEUED  # type: ignore[union-attr]
