"""The runs of each cron schedule (jobq_schedule_runs), on every database.

Every end of a run of a schedule's recurring row that applies adds one row, in the
transaction of the end: done, failed, timed out, lease expired (rescue), cancelled,
released. A stale end adds nothing, nor does the end of any plain task; past the newest
KEPT_RUNS of a schedule the oldest go. ``Store.schedule_runs`` reads them newest first.
"""

from __future__ import annotations

from datetime import datetime

import pytest
import sqlalchemy as sa

import jobq
from jobq import ScheduleRun, Status
from jobq.cron.runs import KEPT_RUNS
from jobq.db.tasks import Completion
from jobq.dialects.schema import schedule_runs
from tests import shared_database
from tests.dialects.test_periodic import (
    PAST,
    YEARLY,
    assert_between,
    db_now,
    make_due,
    row,
    schedule,
    start_run,
    state,
)
from tests.helpers import all_rows, expire_lease

#: One migrated database per backend for the module, emptied before each test.
backend, shared_url, db_url = shared_database.FIXTURES


def stored_runs(store: jobq.Store) -> list[dict[str, object]]:
    """Every jobq_schedule_runs row, by id: what the API might not show."""
    with store.engine.connect() as conn:
        query = sa.select(schedule_runs).order_by(schedule_runs.c.id)
        return [dict(r._mapping) for r in conn.execute(query)]


def finished(store: jobq.Store, task_id: int) -> datetime:
    """The finished_at that the end of a run stored on the schedule's row."""
    at = row(store, task_id).finished_at
    assert at is not None
    return at


def only_run(store: jobq.Store, name: str) -> ScheduleRun:
    (run,) = store.schedule_runs(name)
    return run


# --- each kind of end ---------------------------------------------------------------------


def test_a_done_run_is_recorded_with_its_start_end_and_attempt(store: jobq.Store) -> None:
    store.sync_schedules([schedule("s", retries=2)])
    assert store.schedule_runs("s") == []  # no run yet
    run = start_run(store, "s")
    assert store.schedule_runs("s") == []  # a run under way is not in the history yet
    assert store.set_status(run.id, run.attempt, Status.DONE, result={"swept": 3})
    assert run.started_at is not None
    assert store.schedule_runs("s") == [
        ScheduleRun(
            schedule="s", task_id=run.id, attempt=1, status="done", started_at=run.started_at,
            finished_at=finished(store, run.id), error=None,
        )
    ]  # fmt: skip


def test_a_terminal_failure_is_recorded_failed_with_its_error(store: jobq.Store) -> None:
    store.sync_schedules([schedule("s", retries=0)])
    run = start_run(store, "s")
    assert store.set_status(run.id, run.attempt, Status.FAILED, error="boom")
    recorded = only_run(store, "s")
    assert (recorded.status, recorded.attempt, recorded.error) == ("failed", 1, "boom")
    assert (recorded.started_at, recorded.finished_at) == (run.started_at, finished(store, run.id))


def test_a_terminal_failure_with_retries_left_ends_the_tick(store: jobq.Store) -> None:
    """A run its worker cannot run at all (a task it does not know) fails once: no retry
    of the tick, which would fail the same way; the row rests until its next tick."""
    store.sync_schedules([schedule("s", retries=3)])
    run = start_run(store, "s")
    error = "task 's' is not registered in this worker"
    end = Completion(run.id, run.attempt, Status.FAILED, error=error, terminal=True)
    assert store.set_statuses([end]) == 1
    resting = row(store, run.id)
    assert (resting.status, resting.retries_left) == (Status.DONE, 3)  # the next tick's
    assert resting.finished_at is not None and resting.run_at > run.started_at  # type: ignore[operator]
    assert store.capture(10, worker_id="w2") == []
    assert (only_run(store, "s").status, only_run(store, "s").error) == ("failed", error)
    assert state(store, "s").last_status == "failed"


def test_each_attempt_of_a_retried_tick_is_a_run_of_its_own(store: jobq.Store) -> None:
    """A failure with retries left keeps the tick (the row shows no finished_at), yet it
    is a run: each attempt is recorded, with its own start and its own end."""
    store.sync_schedules([schedule("s", retries=2)])
    first = start_run(store, "s")
    before = db_now(store)
    assert store.set_status(first.id, first.attempt, Status.FAILED, error="flaky", retry_delay=0)
    after = db_now(store)
    assert row(store, first.id).finished_at is None
    (failed,) = store.schedule_runs("s")
    assert (failed.status, failed.attempt, failed.error) == ("failed", 1, "flaky")
    assert failed.started_at == first.started_at
    assert_between(failed.finished_at, before, after)

    (second,) = store.capture(10, worker_id="w2")
    assert (second.id, second.attempt) == (first.id, 2)
    assert store.set_status(second.id, second.attempt, Status.DONE)
    done, again = store.schedule_runs("s")  # newest first
    assert again == failed
    assert (done.status, done.attempt, done.error, done.task_id) == ("done", 2, None, first.id)
    assert done.started_at == second.started_at and done.started_at >= failed.finished_at
    assert done.finished_at == finished(store, first.id)


@pytest.mark.parametrize("retries", [0, 1])
def test_a_run_past_its_timeout_is_recorded_timed_out(store: jobq.Store, retries: int) -> None:
    """The error a worker records for a run past its timeout ("timed out after N s") makes
    the run timed out, whether the tick is retried or over."""
    store.sync_schedules([schedule("s", retries=retries, timeout=0.5)])
    run = start_run(store, "s")
    assert store.set_status(run.id, run.attempt, Status.FAILED, error="timed out after 0.5 s")
    recorded = only_run(store, "s")
    assert (recorded.status, recorded.attempt, recorded.error) == (
        "timed out", 1, "timed out after 0.5 s",
    )  # fmt: skip
    assert recorded.started_at == run.started_at


@pytest.mark.parametrize("retries", [0, 2])
def test_a_run_whose_lease_expired_is_recorded_by_rescue(store: jobq.Store, retries: int) -> None:
    store.sync_schedules([schedule("s", retries=retries)])
    run = start_run(store, "s")
    assert store.rescue() == 0  # its lease holds: nothing to record
    assert store.schedule_runs("s") == []
    expire_lease(store, run.id)
    before = db_now(store)
    assert store.rescue() == 1
    after = db_now(store)
    recorded = only_run(store, "s")
    assert (recorded.status, recorded.attempt, recorded.error) == (
        "lease expired", 1, "lease expired",
    )  # fmt: skip
    assert recorded.started_at == run.started_at
    assert_between(recorded.finished_at, before, after)
    assert store.rescue() == 0
    assert len(store.schedule_runs("s")) == 1
    # The lost run's own end, should its worker come back, is stale: nothing more.
    assert not store.set_status(run.id, run.attempt, Status.DONE)
    assert store.schedule_runs("s") == [recorded]


def test_a_cancelled_run_is_recorded_cancelled(store: jobq.Store) -> None:
    store.sync_schedules([schedule("s", retries=3)])
    run = start_run(store, "s")
    assert store.set_status(run.id, run.attempt, Status.CANCELLED, error="not today")
    recorded = only_run(store, "s")
    assert (recorded.status, recorded.attempt, recorded.error) == ("cancelled", 1, "not today")
    assert recorded.finished_at == finished(store, run.id)


def test_a_released_run_is_recorded_released_and_its_rerun_too(store: jobq.Store) -> None:
    """A release (a stopping worker puts the run back) is recorded, though the tick is
    kept and the schedule's last status does not change."""
    store.sync_schedules([schedule("s", retries=1)])
    run = start_run(store, "s")
    before = db_now(store)
    assert store.set_status(run.id, run.attempt, Status.QUEUED, retry_delay=0)
    after = db_now(store)
    released = only_run(store, "s")
    assert (released.status, released.attempt, released.error) == ("released", 1, None)
    assert released.started_at == run.started_at
    assert_between(released.finished_at, before, after)
    assert state(store, "s").last_status is None

    (again,) = store.capture(10, worker_id="w2")
    assert store.set_status(again.id, again.attempt, Status.DONE)
    assert [(r.status, r.attempt) for r in store.schedule_runs("s")] == [
        ("done", 2), ("released", 1),
    ]  # fmt: skip


def test_a_done_run_and_a_release_keep_no_error_given_with_them(store: jobq.Store) -> None:
    """As the row: a done run clears the error, and a release stores none of its own."""
    store.sync_schedules([schedule("s", retries=1)])
    run = start_run(store, "s")
    assert store.set_status(run.id, run.attempt, Status.FAILED, error="first", retry_delay=0)
    (again,) = store.capture(10, worker_id="w1")
    assert store.set_status(again.id, again.attempt, Status.QUEUED, error="stopping")
    assert row(store, run.id).error == "first"  # the release left the row's error alone
    (last,) = store.capture(10, worker_id="w1")
    assert store.set_status(last.id, last.attempt, Status.DONE, error="ignored")
    assert row(store, run.id).error is None
    assert [(r.status, r.error) for r in store.schedule_runs("s")] == [
        ("done", None), ("released", None), ("failed", "first"),
    ]  # fmt: skip


def test_an_error_is_recorded_as_the_row_stores_it(store: jobq.Store) -> None:
    """NUL and undecodable characters escaped, as on the task row."""
    store.sync_schedules([schedule("s")])
    run = start_run(store, "s")
    error = "Traceback (most recent call last):\nOSError: open \udcff.csv\x00"
    assert store.set_status(run.id, run.attempt, Status.FAILED, error=error)
    recorded = only_run(store, "s")
    assert recorded.error == row(store, run.id).error == (
        "Traceback (most recent call last):\nOSError: open \\udcff.csv\\x00"
    )  # fmt: skip
    assert recorded.error_summary == "OSError: open \\udcff.csv\\x00"


# --- the batch paths a worker takes -------------------------------------------------------


def test_set_statuses_records_each_schedule_run_of_the_batch(store: jobq.Store) -> None:
    store.sync_schedules([schedule("a"), schedule("b", retries=2), schedule("c")])
    ids = {name: state(store, name).task_id for name in "abc"}
    for task_id in ids.values():
        make_due(store, task_id)
    plain = store.enqueue("p", {}, run_at=PAST)
    runs = {t.id: t for t in store.capture(10, worker_id="w1")}
    assert len(runs) == 4

    applied = store.set_statuses(
        [
            Completion(ids["a"], 1, Status.DONE, result="a"),
            Completion(plain, 1, Status.DONE),
            Completion(ids["b"], 1, Status.FAILED, error="b\x00", retry_delay=60),
            Completion(ids["c"], 1, Status.QUEUED),
            Completion(ids["a"], 1, Status.CANCELLED),  # a second end of a's run: left out
            Completion(ids["c"], 9, Status.DONE),  # stale
        ]
    )
    assert applied == 4
    recorded = {name: store.schedule_runs(name) for name in "abc"}
    ends = {name: [(r.status, r.attempt, r.error) for r in rs] for name, rs in recorded.items()}
    assert ends == {
        "a": [("done", 1, None)],
        "b": [("failed", 1, "b\\x00")],
        "c": [("released", 1, None)],
    }
    for name, (run,) in recorded.items():
        assert (run.task_id, run.started_at) == (ids[name], runs[ids[name]].started_at)


def test_complete_and_capture_records_the_schedule_runs_it_ends(store: jobq.Store) -> None:
    store.sync_schedules([schedule("a"), schedule("b", retries=1)])
    a_id, b_id = state(store, "a").task_id, state(store, "b").task_id
    make_due(store, a_id)
    make_due(store, b_id)
    assert len(store.capture(10, worker_id="w1")) == 2
    waiting = store.enqueue("p", {}, run_at=PAST)
    applied, captured = store.complete_and_capture(
        [
            Completion(a_id, 1, Status.DONE, result="a"),
            Completion(b_id, 1, Status.FAILED, error="timed out after 2 s", retry_delay=3600),
            Completion(b_id, 9, Status.DONE),  # stale
        ],
        10,
        worker_id="w1",
    )
    assert applied == 2 and [t.id for t in captured] == [waiting]
    assert [(r.status, r.attempt) for r in store.schedule_runs("a")] == [("done", 1)]
    assert [(r.status, r.error) for r in store.schedule_runs("b")] == [
        ("timed out", "timed out after 2 s"),
    ]  # fmt: skip


def test_an_end_rolled_back_takes_its_run_with_it(store: jobq.Store) -> None:
    """The run is written in the end's own transaction (here, the caller's)."""
    store.sync_schedules([schedule("s")])
    run = start_run(store, "s")
    with store.engine.connect() as conn:
        transaction = conn.begin()
        assert store.set_status(run.id, run.attempt, Status.DONE, connection=conn)
        transaction.rollback()
    assert store.schedule_runs("s") == []
    assert row(store, run.id).status is Status.IN_PROGRESS
    with store.engine.begin() as conn:
        assert store.set_status(run.id, run.attempt, Status.DONE, connection=conn)
    assert [r.status for r in store.schedule_runs("s")] == ["done"]


# --- what is not recorded -----------------------------------------------------------------


def test_a_stale_end_records_nothing(store: jobq.Store) -> None:
    """The ends of a run whose lease expired and whose row was captured again, and ends of
    attempts that never ran: no run recorded, whatever the path."""
    store.sync_schedules([schedule("s", retries=1)])
    zombie = start_run(store, "s")
    expire_lease(store, zombie.id)
    assert store.rescue() == 1
    (current,) = store.capture(10, worker_id="w2")
    assert current.attempt == zombie.attempt + 1
    before = stored_runs(store)
    assert [(r["status"], r["attempt"]) for r in before] == [("lease expired", 1)]

    assert not store.set_status(zombie.id, zombie.attempt, Status.DONE, result="late")
    assert not store.set_status(zombie.id, zombie.attempt, Status.FAILED, error="late")
    assert not store.set_status(zombie.id, zombie.attempt, Status.QUEUED)
    assert store.set_statuses([Completion(zombie.id, zombie.attempt, Status.DONE)]) == 0
    assert store.set_statuses([Completion(zombie.id, 7, Status.CANCELLED)]) == 0
    assert store.complete_and_capture(
        [Completion(zombie.id, zombie.attempt, Status.QUEUED)], 10, worker_id="w1"
    ) == (0, [])
    assert stored_runs(store) == before

    assert store.set_status(current.id, current.attempt, Status.DONE)
    after_end = stored_runs(store)
    assert [(r["status"], r["attempt"]) for r in after_end] == [
        ("lease expired", 1), ("done", 2),
    ]  # fmt: skip
    assert not store.set_status(current.id, current.attempt, Status.DONE)  # ended already
    assert not store.set_status(current.id, current.attempt + 1, Status.DONE)  # never ran
    assert store.set_statuses([Completion(current.id, current.attempt, Status.FAILED)]) == 0
    assert stored_runs(store) == after_end


def test_the_ends_of_plain_tasks_record_nothing(store: jobq.Store) -> None:
    """Plain tasks (a schedule's `run now` copy among them) end every way, by every path:
    jobq_schedule_runs stays empty."""
    store.sync_schedules([schedule("s")])
    copy = store.run_schedule_now("s")
    ids = [store.enqueue("p", {"n": n}, retries=1) for n in range(6)]
    lost = store.enqueue("p", {"n": "lost"}, retries=0)
    captured = {t.id: t for t in store.capture(20, worker_id="w1")}
    assert set(captured) == {copy, *ids, lost}
    assert not any(t.recurring for t in captured.values())

    assert store.set_status(copy, 1, Status.DONE, result=1)
    assert store.set_status(ids[0], 1, Status.FAILED, error="boom")
    assert store.set_status(ids[1], 1, Status.CANCELLED)
    assert store.set_status(ids[2], 1, Status.QUEUED)
    batch = [Completion(ids[3], 1, Status.FAILED, error="x"), Completion(ids[4], 1, Status.DONE)]
    assert store.set_statuses(batch) == 2
    assert store.complete_and_capture(
        [Completion(ids[5], 1, Status.FAILED, error="timed out after 1 s")], 0, worker_id="w1"
    ) == (1, [])
    expire_lease(store, lost)
    assert store.rescue() == 1
    assert row(store, lost).error == "lease expired"
    assert stored_runs(store) == []
    assert store.schedule_runs("s") == []


# --- how many are kept, and reading them --------------------------------------------------


def test_only_the_newest_runs_of_each_schedule_are_kept(store: jobq.Store) -> None:
    """KEPT_RUNS (20) per schedule: the 25th run of one leaves its newest 20 and every run
    of another schedule."""
    assert KEPT_RUNS == 20
    # Yearly: each run is made due by hand, and neither comes due by itself mid-test (with
    # a minutely cron the other one did, once a minute turned, and a capture took both).
    store.sync_schedules([schedule("busy", YEARLY), schedule("quiet", YEARLY)])
    for n in range(3):
        run = start_run(store, "quiet", PAST)
        assert store.set_status(run.id, run.attempt, Status.FAILED, error=f"quiet {n}")
    for n in range(25):
        run = start_run(store, "busy", PAST)
        assert store.set_status(run.id, run.attempt, Status.FAILED, error=f"busy {n + 1}")
        kept = store.schedule_runs("busy")
        assert len(kept) == min(n + 1, KEPT_RUNS)
    assert [r.attempt for r in kept] == list(range(25, 5, -1))  # newest first
    assert [r.error for r in kept] == [f"busy {n}" for n in range(25, 5, -1)]
    assert [r.error for r in store.schedule_runs("quiet")] == ["quiet 2", "quiet 1", "quiet 0"]
    stored = stored_runs(store)
    assert len(stored) == KEPT_RUNS + 3
    assert sum(r["schedule"] == "busy" for r in stored) == KEPT_RUNS


def test_limit_reads_only_the_newest(store: jobq.Store) -> None:
    store.sync_schedules([schedule("s")])
    for _ in range(4):
        run = start_run(store, "s", PAST)
        assert store.set_status(run.id, run.attempt, Status.DONE)
    assert [r.attempt for r in store.schedule_runs("s")] == [4, 3, 2, 1]  # the default: 20
    assert [r.attempt for r in store.schedule_runs("s", 2)] == [4, 3]
    assert [r.attempt for r in store.schedule_runs("s", limit=1)] == [4]
    assert store.schedule_runs("s", 0) == []
    assert len(store.schedule_runs("s", 1000)) == 4


@pytest.mark.parametrize("limit", [-1, 2**31, 1.5, "3", None, True])
def test_a_bad_limit_is_refused(store: jobq.Store, limit: object) -> None:
    store.sync_schedules([schedule("s")])
    with pytest.raises(jobq.InvalidOption) as caught:
        store.schedule_runs("s", limit)  # type: ignore[arg-type]
    assert caught.value.context["option"] == "limit"


def test_the_runs_of_an_unknown_schedule_raise_unknown_schedule(store: jobq.Store) -> None:
    """A name no schedule has, be it a schedule's task's or another case of one, raises
    (a schedule without runs reads as no runs)."""
    store.sync_schedules([schedule("sweep", task="clean")])
    run = start_run(store, "sweep")
    assert store.set_status(run.id, run.attempt, Status.DONE)
    before = all_rows(store), stored_runs(store)
    for name in ["nope", "clean", "SWEEP", "sweep "]:
        with pytest.raises(jobq.UnknownSchedule) as caught:
            store.schedule_runs(name)
        assert str(caught.value) == f"No schedule named {name!r} (see `jobq cron list`)."
    assert (all_rows(store), stored_runs(store)) == before
    assert len(store.schedule_runs("sweep")) == 1
    with pytest.raises(jobq.InvalidOption):
        store.schedule_runs("")


def test_a_paused_schedule_keeps_its_runs_and_records_the_one_under_way(
    store: jobq.Store,
) -> None:
    """Disabling a schedule during a run: the run's end is recorded as any other, and the
    history stays readable while the schedule rests."""
    store.sync_schedules([schedule("s")])
    first = start_run(store, "s", PAST)
    assert store.set_status(first.id, first.attempt, Status.DONE)
    second = start_run(store, "s", PAST)
    store.set_schedule_enabled("s", False)
    assert store.set_status(second.id, second.attempt, Status.FAILED, error="late")
    assert row(store, second.id).status is Status.CANCELLED  # resting, paused
    assert [(r.status, r.attempt) for r in store.schedule_runs("s")] == [
        ("failed", 2), ("done", 1),
    ]  # fmt: skip
