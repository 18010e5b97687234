"""The Store's contract, run unchanged on every database (see conftest's backends)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy import event

import jobq
from jobq import Status
from jobq.db.tasks import Completion
from tests import shared_database
from tests.helpers import all_rows, expire_lease, set_columns

#: One migrated database per backend for the module, emptied before each test.
backend, shared_url, db_url = shared_database.FIXTURES

PAST = datetime(2020, 1, 1, tzinfo=UTC)


@pytest.fixture(params=["fast", "observed"])
def store(db_url: str, request: pytest.FixtureRequest) -> Iterator[jobq.Store]:
    """The Store on both of its paths: statements straight to the driver, and through
    SQLAlchemy's execution (taken whenever someone listens to cursor events)."""
    s = jobq.Store(db_url)
    if request.param == "observed":
        event.listen(s.engine, "before_cursor_execute", lambda *args: None)
    yield s
    s.dispose()


def capture_one(store: jobq.Store, worker: str = "w1", **kw: object) -> jobq.Task:
    captured = store.capture(1, worker_id=worker, **kw)  # type: ignore[arg-type]
    assert len(captured) == 1, captured
    return captured[0]


# --- enqueue ---------------------------------------------------------------------------


def test_enqueue_writes_a_queued_row_with_defaults(store: jobq.Store) -> None:
    task_id = store.enqueue("send", {"to": "a@example.com", "n": [1, 2, {"x": None}]})
    task = store.get(task_id)
    assert task is not None
    assert task.name == "send"
    assert task.args == {"to": "a@example.com", "n": [1, 2, {"x": None}]}
    assert task.status is Status.QUEUED
    assert (task.queue_id, task.priority, task.attempt, task.retries_left) == ("default", 0, 0, 3)
    assert task.lease is None and task.timeout is None and not task.recurring  # the definition's
    assert task.locked_by is None and task.locked_until is None
    assert task.created_at is not None and task.created_at.tzinfo is not None
    assert task.run_at.tzinfo is not None
    assert abs((task.run_at - task.created_at).total_seconds()) < 1


def test_enqueue_stores_every_option(store: jobq.Store) -> None:
    when = datetime(2031, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
    task_id = store.enqueue(
        "t", {}, queue="emails", priority=7, run_at=when, retries=5, timeout=2.5, lease=12,
        unique_key="u1", lock_key="ledger:1",
    )  # fmt: skip
    task = store.get(task_id)
    assert task is not None
    assert (task.queue_id, task.priority, task.retries_left) == ("emails", 7, 5)
    assert (task.timeout, task.lease, task.unique_key, task.lock_key) == (2.5, 12, "u1", "ledger:1")
    assert task.run_at == when


def test_naive_run_at_is_taken_as_utc(store: jobq.Store) -> None:
    task_id = store.enqueue("t", {}, run_at=datetime(2030, 1, 1, 12, 0))
    task = store.get(task_id)
    assert task is not None and task.run_at == datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def test_times_read_back_aware_in_utc_whatever_form_a_row_holds(
    store: jobq.Store, backend: str
) -> None:
    """jobq's own form is read fast on SQLite; a time written by hand in another form (an
    offset, a T, no fraction) must come back the same moment, aware, in UTC."""
    when = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    task_id = store.enqueue("t", {}, run_at=when)
    task = store.get(task_id)
    assert task is not None and task.run_at == when and task.run_at.tzinfo is UTC
    if backend != "sqlite":
        return
    for text, moment in [
        ("2026-11-24T20:41:00+02:00", datetime(2026, 11, 24, 18, 41, tzinfo=UTC)),
        ("2026-11-24 20:41:00", datetime(2026, 11, 24, 20, 41, tzinfo=UTC)),
        ("2026-11-24 20:41:00.5", datetime(2026, 11, 24, 20, 41, 0, 500000, tzinfo=UTC)),
    ]:
        with store.engine.begin() as conn:
            conn.exec_driver_sql(
                "UPDATE jobq_tasks SET created_at = ? WHERE id = ?", (text, task_id)
            )
        task = store.get(task_id)
        assert task is not None and task.created_at == moment and task.created_at.tzinfo is UTC


def test_enqueue_many_returns_ids_in_argument_order(store: jobq.Store) -> None:
    args = [{"i": i} for i in range(12_345)]
    ids = store.enqueue_many("bulk", args, queue="q", priority=3, retries=1)
    assert len(ids) == len(set(ids)) == len(args)
    rows = {r["id"]: r for r in all_rows(store)}
    assert [rows[i]["args"] for i in ids] == args
    assert {(r["queue_id"], r["priority"], r["retries_left"]) for r in rows.values()} == {
        ("q", 3, 1)
    }
    assert store.enqueue_many("bulk", []) == []


def test_enqueue_many_with_delay_uses_database_clock(store: jobq.Store) -> None:
    store.enqueue_many("later", [{}, {}], delay=3600)
    assert store.capture(10, worker_id="w") == []


# --- unique_key ------------------------------------------------------------------------


def test_unique_key_returns_the_holder_while_it_is_pending(store: jobq.Store) -> None:
    first = store.enqueue("t", {"v": 1}, unique_key="k")
    assert store.enqueue("t", {"v": 2}, unique_key="k") == first
    assert store.enqueue("t", {}, unique_key="other") != first
    task = capture_one(store)
    assert store.enqueue("t", {}, unique_key="k") == first  # in progress still holds it
    store.set_status(task.id, task.attempt, Status.FAILED, retry_delay=3600)
    assert store.enqueue("t", {}, unique_key="k") == first  # waiting for its retry
    set_columns(store, first, run_at=PAST)
    task = capture_one(store)
    store.set_status(task.id, task.attempt, Status.DONE)
    second = store.enqueue("t", {}, unique_key="k")  # done releases the key
    assert second != first
    assert store.get(first).args == {"v": 1}  # type: ignore[union-attr]


def test_unique_key_is_released_by_terminal_failure(store: jobq.Store) -> None:
    first = store.enqueue("t", {}, unique_key="k", retries=0)
    task = capture_one(store)
    store.set_status(task.id, task.attempt, Status.FAILED, error="boom")
    assert store.enqueue("t", {}, unique_key="k") != first


def test_enqueue_many_with_unique_key_names_one_task(store: jobq.Store) -> None:
    ids = store.enqueue_many("t", [{"a": 1}, {"a": 2}, {"a": 3}], unique_key="one")
    assert len(set(ids)) == 1 and len(ids) == 3
    assert len(all_rows(store)) == 1


# --- transactions owned by the caller -------------------------------------------------


def test_enqueue_in_the_callers_transaction_rolls_back_with_it(store: jobq.Store) -> None:
    with store.engine.connect() as conn:
        tx = conn.begin()
        task_id = store.enqueue("t", {}, connection=conn)
        ids = store.enqueue_many("t", [{}, {}], connection=conn)
        tx.rollback()
    assert store.get(task_id) is None
    assert all(store.get(i) is None for i in ids)
    assert all_rows(store) == []


def test_enqueue_in_the_callers_transaction_commits_with_it(store: jobq.Store) -> None:
    with store.engine.connect() as conn, conn.begin():
        task_id = store.enqueue("t", {}, connection=conn)
    assert store.get(task_id) is not None


def test_set_status_in_the_callers_transaction_rolls_back_with_it(store: jobq.Store) -> None:
    store.enqueue("t", {})
    task = capture_one(store)
    with store.engine.connect() as conn:
        tx = conn.begin()
        assert store.set_status(task.id, task.attempt, Status.DONE, connection=conn)
        tx.rollback()
    assert store.get(task.id).status is Status.IN_PROGRESS  # type: ignore[union-attr]


# --- capture ---------------------------------------------------------------------------


def test_capture_takes_the_row_and_sets_the_lease(store: jobq.Store) -> None:
    task_id = store.enqueue("t", {"a": 1}, lease=45)
    task = capture_one(store, "worker-a")
    assert (task.id, task.status, task.attempt, task.locked_by) == (
        task_id, Status.IN_PROGRESS, 1, "worker-a",
    )  # fmt: skip
    assert task.retries_left == 3  # a first run spends nothing
    assert task.args == {"a": 1}
    assert task.started_at is not None and task.locked_until is not None
    held = (task.locked_until - task.started_at).total_seconds()
    assert 44 <= held <= 46
    assert store.capture(5, worker_id="worker-b") == []


def test_capture_lease_argument_overrides_the_rows_lease(store: jobq.Store) -> None:
    store.enqueue("t", {}, lease=45)
    task = capture_one(store, lease=5)
    assert 4 <= (task.locked_until - task.started_at).total_seconds() <= 6  # type: ignore[operator]


def test_capture_never_takes_more_than_limit(store: jobq.Store) -> None:
    store.enqueue_many("t", [{}] * 10)
    assert len(store.capture(3, worker_id="w")) == 3
    assert len(store.capture(0, worker_id="w")) == 0
    assert len(store.capture(100, worker_id="w")) == 7


def test_capture_orders_by_priority_then_run_at_then_id(store: jobq.Store) -> None:
    t0 = datetime(2021, 1, 1, tzinfo=UTC)
    late_low = store.enqueue("a", {}, priority=0, run_at=t0 + timedelta(hours=2))
    early_low_1 = store.enqueue("b", {}, priority=0, run_at=t0)
    early_low_2 = store.enqueue("c", {}, priority=0, run_at=t0)
    high = store.enqueue("d", {}, priority=10, run_at=t0 + timedelta(hours=5))
    negative = store.enqueue("e", {}, priority=-1, run_at=t0 - timedelta(days=1))
    expected = [high, early_low_1, early_low_2, late_low, negative]
    assert [t.id for t in store.capture(10, worker_id="w")] == expected


def test_capture_one_at_a_time_follows_the_same_order(store: jobq.Store) -> None:
    ids = [store.enqueue("t", {}, priority=p, run_at=PAST) for p in (1, 3, 2, 3)]
    order = [capture_one(store).id for _ in ids]
    assert order == [ids[1], ids[3], ids[2], ids[0]]


def test_capture_skips_tasks_not_yet_due(store: jobq.Store) -> None:
    store.enqueue("later", {}, delay=3600)
    store.enqueue("future", {}, run_at=datetime.now(UTC) + timedelta(hours=1))
    now_id = store.enqueue("now", {})
    assert [t.id for t in store.capture(10, worker_id="w")] == [now_id]


def test_delay_is_measured_on_the_database_clock(store: jobq.Store) -> None:
    task_id = store.enqueue("soon", {}, delay=1)
    assert store.capture(1, worker_id="w") == []
    time.sleep(1.3)
    assert [t.id for t in store.capture(1, worker_id="w")] == [task_id]


def test_queues_partition_capture(store: jobq.Store) -> None:
    a = store.enqueue("t", {}, queue="a")
    b = store.enqueue("t", {}, queue="b")
    c = store.enqueue("t", {}, queue="c")
    assert store.capture(10, worker_id="w", queues=[]) == []
    assert [t.id for t in store.capture(10, worker_id="w", queues=["a"])] == [a]
    assert [t.id for t in store.capture(10, worker_id="w", queues="b")] == [b]
    assert store.capture(10, worker_id="w", queues=["a", "b"]) == []
    assert [t.id for t in store.capture(10, worker_id="w")] == [c]


# --- set_status ------------------------------------------------------------------------


def test_done_stores_the_result_and_finishes(store: jobq.Store) -> None:
    store.enqueue("t", {})
    task = capture_one(store)
    assert store.set_status(task.id, task.attempt, Status.DONE, result={"sum": 3})
    done = store.get(task.id)
    assert done is not None
    assert (done.status, done.result, done.error) == (Status.DONE, {"sum": 3}, None)
    assert done.finished_at is not None and done.locked_by is None and done.locked_until is None
    assert store.capture(1, worker_id="w") == []
    # The run is over: a second write about it is refused.
    assert not store.set_status(task.id, task.attempt, Status.FAILED, error="late")
    assert store.get(task.id) == done


def test_scalar_results_round_trip(store: jobq.Store) -> None:
    for value in (5, "text", [1, "a"], 2.5, True):
        store.enqueue("t", {})
        task = capture_one(store)
        store.set_status(task.id, task.attempt, "done", result=value)
        assert store.get(task.id).result == value  # type: ignore[union-attr]


def test_failure_with_retries_left_comes_back_and_spends_one(store: jobq.Store) -> None:
    store.enqueue("t", {}, retries=3)
    task = capture_one(store)
    assert store.set_status(task.id, task.attempt, Status.FAILED, error="boom", retry_delay=0)
    failed = store.get(task.id)
    assert failed is not None
    assert (failed.status, failed.error, failed.retries_left) == (Status.FAILED, "boom", 3)
    assert failed.finished_at is None and failed.locked_by is None
    again = capture_one(store, "w2")
    assert (again.id, again.attempt, again.retries_left, again.locked_by) == (
        task.id, 2, 2, "w2",
    )  # fmt: skip


def test_failure_waits_for_the_given_run_at_or_backoff(store: jobq.Store) -> None:
    store.enqueue("t", {})
    task = capture_one(store)
    later = datetime.now(UTC) + timedelta(hours=1)
    store.set_status(task.id, task.attempt, Status.FAILED, run_at=later)
    assert store.get(task.id).run_at == later  # type: ignore[union-attr]
    assert store.capture(1, worker_id="w") == []

    slow = jobq.Store(store.engine, backoff=jobq.FixedBackoff(600))
    store.enqueue("u", {})
    task = capture_one(slow)
    slow.set_status(task.id, task.attempt, Status.FAILED)
    waited = store.get(task.id).run_at - task.started_at  # type: ignore[union-attr,operator]
    assert 599 <= waited.total_seconds() <= 601


def test_retries_left_counts_down_to_a_terminal_failure(store: jobq.Store) -> None:
    task_id = store.enqueue("t", {}, retries=2)
    seen = []
    for _ in range(3):
        task = capture_one(store)
        seen.append((task.attempt, task.retries_left))
        assert store.set_status(task.id, task.attempt, Status.FAILED, error="x", retry_delay=0)
    assert seen == [(1, 2), (2, 1), (3, 0)]
    final = store.get(task_id)
    assert final is not None
    assert (final.status, final.retries_left, final.error) == (Status.FAILED, 0, "x")
    assert final.finished_at is not None
    assert store.capture(1, worker_id="w") == []


def test_retries_zero_fails_terminally_at_once(store: jobq.Store) -> None:
    store.enqueue("t", {}, retries=0)
    task = capture_one(store)
    store.set_status(task.id, task.attempt, Status.FAILED)
    assert store.get(task.id).finished_at is not None  # type: ignore[union-attr]
    assert store.capture(1, worker_id="w") == []


def test_release_to_queued_spends_no_retry(store: jobq.Store) -> None:
    store.enqueue("t", {}, retries=1)
    task = capture_one(store)
    assert store.set_status(task.id, task.attempt, Status.QUEUED)
    released = store.get(task.id)
    assert released is not None
    assert (released.status, released.retries_left, released.locked_by) == (
        Status.QUEUED, 1, None,
    )  # fmt: skip
    again = capture_one(store)
    assert (again.attempt, again.retries_left) == (2, 1)


def test_release_with_a_delay_waits(store: jobq.Store) -> None:
    store.enqueue("t", {})
    task = capture_one(store)
    store.set_status(task.id, task.attempt, Status.QUEUED, retry_delay=3600)
    assert store.capture(1, worker_id="w") == []


def test_cancelled_is_terminal(store: jobq.Store) -> None:
    store.enqueue("t", {})
    task = capture_one(store)
    assert store.set_status(task.id, task.attempt, Status.CANCELLED, error="aborted")
    cancelled = store.get(task.id)
    assert cancelled is not None
    assert (cancelled.status, cancelled.error) == (Status.CANCELLED, "aborted")
    assert cancelled.finished_at is not None
    assert store.capture(1, worker_id="w") == []


def test_cancel_ends_a_waiting_task_and_asks_a_running_one_to_stop(store: jobq.Store) -> None:
    waiting = store.enqueue("t", {}, priority=1)
    running = store.enqueue("t", {})
    assert store.cancel(waiting)
    assert store.get(waiting).status is Status.CANCELLED  # type: ignore[union-attr]
    assert capture_one(store).id == running
    assert store.cancel(running)
    row = store.get(running)
    assert row is not None and row.status is Status.IN_PROGRESS and row.cancel_requested
    assert not store.cancel(waiting)  # ended already
    with pytest.raises(jobq.TaskNotFound, match="no task 1000000000"):
        store.cancel(10**9)


def test_set_status_on_a_missing_task_is_false(store: jobq.Store) -> None:
    assert not store.set_status(10**9, 1, Status.DONE)


# --- leases, fencing, heartbeat, rescue ---------------------------------------------


def test_fencing_a_stale_attempt_changes_nothing(store: jobq.Store) -> None:
    """Capture with a 1 s lease, let it expire, capture again: the old run is fenced off."""
    store.enqueue("t", {}, retries=3)
    first = capture_one(store, "zombie", lease=1)
    time.sleep(1.5)
    second = capture_one(store, "fresh", lease=60)
    assert (second.id, second.attempt, second.retries_left) == (first.id, 2, 2)
    before = all_rows(store)
    for status in Status:
        if status not in (Status.IN_PROGRESS, Status.BLOCKED):
            assert not store.set_status(first.id, first.attempt, status, result=1, error="late")
    assert store.heartbeat("zombie", [first.fence], lease=600) == set()
    assert store.heartbeat("fresh", [first.fence], lease=600) == set()
    assert all_rows(store) == before
    assert store.heartbeat("fresh", [second.fence]) == {second.id}
    assert store.set_status(second.id, second.attempt, Status.DONE, result="ok")


def test_heartbeat_extends_only_the_runs_it_owns(store: jobq.Store) -> None:
    store.enqueue_many("t", [{}, {}, {}])
    mine = store.capture(2, worker_id="me", lease=1)
    theirs = capture_one(store, "them", lease=1)
    owned = [t.fence for t in mine] + [theirs.fence, (mine[0].id, mine[0].attempt + 1)]
    assert store.heartbeat("me", owned, lease=60) == {t.id for t in mine}
    time.sleep(1.3)
    # Mine were extended; theirs expired and is capturable again.
    assert [t.id for t in store.capture(10, worker_id="other")] == [theirs.id]
    assert store.heartbeat("me", []) == set()


def test_heartbeat_without_lease_uses_each_rows_lease(store: jobq.Store) -> None:
    store.enqueue("t", {}, lease=120)
    task = capture_one(store, lease=1)
    assert store.heartbeat("w1", [task.fence]) == {task.id}
    held = store.get(task.id).locked_until - task.started_at  # type: ignore[union-attr,operator]
    assert 119 <= held.total_seconds() <= 122


def test_expired_lease_is_captured_again_and_spends_a_retry(store: jobq.Store) -> None:
    store.enqueue("t", {}, retries=1)
    first = capture_one(store, "a")
    expire_lease(store, first.id)
    second = capture_one(store, "b")
    assert (second.attempt, second.retries_left, second.locked_by) == (2, 0, "b")
    expire_lease(store, second.id)
    # No retries left: a crashed last attempt is not captured again, rescue ends it.
    assert store.capture(1, worker_id="c") == []
    assert store.rescue() == 1
    final = store.get(first.id)
    assert final is not None
    assert (final.status, final.error, final.retries_left) == (Status.FAILED, "lease expired", 0)
    assert final.finished_at is not None


def test_expired_runs_and_waiting_rows_are_captured_in_one_order(store: jobq.Store) -> None:
    """Capture reads expired runs and waiting rows from separate indexes; it still takes
    them in one order (priority, then run_at, then id), and at most its limit of both."""
    urgent, late = store.enqueue_many("t", [{"i": 0}, {"i": 1}], priority=5, retries=3)
    for run in store.capture(2, worker_id="lost"):
        expire_lease(store, run.id)
    set_columns(store, late, priority=-5)  # the lost run of ``late`` now comes after the rest
    middle = store.enqueue_many("t", [{"i": i} for i in range(2, 5)])
    assert [t.id for t in store.capture(2, worker_id="w")] == [urgent, middle[0]]
    assert [t.id for t in store.capture(10, worker_id="w")] == [*middle[1:], late]
    for task_id in (urgent, late):  # each a crashed attempt: it spent a retry
        task = store.get(task_id)
        assert task is not None and (task.attempt, task.retries_left) == (2, 2)


def test_rescue_fails_expired_runs_and_leaves_live_ones(store: jobq.Store) -> None:
    store.enqueue_many("t", [{}, {}, {}], retries=2)
    expired, live, _ = store.capture(3, worker_id="w")
    expire_lease(store, expired.id)
    assert store.rescue() == 1
    assert store.rescue() == 0
    rescued = store.get(expired.id)
    assert rescued is not None
    assert (rescued.status, rescued.error, rescued.retries_left) == (
        Status.FAILED, "lease expired", 2,
    )  # fmt: skip
    assert rescued.finished_at is None and rescued.locked_by is None
    assert store.get(live.id).status is Status.IN_PROGRESS  # type: ignore[union-attr]
    # The dead worker's late write is refused; the rescued task runs again.
    assert not store.set_status(expired.id, expired.attempt, Status.DONE)
    again = capture_one(store)
    assert (again.id, again.attempt, again.retries_left) == (expired.id, 2, 1)


# --- recurring rows --------------------------------------------------------------------


def test_a_due_recurring_done_row_is_captured_without_spending_a_retry(store: jobq.Store) -> None:
    task_id = store.enqueue("cron", {}, retries=2)
    set_columns(store, task_id, status="done", recurring=True, run_at=PAST)
    task = capture_one(store)
    assert (task.id, task.attempt, task.retries_left, task.recurring) == (task_id, 1, 2, True)
    store.prune(0)
    assert store.get(task_id) is not None


def test_a_recurring_row_that_is_not_due_waits(store: jobq.Store) -> None:
    task_id = store.enqueue("cron", {})
    set_columns(
        store, task_id, status="done", recurring=True,
        run_at=datetime.now(UTC) + timedelta(hours=1),
    )  # fmt: skip
    assert store.capture(1, worker_id="w") == []


# --- prune, counts ---------------------------------------------------------------------


def test_prune_deletes_only_old_finished_rows(store: jobq.Store) -> None:
    store.enqueue_many("t", [{}] * 4, retries=0)
    done, failed, cancelled, running = store.capture(4, worker_id="w")
    store.set_status(done.id, done.attempt, Status.DONE)
    store.set_status(failed.id, failed.attempt, Status.FAILED)
    store.set_status(cancelled.id, cancelled.attempt, Status.CANCELLED)
    retrying = store.enqueue("t", {}, retries=3)
    task = capture_one(store)
    store.set_status(task.id, task.attempt, Status.FAILED, retry_delay=3600)
    waiting = store.enqueue("t", {})
    assert store.prune(3600) == 0
    assert store.prune(timedelta(0)) == 3
    assert {r["id"] for r in all_rows(store)} == {running.id, retrying, waiting}


def test_counts_by_queue_and_status(store: jobq.Store) -> None:
    store.enqueue_many("t", [{}] * 3, queue="a")
    store.enqueue("t", {}, queue="b")
    task = capture_one(store, queues=["a"])
    store.set_status(task.id, task.attempt, Status.DONE)
    capture_one(store, queues=["a"])
    assert store.counts() == {
        ("a", Status.DONE): 1,
        ("a", Status.IN_PROGRESS): 1,
        ("a", Status.QUEUED): 1,
        ("b", Status.QUEUED): 1,
    }


def test_store_accepts_an_engine_and_hides_passwords(db_url: str) -> None:
    engine = sa.create_engine(db_url)
    store = jobq.Store(engine)
    store.enqueue("t", {})
    assert len(store.capture(5, worker_id="w")) == 1
    secret = jobq.Store("postgresql://u:hunter2@localhost/db")
    assert "hunter2" not in repr(secret)
    engine.dispose()


# --- listing and retrying ---------------------------------------------------------------


def test_list_tasks_newest_first_with_filters(store: jobq.Store) -> None:
    a = store.enqueue("t", {"n": 1}, queue="a")
    b = store.enqueue("t", {"n": 2}, queue="b")
    c = store.enqueue("t", {"n": 3}, queue="a")
    task = capture_one(store, queues=["b"])
    store.set_status(task.id, task.attempt, Status.DONE, result=7)
    assert [t.id for t in store.list_tasks()] == [c, b, a]
    assert [t.id for t in store.list_tasks(queue="a")] == [c, a]
    assert [t.id for t in store.list_tasks(status="done")] == [b]
    assert store.list_tasks(status=Status.DONE)[0].result == 7
    assert [t.id for t in store.list_tasks(status="queued", queue="a", limit=1)] == [c]
    assert store.list_tasks(status="failed") == []
    other = store.enqueue("u", {}, queue="a")
    assert [t.id for t in store.list_tasks(name="t")] == [c, b, a]
    assert [t.id for t in store.list_tasks(name="u", queue="a", status="queued")] == [other]
    assert store.list_tasks(name="u", queue="b") == []


def test_retry_requeues_failed_and_cancelled_tasks_once(store: jobq.Store) -> None:
    failed = store.enqueue("t", {}, retries=0)
    task = capture_one(store)
    store.set_status(task.id, task.attempt, Status.FAILED, error="boom")
    cancelled = store.enqueue("t", {})
    store.cancel(cancelled)
    done = store.enqueue("t", {}, priority=-1)
    assert store.retry(failed) and store.retry(cancelled)
    assert not store.retry(failed)  # queued now
    again = capture_one(store)
    assert (again.id, again.attempt, again.retries_left) == (failed, 2, 0)
    store.set_status(again.id, again.attempt, Status.FAILED, error="still")
    assert store.get(failed).finished_at is not None  # type: ignore[union-attr]
    assert capture_one(store).id == cancelled
    task = capture_one(store)
    store.set_status(task.id, task.attempt, Status.DONE)
    assert task.id == done and not store.retry(done)
    assert not store.retry(10**9)


def test_retry_failed_by_queue_leaves_held_unique_keys_alone(store: jobq.Store) -> None:
    for queue in ("a", "a", "b"):
        store.enqueue("t", {}, queue=queue, retries=0)
    store.enqueue("t", {}, queue="a", retries=0, unique_key="k")
    for task in store.capture(10, worker_id="w"):
        store.set_status(task.id, task.attempt, Status.FAILED)
    holder = store.enqueue("t", {}, queue="c", unique_key="k")  # k is free again: new holder
    assert store.retry_failed("a") == 2  # the failed 'k' task stays: k is held
    assert store.retry_failed() == 1
    assert store.counts()[("a", Status.QUEUED)] == 2
    assert store.counts()[("a", Status.FAILED)] == 1
    assert store.get(holder).status is Status.QUEUED  # type: ignore[union-attr]


def test_oldest_waiting_is_per_queue_and_only_counts_due_tasks(store: jobq.Store) -> None:
    assert store.oldest_waiting() == {}
    store.enqueue("t", {}, queue="a", run_at=datetime.now(UTC) - timedelta(seconds=90))
    store.enqueue("t", {}, queue="a")
    store.enqueue("t", {}, queue="b", delay=3600)
    waited = store.oldest_waiting()
    assert set(waited) == {"a"}
    assert 85 <= waited["a"] <= 100


# --- the live-worker registry ----------------------------------------------------------


def test_worker_registry_round_trip(store: jobq.Store) -> None:
    store.register_worker("w1", host="h1", pid=11, queues=["a", "b"], concurrency=8)
    store.register_worker("w2", host="h2", pid=22, queues=None, concurrency=1)
    store.register_worker("w1", host="h1", pid=12, queues=["a"], concurrency=4)  # restarted
    listed = {w.worker_id: w for w in store.live_workers()}
    assert set(listed) == {"w1", "w2"}
    assert (listed["w1"].pid, listed["w1"].queues, listed["w1"].concurrency) == (12, ["a"], 4)
    assert listed["w2"].queues is None and listed["w2"].alive
    assert listed["w1"].started_at.tzinfo is not None
    assert store.touch_worker("w2") and not store.touch_worker("ghost")
    assert store.forget_workers(3600) == 0
    time.sleep(1.2)
    assert not any(w.alive for w in store.live_workers(stale_after=1))
    store.touch_worker("w2")
    assert [w.worker_id for w in store.live_workers(stale_after=1) if w.alive] == ["w2"]
    assert store.forget_workers(1) == 1
    store.unregister_worker("w2")
    assert store.live_workers() == []


def test_live_workers_count_each_workers_runs_past_their_timeouts(store: jobq.Store) -> None:
    """timed_out: a worker's in_progress runs started longer ago than their timeout."""
    store.register_worker("w1", host="h", pid=1, queues=None, concurrency=4)
    store.register_worker("w2", host="h", pid=2, queues=None, concurrency=4)
    ids = store.enqueue_many("t", [{"i": i} for i in range(3)], timeout=60)
    untimed = store.enqueue("t", {"i": 9})  # no timeout: never past it
    assert [task.id for task in store.capture(3, worker_id="w1")] == ids
    assert [task.id for task in store.capture(1, worker_id="w2")] == [untimed]
    long_ago = datetime.now(UTC) - timedelta(minutes=5)
    for task_id in (ids[0], ids[1], untimed):  # ids[2] started just now
        set_columns(store, task_id, started_at=long_ago)
    assert {w.worker_id: w.timed_out for w in store.live_workers()} == {"w1": 2, "w2": 0}


def test_set_statuses_records_many_ends_in_one_call_fenced(store: jobq.Store) -> None:
    store.enqueue_many("t", [{"i": i} for i in range(6)], retries=1)
    runs = store.capture(6, worker_id="w")
    stale = runs[5]
    expire_lease(store, stale.id)
    newer = capture_one(store, "other")
    assert newer.id == stale.id
    applied = store.set_statuses(
        [
            Completion(runs[0].id, runs[0].attempt, Status.DONE, result={"n": 0}),
            Completion(runs[1].id, runs[1].attempt, Status.DONE, result=1),
            Completion(runs[2].id, runs[2].attempt, Status.FAILED, error="e", retry_delay=3600),
            Completion(runs[3].id, runs[3].attempt, Status.QUEUED),
            Completion(runs[4].id, runs[4].attempt, Status.CANCELLED, error="stop"),
            Completion(stale.id, stale.attempt, Status.DONE, result="zombie"),
        ]
    )
    assert applied == 5
    got = {t.id: t for t in (store.get(r.id) for r in runs) if t is not None}
    assert [got[r.id].status for r in runs[:5]] == [
        Status.DONE, Status.DONE, Status.FAILED, Status.QUEUED, Status.CANCELLED,
    ]  # fmt: skip
    assert (got[runs[0].id].result, got[runs[1].id].result) == ({"n": 0}, 1)
    assert got[runs[2].id].finished_at is None and got[runs[2].id].error == "e"
    assert (got[stale.id].status, got[stale.id].attempt) == (Status.IN_PROGRESS, newer.attempt)
    assert store.set_statuses([]) == 0


# Every kind of end, and every kind of JSON result, for the batch-versus-one-by-one test.
ENDS: list[tuple[Status, dict[str, object]]] = [
    (Status.DONE, {"result": {"n": [1, "two", None]}}),
    (Status.DONE, {"result": 0}),
    (Status.DONE, {"result": "0"}),
    (Status.DONE, {"result": ""}),
    (Status.DONE, {"result": [1.5, True]}),
    (Status.DONE, {"result": None}),
    (Status.DONE, {"result": "ünïcode ' \" \\ \n"}),
    (Status.FAILED, {"error": "boom", "retry_delay": 3600}),  # retries left: waits
    (Status.FAILED, {"error": "boom"}),  # retries left: the Store's backoff
    (Status.QUEUED, {"retry_delay": 0}),
    (Status.QUEUED, {}),
    (Status.CANCELLED, {"error": "stop"}),
]


@pytest.mark.parametrize("retries", [0, 2])
def test_set_statuses_writes_what_set_status_writes(store: jobq.Store, retries: int) -> None:
    """The set-based batch and one fenced UPDATE per end leave the same rows behind."""
    n = len(ENDS)
    store.enqueue_many("t", [{"i": i} for i in range(2 * n)], retries=retries)
    runs = sorted(store.capture(2 * n, worker_id="w"), key=lambda t: t.id)
    one_by_one, batched = runs[:n], runs[n:]
    for run, (status, parts) in zip(one_by_one, ENDS, strict=True):
        assert store.set_status(run.id, run.attempt, status, **parts)  # type: ignore[arg-type]
    completions = [
        Completion(run.id, run.attempt, status, **parts)  # type: ignore[arg-type]
        for run, (status, parts) in zip(batched, ENDS, strict=True)
    ]
    assert store.set_statuses(completions) == n
    assert store.set_statuses(completions) == 0  # all stale now

    def comparable(row: dict[str, object]) -> dict[str, object]:
        # Clock columns differ by the microseconds between the two writes.
        clock = ("id", "args", "created_at", "started_at", "finished_at", "run_at")
        kept = {k: v for k, v in row.items() if k not in clock}
        kept["finished"] = row["finished_at"] is not None
        waited = row["run_at"] - row["started_at"]  # type: ignore[operator]
        kept["waits"] = "an hour" if waited > timedelta(minutes=59) else waited > timedelta(0)
        return kept

    rows = all_rows(store)
    assert [comparable(r) for r in rows[:n]] == [comparable(r) for r in rows[n:]]


def test_set_statuses_takes_the_first_of_two_ends_of_one_run(store: jobq.Store) -> None:
    run = store.enqueue("t", {}) and capture_one(store)
    ends = [
        Completion(run.id, run.attempt, Status.DONE, result=1),
        Completion(run.id, run.attempt, Status.CANCELLED, error="late"),
    ]
    assert store.set_statuses(ends) == 1
    task = store.get(run.id)
    assert task is not None and (task.status, task.result) == (Status.DONE, 1)


def test_set_statuses_checks_every_end_before_writing(store: jobq.Store) -> None:
    store.enqueue_many("t", [{}, {}])
    good, bad = store.capture(2, worker_id="w")
    with pytest.raises(jobq.InvalidOption, match="status"):
        store.set_statuses(
            [
                Completion(good.id, good.attempt, Status.DONE),
                Completion(bad.id, bad.attempt, Status.IN_PROGRESS),
            ]
        )
    assert {t.status for t in (store.get(good.id), store.get(bad.id)) if t} == {Status.IN_PROGRESS}


def test_set_statuses_fails_alone_the_run_whose_result_cannot_be_stored(store: jobq.Store) -> None:
    """The others of the batch are recorded; that run fails, saying why."""
    store.enqueue_many("t", [{}, {}, {}], retries=0)
    good, not_json, surrogate = store.capture(3, worker_id="w")
    applied = store.set_statuses(
        [
            Completion(good.id, good.attempt, Status.DONE, result=[1]),
            Completion(not_json.id, not_json.attempt, Status.DONE, result={1, 2}),
            Completion(surrogate.id, surrogate.attempt, Status.DONE, result="\udcff"),
        ]
    )
    assert applied == 3
    tasks = {t.id: t for t in map(store.get, (good.id, not_json.id, surrogate.id)) if t}
    assert (tasks[good.id].status, tasks[good.id].result) == (Status.DONE, [1])
    assert tasks[not_json.id].status is Status.FAILED
    assert "its result is not JSON" in (tasks[not_json.id].error or "")
    assert tasks[surrogate.id].status is Status.FAILED
    assert "lone surrogate" in (tasks[surrogate.id].error or "")


@pytest.mark.parametrize("together", [False, True], ids=["set_statuses", "complete_and_capture"])
def test_errors_are_stored_whole_nul_and_undecodable_text_escaped(
    store: jobq.Store, together: bool
) -> None:
    store.enqueue_many("t", [{}, {}, {}], retries=0)
    nul, undecodable, fine = store.capture(3, worker_id="w")
    ends = [
        Completion(nul.id, nul.attempt, Status.FAILED, error="ab\x00cd"),
        Completion(undecodable.id, undecodable.attempt, Status.FAILED, error="open \udcff.csv"),
        Completion(fine.id, fine.attempt, Status.DONE, result="ok"),
    ]
    if together:
        store.complete_and_capture(ends, 1, worker_id="w")
    else:
        store.set_statuses(ends)
    assert store.get(nul.id).error == "ab\\x00cd"  # type: ignore[union-attr]
    assert store.get(undecodable.id).error == "open \\udcff.csv"  # type: ignore[union-attr]
    assert store.get(fine.id).result == "ok"  # type: ignore[union-attr]
    store.enqueue("t", {})
    run = capture_one(store)
    assert store.set_status(run.id, run.attempt, Status.FAILED, error="x\x00y")
    assert store.get(run.id).error == "x\\x00y"  # type: ignore[union-attr]


def test_an_error_too_long_keeps_its_start_and_end(store: jobq.Store) -> None:
    store.enqueue("t", {}, retries=0)
    run = capture_one(store)
    store.set_statuses(
        [Completion(run.id, run.attempt, Status.FAILED, error="a" + "x" * 20_000_000 + "z")]
    )
    error = store.get(run.id).error  # type: ignore[union-attr]
    assert error is not None and error.startswith("ax") and error.endswith("xz")
    assert "characters cut" in error and len(error) < 200_000


# Only MySQL's limit (max_allowed_packet, 16 MB here) is small enough to reach in a test;
# PostgreSQL's and SQLite's are about 1 GB.
@pytest.mark.parametrize("backend", ["mysql"], scope="module")
def test_a_result_too_large_for_the_database_fails_its_run(store: jobq.Store) -> None:
    """Past what one statement may carry, the run fails naming the size; others are kept."""
    room = store.db.room()
    store.enqueue_many("t", [{}, {}], retries=0)
    big, small = store.capture(2, worker_id="w")
    huge = "x" * (room.limit + 1)
    store.set_statuses(
        [
            Completion(big.id, big.attempt, Status.DONE, result=huge),
            Completion(small.id, small.attempt, Status.DONE, result="ok"),
        ]
    )
    failed = store.get(big.id)
    assert failed is not None and failed.status is Status.FAILED
    assert "result too large for this database" in (failed.error or "")
    assert store.get(small.id).result == "ok"  # type: ignore[union-attr]


@pytest.mark.parametrize("backend", ["mysql"], scope="module")
def test_many_large_results_are_recorded_in_statements_that_fit(store: jobq.Store) -> None:
    room = store.db.room()
    store.enqueue_many("t", [{}] * 4)
    runs = store.capture(4, worker_id="w")
    size = room.limit // 3
    applied, _ = store.complete_and_capture(
        [Completion(r.id, r.attempt, Status.DONE, result="y" * size) for r in runs],
        1,
        worker_id="w",
    )
    assert applied == 4
    assert all(len(store.get(r.id).result) == size for r in runs)  # type: ignore[union-attr, arg-type]


@pytest.mark.parametrize("backend", ["mysql"], scope="module")
def test_arguments_too_large_for_the_database_are_refused_naming_the_limit(
    store: jobq.Store,
) -> None:
    room = store.db.room()
    with pytest.raises(jobq.PayloadTooLarge, match="more than this database takes") as error:
        store.enqueue("t", {"a": "x" * room.limit})
    assert "max_allowed_packet" in str(error.value)
    with pytest.raises(jobq.PayloadTooLarge, match="entry 1 of the list"):
        store.enqueue_many("t", [{"a": 1}, {"a": "x" * room.limit}])
    ids = store.enqueue_many("t", [{"a": "y" * (room.limit // 3)} for _ in range(4)])
    assert len(ids) == 4
    assert store.counts() == {("default", Status.QUEUED): 4}


def test_complete_and_capture_never_recaptures_the_run_it_records(store: jobq.Store) -> None:
    """A run whose lease expired unrescued is both recordable and capturable: it ends."""
    store.enqueue("t", {}, retries=3)
    run = capture_one(store)
    expire_lease(store, run.id)
    applied, captured = store.complete_and_capture(
        [Completion(run.id, run.attempt, Status.DONE, result="ok")], 5, worker_id="w2"
    )
    assert (applied, captured) == (1, [])
    task = store.get(run.id)
    assert task is not None
    assert (task.status, task.result, task.attempt, task.locked_by) == (
        Status.DONE, "ok", run.attempt, None,
    )  # fmt: skip


def test_complete_and_capture_records_then_captures_in_one_go(store: jobq.Store) -> None:
    store.enqueue_many("t", [{"i": i} for i in range(4)])
    first = store.capture(2, worker_id="w")
    applied, captured = store.complete_and_capture(
        [Completion(t.id, t.attempt, Status.DONE, result=t.args["i"]) for t in first]
        + [Completion(first[0].id, first[0].attempt, Status.FAILED)],  # stale: done already
        5,
        worker_id="w",
    )
    assert applied == 2
    assert [t.args["i"] for t in captured] == [2, 3]
    assert [store.get(t.id).result for t in first] == [0, 1]  # type: ignore[union-attr]
    assert store.complete_and_capture([], 5, worker_id="w") == (0, [])
    with pytest.raises(jobq.InvalidOption, match="limit"):
        store.complete_and_capture([], -1, worker_id="w")


def test_due_later_counts_what_fell_due_since_the_last_capture(store: jobq.Store) -> None:
    """A burst worker's capture may miss a task by a moment before it asks what is due
    later: counted with ``since``, that task is due in 0 s and the worker goes on."""
    store.enqueue("t", {}, run_at=datetime.now(UTC) - timedelta(seconds=1))
    assert store.due_later() == (0, None)
    assert store.due_later(since=30) == (1, 0.0)
    store.enqueue("t", {}, delay=600)
    left, next_in = store.due_later()
    assert left == 1 and next_in is not None and 590 < next_in <= 600
