"""Cron schedules in the Store, on every database: sync, the ends of recurring runs, pauses.

A schedule is a recurring row of the tasks table: done, due at its next tick. Capture
takes it like any due row; the end of its run puts it back to done at the tick after the
database's now, or keeps it running its retries. Rows are made due by writing run_at, and
every time is checked against the database's own clock.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

import jobq
from jobq import Cron, Schedule, ScheduleState, Status, Task
from jobq.cron.periodic import SyncReport
from jobq.db.tasks import Completion
from jobq.dialects.schema import schedules
from jobq.dialects.schema import tasks as tasks_table
from tests import shared_database
from tests.helpers import all_rows, expire_lease, set_columns

#: One migrated database per backend for the module, emptied before each test.
backend, shared_url, db_url = shared_database.FIXTURES

#: 2020-01-01 00:00 UTC: a tick of every expression used here, long past.
PAST = datetime(2020, 1, 1, tzinfo=UTC)
MINUTELY = "* * * * *"
#: Midnight on 1 January: no test runs long enough to see its next tick come.
YEARLY = "0 0 1 1 *"
PARIS = "Europe/Paris"
NOTHING = SyncReport(created=[], updated=[], removed=[])


def schedule(
    name: str = "sweep",
    cron: str = MINUTELY,
    *,
    timezone: str = "UTC",
    task: str = "t",
    queue: str = "default",
    **options: Any,
) -> Schedule:
    return Schedule(name=name, cron=Cron(cron, timezone), task=task, queue=queue, **options)


def db_now(store: jobq.Store) -> datetime:
    """The database's clock."""
    with store.engine.connect() as conn:
        return store.cron._now(conn)


def row(store: jobq.Store, task_id: int) -> Task:
    task = store.get(task_id)
    assert task is not None
    return task


def state(store: jobq.Store, name: str) -> ScheduleState:
    (found,) = [s for s in store.schedules() if s.name == name]
    return found


def schedule_rows(store: jobq.Store) -> list[dict[str, Any]]:
    """Every jobq_schedules row, by name: for 'nothing changed' assertions."""
    with store.engine.connect() as conn:
        query = sa.select(schedules).order_by(schedules.c.name)
        return [dict(r._mapping) for r in conn.execute(query)]


def snapshot(store: jobq.Store) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return all_rows(store), schedule_rows(store)


def assert_next_tick(at: datetime, cron: str, before: datetime, after: datetime, **kw: str) -> None:
    """``at`` is ``cron``'s first tick after some moment between ``before`` and ``after``."""
    rule = Cron(cron, **kw)
    assert rule.next_after(before) <= at <= rule.next_after(after), (at, before, after)
    assert rule.next_after(at - timedelta(microseconds=1)) == at, f"{at} is not a tick"


def assert_between(at: datetime | None, before: datetime, after: datetime, plus: float = 0) -> None:
    assert at is not None
    shift = timedelta(seconds=plus)
    assert before + shift <= at <= after + shift, (at, before + shift, after + shift)


def this_minute(store: jobq.Store) -> datetime:
    """The latest MINUTELY tick, at or before the database's now."""
    return db_now(store).replace(second=0, microsecond=0)


def start_run(store: jobq.Store, name: str, tick: datetime | None = None) -> Task:
    """Make schedule ``name`` due at ``tick`` (default: this minute's) and capture its run."""
    task_id = state(store, name).task_id
    set_columns(store, task_id, run_at=tick or this_minute(store))
    (task,) = store.capture(10, worker_id="w1")
    assert (task.id, task.status, task.recurring) == (task_id, Status.IN_PROGRESS, True)
    return task


def make_due(store: jobq.Store, task_id: int) -> None:
    set_columns(store, task_id, run_at=PAST)


# --- sync_schedules --------------------------------------------------------------------


def test_sync_creates_each_schedule_as_a_done_row_due_at_its_next_tick(store: jobq.Store) -> None:
    before = db_now(store)
    report = store.sync_schedules(
        [
            schedule("nightly", YEARLY, args={"full": True}, retries=2, priority=5, lease=90.0,
                     timeout=60.0, lock_key="night"),
            schedule("morning", "0 9 * * *", timezone=PARIS, task="report", queue="reports"),
        ]
    )  # fmt: skip
    after = db_now(store)
    assert report == SyncReport(created=["morning", "nightly"], updated=[], removed=[])  # by name
    listed = store.schedules()
    assert [s.name for s in listed] == ["morning", "nightly"]  # by name
    morning, nightly = listed
    task = row(store, nightly.task_id)
    assert (task.name, task.queue_id, task.args, task.status, task.recurring) == (
        "t", "default", {"full": True}, Status.DONE, True,
    )  # fmt: skip
    assert (task.priority, task.lease, task.timeout, task.lock_key, task.unique_key) == (
        5, 90.0, 60.0, "night", None,
    )  # fmt: skip
    assert (task.attempt, task.retries_left, task.result, task.error) == (0, 2, None, None)
    assert (task.locked_by, task.locked_until, task.started_at, task.finished_at) == (None,) * 4
    assert_between(task.created_at, before, after)
    assert_next_tick(task.run_at, YEARLY, before, after)
    assert nightly == ScheduleState(
        name="nightly", task="t", queue="default", cron=YEARLY, timezone="UTC", enabled=True,
        defined=True, status=Status.DONE, next_run=task.run_at, last_run=None, last_status=None,
        task_id=task.id,
    )  # fmt: skip
    assert nightly.active
    paris = row(store, morning.task_id)
    assert (paris.name, paris.queue_id, paris.args) == ("report", "reports", {})
    assert paris.retries_left == 0
    assert (morning.cron, morning.timezone, morning.next_run) == ("0 9 * * *", PARIS, paris.run_at)
    assert_next_tick(paris.run_at, "0 9 * * *", before, after, timezone=PARIS)
    assert store.capture(10, worker_id="w1") == [], "a schedule ran before its first tick"


def test_syncing_the_same_definitions_again_changes_nothing(store: jobq.Store) -> None:
    defined = [schedule("a", args={"n": 1}, retries=2), schedule("b", YEARLY, queue="other")]
    store.sync_schedules(defined)
    before = snapshot(store)
    assert store.sync_schedules(defined) == NOTHING
    assert store.sync_schedules(defined, queues=["default", "other"]) == NOTHING
    assert snapshot(store) == before


def test_a_new_expression_or_timezone_reschedules_from_now(store: jobq.Store) -> None:
    store.sync_schedules([schedule("s", YEARLY)])
    task_id = state(store, "s").task_id
    yearly_tick = row(store, task_id).run_at

    before = db_now(store)
    assert store.sync_schedules([schedule("s", "0 12 * * *")]) == SyncReport([], ["s"], [])
    after = db_now(store)
    noon = row(store, task_id).run_at
    assert noon != yearly_tick
    assert_next_tick(noon, "0 12 * * *", before, after)

    before = db_now(store)
    report = store.sync_schedules([schedule("s", "0 12 * * *", timezone=PARIS)])
    after = db_now(store)
    assert report == SyncReport([], ["s"], [])
    task = row(store, task_id)
    assert_next_tick(task.run_at, "0 12 * * *", before, after, timezone=PARIS)
    assert (task.status, task.attempt) == (Status.DONE, 0)
    listed = state(store, "s")
    assert (listed.cron, listed.timezone, listed.task_id, listed.next_run) == (
        "0 12 * * *", PARIS, task_id, task.run_at,
    )  # fmt: skip
    assert len(all_rows(store)) == 1


def test_changed_arguments_and_options_update_the_same_row(store: jobq.Store) -> None:
    store.sync_schedules([schedule("s", YEARLY, args={"n": 1}, retries=1)])
    task_id = state(store, "s").task_id
    tick = row(store, task_id).run_at
    changed = schedule(
        "s", YEARLY, task="t2", queue="other", args={"n": 2}, retries=4, priority=3, lease=10.0,
        timeout=5.0, lock_key="k2",
    )  # fmt: skip
    assert store.sync_schedules([changed]) == SyncReport([], ["s"], [])
    task = row(store, task_id)
    assert (task.name, task.queue_id, task.args, task.priority) == ("t2", "other", {"n": 2}, 3)
    assert (task.lease, task.timeout, task.lock_key, task.retries_left) == (10.0, 5.0, "k2", 4)
    assert (task.status, task.run_at, task.attempt) == (Status.DONE, tick, 0)
    assert (schedule_rows(store)[0]["retries"], state(store, "s").queue) == (4, "other")
    assert len(all_rows(store)) == 1
    assert store.sync_schedules([changed]) == NOTHING


def test_a_removal_covers_only_the_queues_synced(store: jobq.Store) -> None:
    """A worker on queue 'other' that lacks 'a' (a 'default' schedule) must leave it be."""
    store.sync_schedules([schedule("a"), schedule("b", queue="other")])
    a, b = state(store, "a"), state(store, "b")
    a_before = row(store, a.task_id)

    before = db_now(store)
    assert store.sync_schedules([], queues=["other"]) == SyncReport([], [], ["b"])
    after = db_now(store)
    assert row(store, a.task_id) == a_before
    assert state(store, "a") == a
    gone = state(store, "b")
    assert (gone.defined, gone.enabled, gone.active, gone.status) == (
        False, True, False, Status.CANCELLED,
    )  # fmt: skip
    assert_between(row(store, b.task_id).finished_at, before, after)
    # Its rows stay, and it never runs, however late its tick.
    make_due(store, b.task_id)
    assert store.capture(10, worker_id="w1", queues="other") == []
    assert len(all_rows(store)) == 2

    assert store.sync_schedules([], queues=["other"]) == NOTHING
    assert store.sync_schedules([], queues=["elsewhere"]) == NOTHING
    assert state(store, "a").defined
    assert store.sync_schedules([], queues=None) == SyncReport([], [], ["a"])
    assert row(store, a.task_id).status is Status.CANCELLED


def test_defining_a_removed_schedule_again_wakes_it_at_its_next_tick(store: jobq.Store) -> None:
    store.sync_schedules([schedule("s", retries=2)])
    task_id = state(store, "s").task_id
    store.sync_schedules([])
    set_columns(store, task_id, run_at=PAST, retries_left=0)

    before = db_now(store)
    assert store.sync_schedules([schedule("s", retries=2)]) == SyncReport([], ["s"], [])
    after = db_now(store)
    task = row(store, task_id)
    assert (task.status, task.retries_left) == (Status.DONE, 2)
    assert_next_tick(task.run_at, MINUTELY, before, after)
    assert state(store, "s").defined
    assert store.capture(10, worker_id="w1") == []  # due at its next tick, not at once


def test_an_operator_pause_survives_every_sync(store: jobq.Store) -> None:
    store.sync_schedules([schedule("s", args={"n": 1}, retries=1)])
    task_id = state(store, "s").task_id
    store.set_schedule_enabled("s", False)
    paused = state(store, "s")
    assert (paused.enabled, paused.defined, paused.active, paused.status) == (
        False, True, False, Status.CANCELLED,
    )  # fmt: skip
    make_due(store, task_id)
    assert store.capture(10, worker_id="w1") == []

    assert store.sync_schedules([schedule("s", args={"n": 1}, retries=1)]) == NOTHING
    assert store.sync_schedules([schedule("s", args={"n": 2}, retries=1)]) == SyncReport(
        [], ["s"], []
    )
    task = row(store, task_id)
    assert (task.status, task.args) == (Status.CANCELLED, {"n": 2})
    assert not state(store, "s").enabled
    assert store.capture(10, worker_id="w1") == []

    set_columns(store, task_id, retries_left=0)
    before = db_now(store)
    store.set_schedule_enabled("s", True)
    after = db_now(store)
    task = row(store, task_id)
    assert (task.status, task.retries_left) == (Status.DONE, 1)
    assert_next_tick(task.run_at, MINUTELY, before, after)
    assert state(store, "s").active


def test_switching_a_schedule_to_what_it_is_changes_nothing(store: jobq.Store) -> None:
    store.sync_schedules([schedule("s")])
    rows = all_rows(store)
    store.set_schedule_enabled("s", True)
    assert all_rows(store) == rows
    store.set_schedule_enabled("s", False)
    rows = all_rows(store)
    store.set_schedule_enabled("s", False)
    assert all_rows(store) == rows


def test_unknown_schedule_names_raise_and_change_nothing(store: jobq.Store) -> None:
    store.sync_schedules([schedule("s")])
    before = snapshot(store)
    with pytest.raises(jobq.UnknownSchedule, match="'nope'") as caught:
        store.set_schedule_enabled("nope", False)
    assert caught.value.context["name"] == "nope"
    with pytest.raises(jobq.UnknownSchedule, match="'nope'"):
        store.run_schedule_now("nope")
    assert snapshot(store) == before


def test_concurrent_syncs_of_a_new_schedule_create_it_once(db_url: str, store: jobq.Store) -> None:
    """Two workers start at once with the same new schedule. The first holds its
    transaction open after writing the schedule row; the second syncs meanwhile and must
    end with neither a second schedule nor an orphan recurring row."""
    first, second = jobq.Store(db_url), jobq.Store(db_url)
    wrote = threading.Event()
    go_on = threading.Event()

    def hold_after_insert(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO JOBQ_SCHEDULES"):
            wrote.set()
            assert go_on.wait(30)

    event.listen(first.engine, "after_cursor_execute", hold_after_insert)
    outcomes: dict[str, Any] = {}

    def sync(label: str, own: jobq.Store) -> None:
        try:
            outcomes[label] = own.sync_schedules([schedule("s", YEARLY, args={"n": 1})])
        except Exception as error:  # the test reports it
            outcomes[label] = error

    try:
        threads = [threading.Thread(target=sync, args=("first", first))]
        threads[0].start()
        assert wrote.wait(30)
        threads.append(threading.Thread(target=sync, args=("second", second)))
        threads[1].start()
        time.sleep(0.5)  # let the second block on the first's row (or write lock)
        go_on.set()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        go_on.set()
        first.dispose()
        second.dispose()
    assert outcomes == {"first": SyncReport(["s"], [], []), "second": NOTHING}
    rows = all_rows(store)
    assert len(rows) == 1 and rows[0]["recurring"]
    assert [(r["name"], r["task_id"]) for r in schedule_rows(store)] == [("s", rows[0]["id"])]


def test_many_workers_starting_together_store_each_schedule_once(
    db_url: str, store: jobq.Store
) -> None:
    names = [f"s{i}" for i in range(5)]
    defined = [schedule(name, YEARLY) for name in names]
    stores = [jobq.Store(db_url) for _ in range(6)]
    for own in stores:
        own.schedules()  # connect before the start line
    barrier = threading.Barrier(len(stores))
    reports: list[SyncReport] = []
    errors: list[Exception] = []

    def sync(own: jobq.Store) -> None:
        barrier.wait()
        try:
            reports.append(own.sync_schedules(defined))
        except Exception as error:  # the test reports it
            errors.append(error)

    threads = [threading.Thread(target=sync, args=(own,)) for own in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for own in stores:
        own.dispose()
    assert errors == []
    assert sorted(name for report in reports for name in report.created) == names
    assert all(report.updated == report.removed == [] for report in reports)
    rows = all_rows(store)
    assert len(rows) == len(names) and all(r["recurring"] for r in rows)
    assert sorted(r["task_id"] for r in schedule_rows(store)) == sorted(r["id"] for r in rows)


# --- the ends of a run -----------------------------------------------------------------


def test_a_done_run_returns_the_row_to_its_next_tick(store: jobq.Store) -> None:
    store.sync_schedules([schedule("s", retries=2, args={"n": 1})])
    tick = this_minute(store)
    run = start_run(store, "s", tick)
    assert (run.run_at, run.attempt, run.retries_left, run.args) == (tick, 1, 2, {"n": 1})
    running = state(store, "s")
    assert (running.status, running.last_run, running.last_status) == (
        Status.IN_PROGRESS, run.started_at, None,
    )  # fmt: skip

    before = db_now(store)
    assert store.set_status(run.id, run.attempt, Status.DONE, result={"swept": 3})
    after = db_now(store)
    task = row(store, run.id)
    assert (task.status, task.attempt, task.retries_left) == (Status.DONE, 1, 2)
    assert (task.result, task.error, task.locked_by, task.locked_until) == (
        {"swept": 3}, None, None, None,
    )  # fmt: skip
    assert task.started_at == run.started_at
    assert_between(task.finished_at, before, after)
    assert task.run_at > tick and task.run_at > before
    assert_next_tick(task.run_at, MINUTELY, before, after)
    assert state(store, "s") == ScheduleState(
        name="s", task="t", queue="default", cron=MINUTELY, timezone="UTC", enabled=True,
        defined=True, status=Status.DONE, next_run=task.run_at, last_run=run.started_at,
        last_status="done", task_id=run.id,
    )  # fmt: skip
    assert store.capture(10, worker_id="w2") == []


def test_the_next_tick_is_after_the_tick_run_even_when_the_clock_is_behind_it(
    store: jobq.Store,
) -> None:
    """A database clock stepped back below the tick must not run the same tick twice."""
    store.sync_schedules([schedule("s")])
    run = start_run(store, "s")
    ahead = this_minute(store) + timedelta(hours=1)
    set_columns(store, run.id, run_at=ahead)  # as if the run's tick were an hour from now
    assert store.set_status(run.id, run.attempt, Status.DONE)
    assert row(store, run.id).run_at == ahead + timedelta(minutes=1)


def test_a_terminal_failure_ends_the_tick(store: jobq.Store) -> None:
    store.sync_schedules([schedule("s", retries=0)])
    run = start_run(store, "s")
    before = db_now(store)
    assert store.set_status(run.id, run.attempt, Status.FAILED, error="boom")
    after = db_now(store)
    task = row(store, run.id)
    assert (task.status, task.attempt, task.retries_left, task.error, task.result) == (
        Status.DONE, 1, 0, "boom", None,
    )  # fmt: skip
    assert (task.locked_by, task.locked_until) == (None, None)
    assert_between(task.finished_at, before, after)
    assert_next_tick(task.run_at, MINUTELY, before, after)
    assert (state(store, "s").last_status, state(store, "s").status) == ("failed", Status.DONE)
    assert store.capture(10, worker_id="w1") == []


def test_a_failed_tick_does_not_keep_the_result_of_the_tick_before(store: jobq.Store) -> None:
    """The row shows its last run: a failure after a success must not show the old result
    next to the new error."""
    store.sync_schedules([schedule("s")])
    run = start_run(store, "s", PAST)
    assert store.set_status(run.id, run.attempt, Status.DONE, result={"tick": 1})
    run = start_run(store, "s")
    assert store.set_status(run.id, run.attempt, Status.FAILED, error="boom")
    task = row(store, run.id)
    assert (task.error, state(store, "s").last_status) == ("boom", "failed")
    assert task.result is None, f"the failed tick shows the result of the tick before: {task}"


def test_a_cancelled_run_ends_the_tick(store: jobq.Store) -> None:
    store.sync_schedules([schedule("s", retries=3)])
    run = start_run(store, "s")
    before = db_now(store)
    assert store.set_status(run.id, run.attempt, Status.CANCELLED, error="not today")
    after = db_now(store)
    task = row(store, run.id)
    assert (task.status, task.retries_left, task.error, task.result) == (
        Status.DONE, 3, "not today", None,
    )  # fmt: skip
    assert_between(task.finished_at, before, after)
    assert_next_tick(task.run_at, MINUTELY, before, after)
    assert state(store, "s").last_status == "cancelled"


def test_a_failure_with_retries_left_is_a_normal_retry(store: jobq.Store) -> None:
    """It waits its delay as failed (the tick kept), each capture spends a retry, and the
    failure with none left ends the tick with the retries renewed."""
    store.sync_schedules([schedule("s", retries=2)])
    run = start_run(store, "s")
    before = db_now(store)
    assert store.set_status(run.id, run.attempt, Status.FAILED, error="boom", retry_delay=30)
    after = db_now(store)
    task = row(store, run.id)
    assert (task.status, task.attempt, task.retries_left, task.error) == (
        Status.FAILED, 1, 2, "boom",
    )  # fmt: skip
    assert (task.finished_at, task.locked_by, task.locked_until) == (None, None, None)
    assert_between(task.run_at, before, after, plus=30)
    listed = state(store, "s")
    assert (listed.status, listed.next_run, listed.last_status) == (
        Status.FAILED, task.run_at, "failed",
    )  # fmt: skip
    assert store.capture(10, worker_id="w1") == []  # not yet

    make_due(store, run.id)  # its 30 seconds pass
    (second,) = store.capture(10, worker_id="w1")
    assert (second.id, second.attempt, second.retries_left) == (run.id, 2, 1)
    before = db_now(store)
    assert store.set_status(second.id, second.attempt, Status.FAILED, error="again")
    after = db_now(store)
    task = row(store, run.id)
    assert (task.status, task.retries_left, task.error) == (Status.FAILED, 1, "again")
    assert task.run_at > before  # the Store's backoff

    make_due(store, run.id)
    (third,) = store.capture(10, worker_id="w1")
    assert (third.attempt, third.retries_left) == (3, 0)
    before = db_now(store)
    assert store.set_status(third.id, third.attempt, Status.FAILED, error="last")
    after = db_now(store)
    task = row(store, run.id)
    assert (task.status, task.attempt, task.retries_left, task.error) == (
        Status.DONE, 3, 2, "last",
    )  # fmt: skip
    assert_between(task.finished_at, before, after)
    assert_next_tick(task.run_at, MINUTELY, before, after)
    assert state(store, "s").last_status == "failed"


def test_a_retry_that_succeeds_ends_the_tick(store: jobq.Store) -> None:
    store.sync_schedules([schedule("s", retries=1)])
    run = start_run(store, "s")
    assert store.set_status(run.id, run.attempt, Status.FAILED, error="flaky", retry_delay=0)
    (retry,) = store.capture(10, worker_id="w1")
    assert (retry.id, retry.attempt, retry.retries_left) == (run.id, 2, 0)
    before = db_now(store)
    assert store.set_status(retry.id, retry.attempt, Status.DONE, result="ok")
    after = db_now(store)
    task = row(store, run.id)
    assert (task.status, task.retries_left, task.error, task.result) == (
        Status.DONE, 1, None, "ok",
    )  # fmt: skip
    assert_next_tick(task.run_at, MINUTELY, before, after)
    assert state(store, "s").last_status == "done"


def test_a_release_keeps_the_tick_and_spends_no_retry(store: jobq.Store) -> None:
    store.sync_schedules([schedule("s", retries=1)])
    run = start_run(store, "s")
    before = db_now(store)
    assert store.set_status(run.id, run.attempt, Status.QUEUED, retry_delay=0)
    after = db_now(store)
    task = row(store, run.id)
    assert (task.status, task.attempt, task.retries_left, task.error, task.locked_by) == (
        Status.QUEUED, 1, 1, None, None,
    )  # fmt: skip
    assert_between(task.run_at, before, after)
    assert state(store, "s").last_status is None  # a release is no end of the run
    (again,) = store.capture(10, worker_id="w2")
    assert (again.id, again.attempt, again.retries_left) == (run.id, 2, 1)
    assert store.set_status(again.id, again.attempt, Status.DONE)
    assert row(store, run.id).status is Status.DONE


def test_an_explicit_run_at_places_the_next_run(store: jobq.Store) -> None:
    store.sync_schedules([schedule("s", retries=1)])
    later = datetime(2035, 6, 7, 8, 9, tzinfo=UTC)
    run = start_run(store, "s")
    assert store.set_status(run.id, run.attempt, Status.FAILED, error="x", run_at=later)
    assert (row(store, run.id).status, row(store, run.id).run_at) == (Status.FAILED, later)
    make_due(store, run.id)
    (retry,) = store.capture(10, worker_id="w1")
    assert store.set_status(retry.id, retry.attempt, Status.DONE, run_at=later)
    task = row(store, run.id)
    assert (task.status, task.run_at, task.retries_left) == (Status.DONE, later, 1)


def test_a_stale_end_of_a_recurring_run_changes_nothing(store: jobq.Store) -> None:
    store.sync_schedules([schedule("s", retries=1)])
    zombie = start_run(store, "s")
    expire_lease(store, zombie.id)
    assert store.capture(10, worker_id="w2") == []  # a lost recurring run is rescue's
    assert store.rescue() == 1  # its lease expired: a retry, due at once
    (current,) = store.capture(10, worker_id="w2")
    assert (current.id, current.attempt, current.retries_left) == (zombie.id, 2, 0)

    before = snapshot(store)
    assert not store.set_status(zombie.id, zombie.attempt, Status.DONE, result="late")
    assert not store.set_status(zombie.id, zombie.attempt, Status.FAILED, error="late")
    assert store.set_statuses([Completion(zombie.id, zombie.attempt, Status.DONE)]) == 0
    assert store.set_statuses([Completion(zombie.id, 7, Status.CANCELLED)]) == 0
    assert store.complete_and_capture(
        [Completion(zombie.id, zombie.attempt, Status.QUEUED)], 10, worker_id="w1"
    ) == (0, [])
    assert snapshot(store) == before

    assert store.set_status(current.id, current.attempt, Status.DONE)
    after_end = snapshot(store)
    assert not store.set_status(current.id, current.attempt, Status.DONE)  # ended already
    assert not store.set_status(current.id, current.attempt + 1, Status.DONE)  # never ran
    assert snapshot(store) == after_end


def test_set_statuses_records_plain_and_recurring_ends_together(store: jobq.Store) -> None:
    store.sync_schedules([schedule("a", retries=0), schedule("b", retries=2)])
    a_id, b_id = state(store, "a").task_id, state(store, "b").task_id
    make_due(store, a_id)
    make_due(store, b_id)
    plain_done = store.enqueue("p", {}, run_at=PAST)
    plain_failed = store.enqueue("p", {}, run_at=PAST, retries=0)
    runs = {t.id: t for t in store.capture(10, worker_id="w1")}
    assert sorted(runs) == sorted([a_id, b_id, plain_done, plain_failed])

    before = db_now(store)
    applied = store.set_statuses(
        [
            Completion(plain_done, 1, Status.DONE, result=1),
            Completion(a_id, 1, Status.DONE, result="a"),
            Completion(b_id, 1, Status.FAILED, error="b", retry_delay=60),
            Completion(plain_failed, 1, Status.FAILED, error="p"),
            Completion(a_id, 1, Status.CANCELLED),  # a second end of a's run: left out
            Completion(plain_done, 5, Status.DONE),  # stale
        ]
    )
    after = db_now(store)
    assert applied == 4
    assert (row(store, plain_done).status, row(store, plain_done).result) == (Status.DONE, 1)
    assert (row(store, plain_failed).status, row(store, plain_failed).error) == (
        Status.FAILED, "p",
    )  # fmt: skip
    a = row(store, a_id)
    assert (a.status, a.result, a.retries_left, a.locked_by) == (Status.DONE, "a", 0, None)
    assert_next_tick(a.run_at, MINUTELY, before, after)
    b = row(store, b_id)
    assert (b.status, b.error, b.retries_left, b.finished_at) == (Status.FAILED, "b", 2, None)
    assert_between(b.run_at, before, after, plus=60)
    assert (state(store, "a").last_status, state(store, "b").last_status) == ("done", "failed")
    assert not any(r["recurring"] for r in all_rows(store) if r["id"] in (plain_done, plain_failed))


def test_complete_and_capture_records_recurring_ends_and_captures(store: jobq.Store) -> None:
    store.sync_schedules([schedule("a"), schedule("b", retries=1)])
    a_id, b_id = state(store, "a").task_id, state(store, "b").task_id
    make_due(store, a_id)
    make_due(store, b_id)
    plain = store.enqueue("p", {}, run_at=PAST)
    assert len(store.capture(10, worker_id="w1")) == 3
    waiting = store.enqueue("p", {}, run_at=PAST)

    before = db_now(store)
    applied, captured = store.complete_and_capture(
        [
            Completion(a_id, 1, Status.DONE, result="a"),
            Completion(plain, 1, Status.DONE),
            Completion(b_id, 1, Status.FAILED, error="b", retry_delay=3600),
            Completion(b_id, 9, Status.DONE),  # stale
        ],
        10,
        worker_id="w1",
    )
    after = db_now(store)
    assert applied == 3
    assert [t.id for t in captured] == [waiting]
    a = row(store, a_id)
    assert (a.status, a.result, a.attempt) == (Status.DONE, "a", 1)
    assert_next_tick(a.run_at, MINUTELY, before, after)
    b = row(store, b_id)
    assert (b.status, b.error, b.retries_left) == (Status.FAILED, "b", 1)
    assert_between(b.run_at, before, after, plus=3600)
    assert row(store, plain).status is Status.DONE
    assert (state(store, "a").last_status, state(store, "b").last_status) == ("done", "failed")


# --- rescue and missed ticks -----------------------------------------------------------


def test_rescue_moves_an_expired_run_without_retries_to_its_next_tick(store: jobq.Store) -> None:
    store.sync_schedules([schedule("s", retries=0)])
    run = start_run(store, "s")
    assert store.rescue() == 0  # its lease holds
    assert row(store, run.id).status is Status.IN_PROGRESS
    expire_lease(store, run.id)
    assert store.capture(10, worker_id="w2") == []  # no retry left to take it with

    before = db_now(store)
    assert store.rescue() == 1
    after = db_now(store)
    task = row(store, run.id)
    assert (task.status, task.attempt, task.retries_left, task.error) == (
        Status.DONE, 1, 0, "lease expired",
    )  # fmt: skip
    assert (task.locked_by, task.locked_until) == (None, None)
    assert_between(task.finished_at, before, after)
    assert_next_tick(task.run_at, MINUTELY, before, after)
    assert state(store, "s").last_status == "failed"
    assert store.rescue() == 0
    assert not store.set_status(run.id, run.attempt, Status.DONE)  # the lost run's end is stale
    assert row(store, run.id) == task


def test_rescue_turns_an_expired_run_with_retries_into_a_retry(store: jobq.Store) -> None:
    store.sync_schedules([schedule("s", retries=2)])
    run = start_run(store, "s")
    expire_lease(store, run.id)
    before = db_now(store)
    assert store.rescue() == 1
    after = db_now(store)
    task = row(store, run.id)
    assert (task.status, task.retries_left, task.error, task.finished_at) == (
        Status.FAILED, 2, "lease expired", None,
    )  # fmt: skip
    assert_between(task.run_at, before, after)
    assert state(store, "s").last_status == "failed"
    (retry,) = store.capture(10, worker_id="w2")
    assert (retry.id, retry.attempt, retry.retries_left) == (run.id, 2, 1)


def test_missed_ticks_are_one_run_and_the_next_tick_is_after_now(store: jobq.Store) -> None:
    store.sync_schedules([schedule("s")])
    task_id = state(store, "s").task_id
    make_due(store, task_id)  # every minute since 2020 missed
    (run,) = store.capture(10, worker_id="w1")
    assert (run.id, run.run_at) == (task_id, PAST)
    assert store.capture(10, worker_id="w2") == []
    before = db_now(store)
    assert store.set_status(run.id, run.attempt, Status.DONE)
    after = db_now(store)
    assert_next_tick(row(store, task_id).run_at, MINUTELY, before, after)
    assert store.capture(10, worker_id="w2") == []


def test_each_tick_runs_once_however_many_workers_capture(db_url: str, store: jobq.Store) -> None:
    """Four workers, each with its own Store, capture for three seconds a schedule that
    ticks every second, ending every run at once: no tick may run twice."""
    store.sync_schedules([schedule("s", "* * * * * *")])
    task_id = state(store, "s").task_id
    runs: list[tuple[str, datetime]] = []
    problems: list[object] = []
    guard = threading.Lock()
    stop_at = time.monotonic() + 3.0

    def work(worker_id: str) -> None:
        own = jobq.Store(db_url)
        try:
            while time.monotonic() < stop_at:
                for task in own.capture(1, worker_id=worker_id):
                    with guard:
                        runs.append((worker_id, task.run_at))
                    if not own.set_status(task.id, task.attempt, Status.DONE):
                        problems.append(("end not applied", worker_id, task.attempt))
                time.sleep(0.002)
        except Exception as error:  # the test reports it
            problems.append(error)
        finally:
            own.dispose()

    threads = [threading.Thread(target=work, args=(f"w{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert problems == []
    per_tick = Counter(tick for _, tick in runs)
    assert [tick for tick, count in per_tick.items() if count > 1] == []
    assert 2 <= len(per_tick) <= 4, per_tick
    assert all(tick.microsecond == 0 for tick in per_tick)
    assert sorted(per_tick) == [tick for _, tick in runs]  # in tick order
    task = row(store, task_id)
    assert (task.status, task.attempt) == (Status.DONE, len(runs))
    assert state(store, "s").last_status == "done"


# --- pauses ----------------------------------------------------------------------------


def pause_by_disabling(store: jobq.Store) -> None:
    store.set_schedule_enabled("s", False)


def pause_by_removing(store: jobq.Store) -> None:
    assert store.sync_schedules([], queues=["default"]) == SyncReport([], [], ["s"])


def resume_by_enabling(store: jobq.Store) -> None:
    store.set_schedule_enabled("s", True)


def resume_by_defining(store: jobq.Store) -> None:
    assert store.sync_schedules([schedule("s", retries=1)]) == SyncReport([], ["s"], [])


PAUSES = pytest.mark.parametrize(
    ("pause", "resume"),
    [(pause_by_disabling, resume_by_enabling), (pause_by_removing, resume_by_defining)],
    ids=["disabled", "removed"],
)
Switch = Callable[[jobq.Store], None]


@PAUSES
def test_a_run_under_way_finishes_and_its_end_leaves_the_row_cancelled(
    store: jobq.Store, pause: Switch, resume: Switch
) -> None:
    store.sync_schedules([schedule("s", retries=1)])
    run = start_run(store, "s")
    pause(store)
    listed = state(store, "s")
    assert (listed.status, listed.active) == (Status.IN_PROGRESS, False)
    assert row(store, run.id).locked_by == "w1"  # a pause does not touch a running row

    before = db_now(store)
    assert store.set_status(run.id, run.attempt, Status.DONE, result="last")
    after = db_now(store)
    task = row(store, run.id)
    assert (task.status, task.result, task.attempt, task.retries_left, task.locked_by) == (
        Status.CANCELLED, "last", 1, 1, None,
    )  # fmt: skip
    assert_between(task.finished_at, before, after)
    assert state(store, "s").last_status == "done"
    make_due(store, run.id)
    assert store.capture(10, worker_id="w1") == []

    before = db_now(store)
    resume(store)
    after = db_now(store)
    task = row(store, run.id)
    assert (task.status, task.retries_left) == (Status.DONE, 1)
    assert_next_tick(task.run_at, MINUTELY, before, after)
    assert store.capture(10, worker_id="w1") == []


@PAUSES
def test_a_paused_schedule_with_a_retry_waiting_rests_and_resumes_afresh(
    store: jobq.Store, pause: Switch, resume: Switch
) -> None:
    store.sync_schedules([schedule("s", retries=1)])
    run = start_run(store, "s")
    assert store.set_status(run.id, run.attempt, Status.FAILED, error="x", retry_delay=0)
    pause(store)
    assert row(store, run.id).status is Status.CANCELLED
    assert store.capture(10, worker_id="w1") == []
    before = db_now(store)
    resume(store)
    after = db_now(store)
    task = row(store, run.id)
    assert (task.status, task.retries_left) == (Status.DONE, 1)
    assert_next_tick(task.run_at, MINUTELY, before, after)


@PAUSES
@pytest.mark.parametrize(
    "end",
    [
        Completion(0, 0, Status.QUEUED, retry_delay=0),
        Completion(0, 0, Status.FAILED, error="x", retry_delay=0),
    ],
    ids=["released", "failed-with-retries-left"],
)
def test_a_paused_schedule_never_runs_again_whatever_the_end_of_its_last_run(
    store: jobq.Store, pause: Switch, resume: Switch, end: Completion
) -> None:
    """Paused while a run is under way, the run ends as a release (a worker stopping) or a
    failure that would be retried: the paused row must rest as cancelled, not run again."""
    store.sync_schedules([schedule("s", retries=1)])
    run = start_run(store, "s")
    pause(store)
    assert store.set_status(
        run.id, run.attempt, end.status, error=end.error, retry_delay=end.retry_delay
    )
    captured = store.capture(10, worker_id="w2")
    assert captured == [], f"a paused schedule ran again: {captured}"
    assert row(store, run.id).status is Status.CANCELLED


def test_a_new_definition_while_running_applies_when_the_run_ends(store: jobq.Store) -> None:
    store.sync_schedules([schedule("s", retries=0)])
    run = start_run(store, "s")
    assert store.sync_schedules([schedule("s", YEARLY, retries=2)]) == SyncReport([], ["s"], [])
    task = row(store, run.id)
    assert (task.status, task.run_at, task.attempt) == (Status.IN_PROGRESS, run.run_at, 1)
    before = db_now(store)
    assert store.set_status(run.id, run.attempt, Status.DONE)
    after = db_now(store)
    task = row(store, run.id)
    assert (task.status, task.retries_left) == (Status.DONE, 2)
    assert_next_tick(task.run_at, YEARLY, before, after)


def test_a_lock_key_changed_while_running_applies_when_the_run_ends(store: jobq.Store) -> None:
    """The new kwargs land at once; the row keeps its old lock key while it runs (another
    row may hold the new one), but must take the new key once the run is over, not run
    the next ticks' new arguments under the old key."""
    store.sync_schedules([schedule("s", args={"account": "a"}, lock_key="ledger:a")])
    run = start_run(store, "s")
    changed = schedule("s", args={"account": "b"}, lock_key="ledger:b")
    assert store.sync_schedules([changed]) == SyncReport([], ["s"], [])
    task = row(store, run.id)
    assert (task.args, task.lock_key, task.status) == (
        {"account": "b"}, "ledger:a", Status.IN_PROGRESS,
    )  # fmt: skip
    assert store.set_status(run.id, run.attempt, Status.DONE)
    task = row(store, run.id)
    assert task.status is Status.DONE
    assert task.lock_key == "ledger:b", "the synced lock key never reached the row"


def test_a_schedule_whose_last_tick_has_run_rests_cancelled(store: jobq.Store) -> None:
    """A year-limited expression with one tick left: once that tick has run, no next tick
    exists, and the row rests (cancelled) instead of failing the end of the run."""
    year = db_now(store).year + 1
    once = f"0 0 1 1 * 0 {year}"
    store.sync_schedules([schedule("s", once, retries=1)])
    last_tick = datetime(year, 1, 1, tzinfo=UTC)
    assert row(store, state(store, "s").task_id).run_at == last_tick
    run = start_run(store, "s", PAST)
    set_columns(store, run.id, run_at=last_tick)  # as if it ran for its last tick
    before = db_now(store)
    assert store.set_status(run.id, run.attempt, Status.DONE, result="last")
    after = db_now(store)
    task = row(store, run.id)
    assert (task.status, task.result, task.retries_left, task.locked_by) == (
        Status.CANCELLED, "last", 1, None,
    )  # fmt: skip
    assert_between(task.finished_at, before, after)
    listed = state(store, "s")
    assert (listed.enabled, listed.defined, listed.last_status) == (True, True, "done")
    make_due(store, run.id)
    assert store.capture(10, worker_id="w1") == []


def test_a_stored_expression_that_no_longer_reads_rests_cancelled(store: jobq.Store) -> None:
    """A schedules row whose expression this version cannot read (written by another, or
    by hand) must not fail the end of a run: the row rests until a sync redefines it."""
    store.sync_schedules([schedule("s")])
    run = start_run(store, "s")
    with store.engine.begin() as conn:
        conn.execute(sa.update(schedules).values(cron="0 0 30 2 *"))
    assert store.set_status(run.id, run.attempt, Status.FAILED, error="x")
    task = row(store, run.id)
    assert (task.status, task.error) == (Status.CANCELLED, "x")
    assert state(store, "s").last_status == "failed"
    make_due(store, run.id)
    assert store.capture(10, worker_id="w1") == []

    before = db_now(store)
    assert store.sync_schedules([schedule("s")]) == SyncReport([], ["s"], [])
    after = db_now(store)
    task = row(store, run.id)
    assert task.status is Status.DONE
    assert_next_tick(task.run_at, MINUTELY, before, after)
    assert state(store, "s").cron == MINUTELY


# --- run now, prune --------------------------------------------------------------------


def test_run_now_enqueues_a_separate_copy_and_leaves_the_schedule_alone(
    store: jobq.Store,
) -> None:
    store.sync_schedules(
        [schedule("s", YEARLY, task="report", queue="reports", args={"day": "mon"}, retries=2,
                  priority=4, lease=12.0, timeout=3.0, lock_key="report:mon")]
    )  # fmt: skip
    listed = state(store, "s")
    before_rows = snapshot(store)
    before = db_now(store)
    copy_id = store.run_schedule_now("s")
    after = db_now(store)
    assert copy_id != listed.task_id
    copy = row(store, copy_id)
    assert (copy.name, copy.queue_id, copy.args, copy.status, copy.recurring) == (
        "report", "reports", {"day": "mon"}, Status.QUEUED, False,
    )  # fmt: skip
    assert (copy.priority, copy.lease, copy.timeout, copy.lock_key, copy.unique_key) == (
        4, 12.0, 3.0, "report:mon", None,
    )  # fmt: skip
    assert (copy.attempt, copy.retries_left, copy.result, copy.error) == (0, 2, None, None)
    assert_between(copy.run_at, before, after)
    assert_between(copy.created_at, before, after)
    rows, schedule_table = snapshot(store)
    assert [r for r in rows if r["id"] != copy_id] == before_rows[0]
    assert schedule_table == before_rows[1]
    assert state(store, "s") == listed

    (run,) = store.capture(10, worker_id="w1", queues="reports")
    assert run.id == copy_id
    assert store.set_status(run.id, run.attempt, Status.DONE)
    assert state(store, "s") == listed
    assert row(store, listed.task_id).status is Status.DONE


def test_prune_never_deletes_a_schedules_row(store: jobq.Store) -> None:
    store.sync_schedules([schedule("s")])
    run = start_run(store, "s")
    assert store.set_status(run.id, run.attempt, Status.DONE)
    plain = store.enqueue("p", {})
    (plain_run,) = store.capture(10, worker_id="w1")
    assert store.set_status(plain_run.id, plain_run.attempt, Status.DONE)
    time.sleep(0.01)
    assert store.prune(0) == 1
    assert store.get(plain) is None
    assert row(store, run.id).status is Status.DONE
    assert [s.task_id for s in store.schedules()] == [run.id]


# SQLite runs one writer at a time: there is nothing to interleave.
@pytest.mark.parametrize("backend", ["postgresql"], scope="module")
def test_a_redefinition_racing_the_end_of_a_run_does_not_deadlock(
    db_url: str, store: jobq.Store
) -> None:
    """The end of a run writes the task row, then the schedule's; a sync changing the
    schedule meanwhile must take them in the same order, or each waits for the other.

    A third connection holds the task row so that the end queues for it first, and the
    sync (which would lock the schedule row first) queues behind it.
    """
    store.sync_schedules([schedule("s", retries=0)])
    run = start_run(store, "s")
    errors: list[BaseException] = []
    ended: list[bool] = []

    def end() -> None:
        try:
            ended.append(store.set_status(run.id, run.attempt, Status.DONE))
        except BaseException as error:  # reported below
            errors.append(error)

    def redefine() -> None:
        other = jobq.Store(db_url)
        try:
            other.sync_schedules([schedule("s", YEARLY, retries=0)])
        except BaseException as error:  # reported below
            errors.append(error)
        finally:
            other.dispose()

    holder = sa.create_engine(db_url)
    with holder.connect() as conn:
        conn.execute(
            sa.select(tasks_table.c.id).where(tasks_table.c.id == run.id).with_for_update()
        )
        ending = threading.Thread(target=end)
        ending.start()
        time.sleep(0.5)  # the end now waits for the task row
        syncing = threading.Thread(target=redefine)
        syncing.start()
        time.sleep(0.5)  # the sync now waits too
        conn.rollback()
    ending.join(timeout=30)
    syncing.join(timeout=30)
    holder.dispose()
    assert errors == [] and ended == [True]
    task = row(store, run.id)
    assert task.status is Status.DONE
    listed = state(store, "s")
    assert (listed.cron, listed.last_status) == (YEARLY, "done")
    assert listed.next_run == Cron(YEARLY).next_after(db_now(store))
