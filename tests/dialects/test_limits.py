"""Per-queue limits on every database: defining them, and capture within them.

A limited queue is captured by the sql limiter, in a transaction that locks the queue's
jobq_limits row; every other capture statement leaves limited queues out. Concurrency
means at most N runs of the queue in progress with a live lease; a rate, at most N starts
(captures, retries included) in any window of its period, by the database's clock.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

import jobq
import jobq.limits.sql
from jobq import Status
from jobq.db.tasks import Completion
from jobq.dialects.schema import limit_starts, limits, tasks
from jobq.limits import Rate
from tests import limit_procs, shared_database
from tests.helpers import all_rows, expire_lease
from tests.procs import run_processes

#: One migrated database per backend for the module, emptied before each test.
backend, shared_url, db_url = shared_database.FIXTURES

# --- helpers --------------------------------------------------------------------------------------


def enqueue(store: jobq.Store, queue: str, n: int, **options: Any) -> list[int]:
    """``n`` tasks in ``queue``, in id order (all due now)."""
    return store.enqueue_many("t", [{"i": i} for i in range(n)], queue=queue, **options)


def capture(
    store: jobq.Store, limit: int = 10, queues: Any = None, worker: str = "w"
) -> list[jobq.Task]:
    return store.capture(limit, queues=queues, worker_id=worker, lease=600)


def by_queue(captured: list[jobq.Task]) -> Counter[str]:
    return Counter(task.queue_id for task in captured)


def finish(store: jobq.Store, captured: list[jobq.Task], status: Status = Status.DONE) -> None:
    for task in captured:
        assert store.set_status(task.id, task.attempt, status, retry_delay=0)


def limit_rows(store: jobq.Store) -> list[dict[str, Any]]:
    with store.engine.connect() as conn:
        query = sa.select(limits).order_by(limits.c.queue)
        return [dict(row._mapping) for row in conn.execute(query)]


def start_rows(store: jobq.Store, queue: str | None = None) -> list[dict[str, Any]]:
    query = sa.select(limit_starts).order_by(limit_starts.c.id)
    if queue is not None:
        query = query.where(limit_starts.c.queue == queue)
    with store.engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(query)]


def age_starts(store: jobq.Store, seconds: float, ids: list[int] | None = None) -> None:
    """Move starts (all, or those of ``ids``) ``seconds`` into the past, as if time had passed."""
    stmt = sa.update(limit_starts).values(started_at=store.dialect.now_plus(-seconds))
    if ids is not None:
        stmt = stmt.where(limit_starts.c.id.in_(ids))
    with store.engine.begin() as conn:
        conn.execute(stmt)


def in_progress(store: jobq.Store, queue: str) -> int:
    with store.engine.connect() as conn:
        query = sa.select(sa.func.count()).where(
            tasks.c.queue_id == queue, tasks.c.status == Status.IN_PROGRESS.value
        )
        return conn.execute(query).scalar_one()


@pytest.fixture
def other(db_url: str) -> Iterator[jobq.Store]:
    """A second Store on the same database: another worker, or an operator's `jobq limits`."""
    s = jobq.Store(db_url)
    yield s
    s.dispose()


@pytest.fixture
def stale_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stores trust their copy of jobq_limits for the whole test: the stale case, certainly."""
    monkeypatch.setattr(jobq.limits.sql, "LIMITS_REFRESH", 3600.0)


# --- set, replace, clear, read --------------------------------------------------------------------


def test_set_limit_stores_the_limit_and_returns_it(store: jobq.Store) -> None:
    emails = store.set_limit("emails", concurrency=3)
    assert (emails.queue, emails.concurrency, emails.rate) == ("emails", 3, None)
    assert emails.generation > 0
    api = store.set_limit("api", rate="10/2s")
    assert (api.queue, api.concurrency, api.rate) == ("api", None, Rate(10, 2.0))
    both = store.set_limit("both", concurrency=1, rate=Rate(100, 60))
    assert (both.concurrency, both.rate) == (1, Rate(100, 60.0))
    assert store.limits() == {"api": api, "both": both, "emails": emails}
    assert list(store.limits()) == ["api", "both", "emails"]  # by queue name
    assert len({emails.generation, api.generation, both.generation}) == 3
    rows = {row["queue"]: row for row in limit_rows(store)}
    assert (rows["api"]["concurrency"], rows["api"]["rate_count"]) == (None, 10)
    assert rows["api"]["rate_period"] == 2.0
    assert (rows["emails"]["rate_count"], rows["emails"]["rate_period"]) == (None, None)
    assert all(row["updated_at"] is not None for row in rows.values())


def test_a_fractional_period_is_stored_as_it_is(store: jobq.Store) -> None:
    store.set_limit("q", rate="10/0.5")
    assert store.limits()["q"].rate == Rate(10, 0.5)
    store.set_limit("q", rate="3/1h30m")
    assert store.limits()["q"].rate == Rate(3, 5400.0)


def test_set_limit_replaces_the_previous_limit_whole(store: jobq.Store) -> None:
    first = store.set_limit("q", concurrency=3, rate="10/2s")
    second = store.set_limit("q", concurrency=5)
    assert (second.concurrency, second.rate) == (5, None)  # the rate is gone, not kept
    assert second.generation != first.generation
    assert store.limits() == {"q": second}
    third = store.set_limit("q", rate="1/1m")
    assert store.limits() == {"q": third} and third.concurrency is None
    same = store.set_limit("q", rate="1/1m")  # the same values: still a new setting
    assert same.generation != third.generation
    assert store.limits() == {"q": same}
    assert len(limit_rows(store)) == 1


def test_clear_limit_removes_the_queues_limit_only(store: jobq.Store) -> None:
    store.set_limit("a", concurrency=1)
    b = store.set_limit("b", rate="5/1m")
    assert store.clear_limit("a") is True
    assert store.limits() == {"b": b}
    assert store.clear_limit("a") is False  # already cleared
    assert store.clear_limit("never-limited") is False
    assert store.limits() == {"b": b}
    assert store.clear_limit("b") is True
    assert store.limits() == {} and limit_rows(store) == []


def test_clear_limit_forgets_the_queues_starts(store: jobq.Store) -> None:
    store.set_limit("a", rate="2/1h")
    store.set_limit("b", rate="2/1h")
    enqueue(store, "a", 3)
    enqueue(store, "b", 3)
    assert by_queue(capture(store)) == {"a": 2, "b": 2}
    assert store.clear_limit("a")
    assert [row["queue"] for row in start_rows(store)] == ["b", "b"]
    store.set_limit("a", rate="2/1h")  # limited again: a fresh window
    assert by_queue(capture(store)) == {"a": 1}
    assert store.limit_usage()["a"] == (3, 1)  # three runs of a still hold slots


def test_limits_of_an_empty_table(store: jobq.Store) -> None:
    assert store.limits() == {}
    assert store.limit_usage() == {}
    assert store.limited_queues() == {}


def test_limit_usage_counts_live_runs_and_starts_within_the_period(store: jobq.Store) -> None:
    store.set_limit("conc", concurrency=5)
    store.set_limit("rated", rate="10/1m")
    store.set_limit("idle", concurrency=2, rate="3/1s")
    enqueue(store, "conc", 4, retries=0)
    enqueue(store, "rated", 4)
    assert store.limit_usage() == {"conc": (0, 0), "rated": (0, 0), "idle": (0, 0)}

    conc = capture(store, queues="conc")
    rated = capture(store, queues="rated")
    assert (len(conc), len(rated)) == (4, 4)
    assert store.limit_usage() == {"conc": (4, 0), "rated": (4, 4), "idle": (0, 0)}

    finish(store, conc[:1])  # done: no longer running
    expire_lease(store, conc[1].id)  # a lost run holds no slot
    finish(store, rated[:2])  # ended runs still count as starts
    assert store.limit_usage() == {"conc": (2, 0), "rated": (2, 4), "idle": (0, 0)}
    age_starts(store, 61, [row["id"] for row in start_rows(store, "rated")[:3]])
    assert store.limit_usage()["rated"] == (2, 1)  # three fell out of the minute


def test_limited_queues_picks_the_named_ones(store: jobq.Store) -> None:
    a = store.set_limit("a", concurrency=1)
    b = store.set_limit("b", rate="1/1s")
    assert store.limited_queues() == {"a": a, "b": b}
    assert store.limited_queues(["b", "free", "a"]) == {"a": a, "b": b}
    assert store.limited_queues(["free"]) == {}
    assert store.limited_queues([]) == {}


def test_app_set_limit_sets_and_with_neither_clears(db_url: str, store: jobq.Store) -> None:
    app = jobq.App(db_url)
    app.store = store
    limit = app.set_limit("emails", 2, "5/1m")
    assert limit is not None and (limit.concurrency, limit.rate) == (2, Rate(5, 60.0))
    assert store.limits() == {"emails": limit}
    assert app.set_limit("emails") is None
    assert store.limits() == {}
    assert app.set_limit("never") is None  # clearing what has no limit is no error


def test_a_queue_name_of_255_characters_is_accepted(store: jobq.Store) -> None:
    name = "q" * 255
    limit = store.set_limit(name, concurrency=1)
    enqueue(store, name, 2)
    assert store.limits() == {name: limit}
    assert len(capture(store)) == 1
    assert store.clear_limit(name)


# --- bad input ------------------------------------------------------------------------------------

BAD_CALLS: list[tuple[str, Callable[[jobq.Store], Any], str]] = [
    ("empty queue", lambda s: s.set_limit("", concurrency=1), "queue"),
    ("queue too long", lambda s: s.set_limit("q" * 256, concurrency=1), "queue"),
    ("queue None", lambda s: s.set_limit(None, concurrency=1), "queue"),
    ("queue not a string", lambda s: s.set_limit(7, concurrency=1), "queue"),
    ("concurrency 0", lambda s: s.set_limit("new", concurrency=0), "concurrency"),
    ("concurrency -1", lambda s: s.set_limit("new", concurrency=-1), "concurrency"),
    ("concurrency True", lambda s: s.set_limit("new", concurrency=True), "concurrency"),
    ("concurrency '3'", lambda s: s.set_limit("new", concurrency="3"), "concurrency"),
    ("concurrency 2.5", lambda s: s.set_limit("new", concurrency=2.5), "concurrency"),
    ("rate 10/abc", lambda s: s.set_limit("new", rate="10/abc"), "rate"),
    ("rate 0/2s", lambda s: s.set_limit("new", rate="0/2s"), "rate"),
    ("rate 10/0s", lambda s: s.set_limit("new", rate="10/0s"), "rate"),
    ("rate 10", lambda s: s.set_limit("new", rate="10"), "rate"),
    ("rate a number", lambda s: s.set_limit("new", rate=10), "rate"),
    ("neither", lambda s: s.set_limit("new"), "limit"),
    ("bad concurrency, good rate", lambda s: s.set_limit("new", concurrency=0, rate="1/s"),
     "concurrency"),
    ("good concurrency, bad rate", lambda s: s.set_limit("new", concurrency=1, rate="1/x"),
     "rate"),
    ("replacing with concurrency 0", lambda s: s.set_limit("kept", concurrency=0), "concurrency"),
    ("replacing with a bad rate", lambda s: s.set_limit("kept", rate="-1/s"), "rate"),
    ("replacing with neither", lambda s: s.set_limit("kept"), "limit"),
    ("clear empty queue", lambda s: s.clear_limit(""), "queue"),
    ("clear queue too long", lambda s: s.clear_limit("q" * 256), "queue"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("call", "option"), [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS]
)
def test_bad_input_is_refused_naming_the_option_and_writes_nothing(
    store: jobq.Store, call: Callable[[jobq.Store], Any], option: str
) -> None:
    store.set_limit("kept", concurrency=2, rate="4/1m")
    enqueue(store, "kept", 1)
    capture(store)
    before = (limit_rows(store), start_rows(store), all_rows(store))
    with pytest.raises(jobq.InvalidOption) as raised:
        call(store)
    assert raised.value.context["option"] == option
    assert f"Option {option!r} is invalid: " in str(raised.value)
    assert (limit_rows(store), start_rows(store), all_rows(store)) == before


@pytest.mark.parametrize(
    "options",
    [
        {"concurrency": 2**31},
        {"concurrency": 2**63},
        {"rate": f"{2**31}/1s"},
        {"rate": f"{2**63}/1s"},
    ],
    ids=["concurrency 2**31", "concurrency 2**63", "rate count 2**31", "rate count 2**63"],
)
def test_numbers_beyond_the_columns_are_refused_or_kept_exactly(
    store: jobq.Store, options: dict[str, Any]
) -> None:
    """The counts are 32-bit INTEGER columns: a larger one is an InvalidOption that writes
    nothing, never a database error (PostgreSQL) nor an OverflowError (SQLite)."""
    try:
        limit = store.set_limit("big", **options)
    except jobq.InvalidOption as error:
        assert error.context["option"] in options, error
        assert limit_rows(store) == []
        return
    assert store.limits() == {"big": limit}


def test_a_rate_period_beyond_what_the_database_can_count_is_refused_or_enforced(
    store: jobq.Store,
) -> None:
    """parse_rate refuses periods over 100 years; a Rate built directly must not get a
    longer one past set_limit and then break or escape every capture of its queue."""
    try:
        store.set_limit("slow", rate=Rate(1, 1e12))
    except jobq.InvalidOption as error:
        assert error.context["option"] == "rate", error
        assert limit_rows(store) == []
        return
    enqueue(store, "slow", 3)
    enqueue(store, "free", 1)
    assert by_queue(capture(store)) == {"slow": 1, "free": 1}
    assert by_queue(capture(store)) == {}, "a second start within the period"
    assert store.limit_usage() == {"slow": (1, 1)}


# --- capture within a concurrency limit -----------------------------------------------------------


@pytest.mark.parametrize("queues", [None, ["limited"], "limited"], ids=["all", "list", "str"])
def test_capture_takes_at_most_the_concurrency(store: jobq.Store, queues: Any) -> None:
    store.set_limit("limited", concurrency=2)
    ids = enqueue(store, "limited", 5)
    first = capture(store, 10, queues)
    assert [task.id for task in first] == ids[:2]  # in capture order
    assert all(task.status == Status.IN_PROGRESS and task.attempt == 1 for task in first)
    assert capture(store, 10, queues) == []
    assert capture(store, 10, queues, worker="w2") == []
    assert in_progress(store, "limited") == 2
    assert store.limit_usage() == {"limited": (2, 0)}


def test_several_small_captures_fill_the_limit_and_no_more(store: jobq.Store) -> None:
    store.set_limit("limited", concurrency=3)
    enqueue(store, "limited", 10)
    sizes = [len(capture(store, 1, worker=f"w{n}")) for n in range(5)]
    assert sizes == [1, 1, 1, 0, 0]
    assert len(capture(store, 2)) == 0
    assert in_progress(store, "limited") == 3


@pytest.mark.parametrize("status", [Status.DONE, Status.FAILED, Status.CANCELLED, Status.QUEUED])
def test_an_ended_run_frees_its_slot(store: jobq.Store, status: Status) -> None:
    store.set_limit("limited", concurrency=2)
    ids = enqueue(store, "limited", 4, retries=0)
    first = capture(store)
    assert len(first) == 2
    finish(store, first[:1], status)
    again = capture(store)
    # The next in line (a released or retried task goes back due now, behind the others).
    assert [task.id for task in again] == [ids[2]]
    assert capture(store) == []
    assert in_progress(store, "limited") == 2


def test_an_expired_lease_frees_its_slot_and_the_retry_takes_it(store: jobq.Store) -> None:
    store.set_limit("limited", concurrency=2)
    ids = enqueue(store, "limited", 4, retries=3)
    first = capture(store)
    expire_lease(store, first[0].id)
    again = capture(store)
    assert [(task.id, task.attempt) for task in again] == [(ids[0], 2)]  # retried, first in line
    assert store.get(ids[0]).retries_left == 2  # type: ignore[union-attr]
    assert capture(store) == []
    # The old attempt can no longer end anything.
    assert not store.set_status(first[0].id, first[0].attempt, Status.DONE)
    assert capture(store) == []


def test_an_expired_run_with_no_retry_left_frees_its_slot_for_the_next(store: jobq.Store) -> None:
    store.set_limit("limited", concurrency=1)
    ids = enqueue(store, "limited", 2, retries=0)
    (first,) = capture(store)
    expire_lease(store, first.id)
    assert [task.id for task in capture(store)] == [ids[1]]
    assert capture(store) == []


def test_the_retry_of_a_failed_task_is_a_run_like_any_other(store: jobq.Store) -> None:
    store.set_limit("limited", concurrency=1)
    (task_id,) = enqueue(store, "limited", 1, retries=2)
    (first,) = capture(store)
    assert store.set_status(first.id, first.attempt, Status.FAILED, error="boom", retry_delay=0)
    enqueue(store, "limited", 1)  # due no sooner than the retry, and after it by id
    (retry,) = capture(store)
    assert (retry.id, retry.attempt) == (task_id, 2)
    assert capture(store) == []  # the retry holds the slot
    assert store.limit_usage() == {"limited": (1, 0)}


def test_lowering_a_limit_stops_no_run_and_holds_back_new_ones(store: jobq.Store) -> None:
    store.set_limit("limited", concurrency=3)
    enqueue(store, "limited", 6)
    running = capture(store)
    assert len(running) == 3
    store.set_limit("limited", concurrency=1)
    assert capture(store) == []
    assert all(store.get(task.id).status == Status.IN_PROGRESS for task in running)  # type: ignore[union-attr]
    finish(store, running[:2])
    assert capture(store) == []  # one still runs: the limit is full
    finish(store, running[2:])
    assert len(capture(store)) == 1


def test_raising_a_limit_takes_effect_at_the_next_capture(store: jobq.Store) -> None:
    store.set_limit("limited", concurrency=1)
    enqueue(store, "limited", 6)
    assert len(capture(store)) == 1
    store.set_limit("limited", concurrency=4)
    assert len(capture(store)) == 3


def test_tasks_not_yet_due_are_not_captured_and_take_no_slot(store: jobq.Store) -> None:
    store.set_limit("limited", concurrency=2)
    store.enqueue("t", {}, queue="limited", delay=3600)
    due = enqueue(store, "limited", 1)
    assert [task.id for task in capture(store)] == due
    assert store.limit_usage() == {"limited": (1, 0)}


def test_a_concurrency_limit_records_no_starts(store: jobq.Store) -> None:
    store.set_limit("limited", concurrency=2)
    enqueue(store, "limited", 3)
    enqueue(store, "free", 3)
    assert by_queue(capture(store)) == {"limited": 2, "free": 3}
    assert start_rows(store) == []


# --- capture within a rate ------------------------------------------------------------------------


def test_a_rate_allows_count_starts_per_window(store: jobq.Store) -> None:
    store.set_limit("rated", rate="3/1m")
    enqueue(store, "rated", 10)
    assert len(capture(store, 2)) == 2
    third = capture(store, 5)
    assert len(third) == 1
    finish(store, third)  # ending runs does not give starts back
    assert capture(store) == []
    assert capture(store, worker="w2") == []
    assert store.limit_usage() == {"rated": (2, 3)}
    assert len(start_rows(store, "rated")) == 3


def test_the_window_rolls_and_old_starts_are_pruned(store: jobq.Store) -> None:
    store.set_limit("rated", rate="3/1m")
    enqueue(store, "rated", 10)
    finish(store, capture(store))
    assert len(start_rows(store)) == 3
    age_starts(store, 61)  # the minute has passed for all three
    aged = max(row["started_at"] for row in start_rows(store))
    assert store.limit_usage()["rated"] == (0, 0)
    assert len(capture(store)) == 3
    remaining = start_rows(store)
    assert len(remaining) == 3  # the three old starts were deleted
    assert all(row["started_at"] > aged for row in remaining)
    assert capture(store) == []


def test_only_starts_that_left_the_window_make_room(store: jobq.Store) -> None:
    store.set_limit("rated", rate="3/1m")
    enqueue(store, "rated", 10)
    finish(store, capture(store))
    starts = [row["id"] for row in start_rows(store)]
    age_starts(store, 61, starts[:2])
    age_starts(store, 30, starts[2:])  # still within the minute
    assert len(capture(store)) == 2
    assert capture(store) == []
    assert store.limit_usage()["rated"] == (2, 3)


def test_a_fractional_period_rolls_by_the_database_clock(store: jobq.Store) -> None:
    store.set_limit("rated", rate="2/0.5")
    enqueue(store, "rated", 6)
    assert len(capture(store)) == 2
    time.sleep(0.7)  # the half second has surely passed
    assert len(capture(store)) == 2


@pytest.mark.parametrize("lost", ["failed", "expired"])
def test_each_retry_counts_as_a_start(store: jobq.Store, lost: str) -> None:
    store.set_limit("rated", rate="2/1h")
    (task_id,) = enqueue(store, "rated", 1, retries=5)
    (first,) = capture(store, 1)
    if lost == "failed":
        assert store.set_status(first.id, first.attempt, Status.FAILED, retry_delay=0)
    else:
        expire_lease(store, first.id)
    (retry,) = capture(store)
    enqueue(store, "rated", 1)  # a task the rate has no room left for
    assert (retry.id, retry.attempt) == (task_id, 2)
    finish(store, [retry], Status.FAILED)
    assert capture(store) == []  # two starts of one task used the rate
    assert store.limit_usage() == {"rated": (0, 2)}


def test_rate_and_concurrency_together(store: jobq.Store) -> None:
    store.set_limit("both", concurrency=3, rate="4/1h")
    enqueue(store, "both", 10)
    first = capture(store)
    assert len(first) == 3  # the concurrency holds it
    finish(store, first)
    second = capture(store)
    assert len(second) == 1  # the rate holds it: 4 starts
    finish(store, second)
    assert capture(store) == []
    assert store.limit_usage() == {"both": (0, 4)}
    age_starts(store, 3601)
    assert len(capture(store)) == 3  # the concurrency again
    assert capture(store) == []


def test_each_queue_has_its_own_window(store: jobq.Store) -> None:
    store.set_limit("a", rate="2/1h")
    store.set_limit("b", rate="3/1h")
    enqueue(store, "a", 5)
    enqueue(store, "b", 5)
    assert by_queue(capture(store)) == {"a": 2, "b": 3}
    assert by_queue(capture(store)) == {}
    age_starts(store, 3601, [row["id"] for row in start_rows(store, "a")])
    assert by_queue(capture(store)) == {"a": 2}


# --- limited and unlimited queues together --------------------------------------------------------


@pytest.mark.parametrize(
    "queues", [None, ["slow", "fast"], ["fast", "slow"]], ids=["all", "list", "reversed"]
)
def test_unlimited_queues_are_captured_alongside(store: jobq.Store, queues: Any) -> None:
    store.set_limit("slow", concurrency=1)
    enqueue(store, "slow", 3)
    enqueue(store, "fast", 4)
    assert by_queue(capture(store, 10, queues)) == {"slow": 1, "fast": 4}
    assert by_queue(capture(store, 10, queues)) == {}


def test_the_capture_limit_counts_limited_and_unlimited_runs_together(store: jobq.Store) -> None:
    store.set_limit("slow", concurrency=2)
    enqueue(store, "slow", 5)
    enqueue(store, "fast", 5)
    captured = capture(store, 3)
    assert len(captured) == 3
    assert by_queue(captured) == {"slow": 2, "fast": 1}  # limited queues come first
    assert by_queue(capture(store, 1)) == {"fast": 1}


def test_a_limit_on_one_queue_leaves_the_others_alone(store: jobq.Store) -> None:
    store.set_limit("slow", concurrency=1, rate="1/1h")
    enqueue(store, "slow", 3)
    fast = enqueue(store, "fast", 25, retries=1)
    captured = capture(store, 20, ["fast"])
    assert [task.id for task in captured] == fast[:20]
    assert len(capture(store, 20, "fast")) == 5
    assert in_progress(store, "slow") == 0
    assert start_rows(store) == []


def test_several_limited_queues_each_within_its_own_limit(store: jobq.Store) -> None:
    store.set_limit("a", concurrency=1)
    store.set_limit("b", concurrency=2)
    store.set_limit("c", rate="3/1h")
    for queue in "abcd":
        enqueue(store, queue, 5)
    assert by_queue(capture(store, 100)) == {"a": 1, "b": 2, "c": 3, "d": 5}
    assert by_queue(capture(store, 100, ["a", "b", "c", "d"])) == {}


def test_an_unlimited_capture_is_one_statement(store: jobq.Store, stale_cache: None) -> None:
    """With limits on other queues (and the Store's copy of them fresh), a capture of
    unlimited queues costs the capture statement and nothing more (on MySQL, where capture
    takes steps: picking, taking and reading back what it picked)."""
    store.set_limit("slow", concurrency=1)
    enqueue(store, "fast", 3)
    store.limited_queues()  # read the limits now
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if "jobq_" in statement:
            statements.append(statement)

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        assert len(capture(store, 10, ["fast"])) == 3
        assert len(capture(store, 10, ["fast", "other"])) == 0
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    steps = 1 if store.dialect.capture_is_one_statement else 3
    assert len(statements) == steps + 1, statements  # the second capture picks nothing


# --- complete_and_capture -------------------------------------------------------------------------


@pytest.mark.parametrize("queues", [None, ["limited"], ["limited", "free"]])
def test_complete_and_capture_records_the_ends_first_so_their_slots_are_reused(
    store: jobq.Store, queues: Any
) -> None:
    store.set_limit("limited", concurrency=2)
    ids = enqueue(store, "limited", 5)
    first = capture(store, 10, queues)
    assert [task.id for task in first] == ids[:2]
    ends = [Completion(task.id, task.attempt, Status.DONE) for task in first]
    applied, captured = store.complete_and_capture(
        ends, 10, queues=queues, worker_id="w", lease=600
    )
    assert applied == 2
    assert [task.id for task in captured] == ids[2:4]
    assert {store.get(i).status for i in ids[:2]} == {Status.DONE}  # type: ignore[union-attr]
    assert in_progress(store, "limited") == 2


def test_complete_and_capture_keeps_to_the_limit_and_takes_unlimited_queues(
    store: jobq.Store,
) -> None:
    store.set_limit("limited", concurrency=1)
    enqueue(store, "limited", 3)
    enqueue(store, "free", 2)
    first = capture(store, 1, "limited")
    stale = Completion(first[0].id, first[0].attempt + 7, Status.DONE)  # not this run's
    applied, captured = store.complete_and_capture([stale], 10, worker_id="w", lease=600)
    assert applied == 0
    assert by_queue(captured) == {"free": 2}  # the limited slot is still taken
    done = Completion(first[0].id, first[0].attempt, Status.DONE)
    applied, captured = store.complete_and_capture([done], 10, worker_id="w", lease=600)
    assert (applied, by_queue(captured)) == (1, {"limited": 1})


def test_complete_and_capture_keeps_to_the_rate(store: jobq.Store) -> None:
    store.set_limit("rated", rate="2/1h")
    enqueue(store, "rated", 5)
    first = capture(store)
    ends = [Completion(task.id, task.attempt, Status.DONE) for task in first]
    applied, captured = store.complete_and_capture(ends, 10, worker_id="w", lease=600)
    assert (applied, captured) == (2, [])


def test_complete_and_capture_of_a_failure_retries_it_within_the_limit(store: jobq.Store) -> None:
    store.set_limit("limited", concurrency=1)
    ids = enqueue(store, "limited", 2, retries=1)
    (first,) = capture(store)
    end = Completion(first.id, first.attempt, Status.FAILED, error="boom", retry_delay=0)
    applied, captured = store.complete_and_capture([end], 10, worker_id="w", lease=600)
    assert applied == 1
    assert [(task.id, task.attempt) for task in captured] == [(ids[1], 1)]  # next in line
    end = Completion(ids[1], 1, Status.DONE)
    applied, captured = store.complete_and_capture([end], 10, worker_id="w", lease=600)
    assert [(task.id, task.attempt) for task in captured] == [(ids[0], 2)]  # the retry
    assert capture(store) == []


# --- limits set, changed or cleared by another Store ----------------------------------------------


def test_a_queue_limited_elsewhere_is_left_out_at_once_despite_a_stale_copy(
    store: jobq.Store, other: jobq.Store, stale_cache: None
) -> None:
    """The Store read jobq_limits before the queue was limited; its captures must still not
    take the queue's tasks freely: every capture statement reads jobq_limits itself."""
    enqueue(store, "free", 2)
    enqueue(store, "q", 4)
    (running,) = capture(store, 1, "free")
    assert store.limited_queues() == {}  # the copy: no limits
    other.set_limit("q", concurrency=1)
    assert store.limited_queues() == {}  # still the stale copy

    assert capture(store, 10, "q") == []
    assert capture(store, 10, ["q", "other"]) == []
    end = Completion(running.id, running.attempt, Status.DONE)
    applied, captured = store.complete_and_capture([end], 10, worker_id="w", lease=600)
    assert (applied, by_queue(captured)) == (1, {"free": 1})  # the one statement, on PostgreSQL
    assert by_queue(capture(store)) == {}
    assert in_progress(store, "q") == 0

    store.queue_limits.forget()  # as after LIMITS_REFRESH
    assert by_queue(capture(store)) == {"q": 1}
    assert by_queue(capture(store)) == {}


def test_a_limit_changed_elsewhere_applies_at_once(
    store: jobq.Store, other: jobq.Store, stale_cache: None
) -> None:
    store.set_limit("q", concurrency=1)
    enqueue(store, "q", 6)
    assert len(capture(store)) == 1
    other.set_limit("q", concurrency=3)  # the Store's copy still says 1
    assert len(capture(store)) == 2  # the limiter reads the stored limit under its lock
    other.set_limit("q", concurrency=3, rate="3/1h")
    assert capture(store) == []


def test_a_cleared_limit_frees_the_queue_within_the_refresh(
    store: jobq.Store, other: jobq.Store, stale_cache: None
) -> None:
    store.set_limit("q", concurrency=1, rate="1/1h")
    enqueue(store, "q", 5)
    assert len(capture(store)) == 1
    assert capture(store) == []
    assert other.clear_limit("q")
    store.queue_limits.forget()  # as after LIMITS_REFRESH
    assert len(capture(store)) == 4  # nothing holds the queue back any more
    assert store.limit_usage() == {}


def test_a_cleared_limit_is_never_exceeded_by_a_stale_copy(
    store: jobq.Store, other: jobq.Store, stale_cache: None
) -> None:
    """Until its copy refreshes, a Store may still think a cleared queue limited; whatever it
    then does, it never captures a task twice nor fails."""
    store.set_limit("q", concurrency=1)
    enqueue(store, "q", 5)
    first = capture(store)
    assert other.clear_limit("q")
    rest = capture(store)
    assert sorted(task.id for task in first + rest) == sorted({t.id for t in first + rest})
    store.queue_limits.forget()
    more = capture(store)
    assert len(first) + len(rest) + len(more) == 5


def test_the_copy_of_the_limits_refreshes_by_itself(
    store: jobq.Store, other: jobq.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobq.limits.sql, "LIMITS_REFRESH", 0.2)
    enqueue(store, "q", 4)
    assert store.limited_queues() == {}
    limit = other.set_limit("q", concurrency=2)
    time.sleep(0.4)  # past LIMITS_REFRESH
    assert store.limited_queues() == {"q": limit}
    assert len(capture(store)) == 2
    assert capture(store) == []


# --- real processes at once -----------------------------------------------------------------------


def runs_of(results: list[Any], queue: str) -> list[tuple[int, int]]:
    return [(i, attempt) for r in results for i, attempt, q in r["captured"] if q == queue]


@pytest.mark.slow
def test_processes_capturing_at_once_never_hold_more_than_the_concurrency(
    store: jobq.Store, db_url: str, tmp_path: Path
) -> None:
    """Four processes capture over and over and hold every run: together they hold exactly
    the concurrency of the limited queue, while the free queue is taken whole."""
    store.set_limit("limited", concurrency=3)
    enqueue(store, "limited", 40)
    free = enqueue(store, "free", 20)
    seeds = random.Random(6).sample(range(10**6), 4)
    queue_choices: list[list[str] | None] = [None, ["limited"], None, ["limited", "free"]]
    results = run_processes(
        limit_procs.capture_rounds,
        [(db_url, f"w{n}", queue_choices[n], 30, seeds[n], False) for n in range(4)],
        tmp_path,
    )
    limited = runs_of(results, "limited")
    assert len(limited) == 3, f"{len(limited)} runs of a queue limited to 3 at once"
    assert len(set(limited)) == 3
    assert sorted(i for i, _ in runs_of(results, "free")) == free
    assert in_progress(store, "limited") == 3


def run_in_lockstep(
    db_url: str, tmp_path: Path, queues: list[str], complete: bool, seed: int
) -> list[Any]:
    """Four processes capture from each of ``queues`` in turn, all at the same moment; two of
    them name the unlimited queue "free" as well."""
    barrier = multiprocessing.get_context("spawn").Barrier(4)
    seeds = random.Random(seed).sample(range(10**6), 4)
    also: list[list[str]] = [[], ["free"], [], ["free"]]
    return run_processes(
        limit_procs.capture_in_lockstep,
        [(db_url, f"w{n}", queues, also[n], complete, seeds[n], barrier) for n in range(4)],
        tmp_path,
    )


@pytest.mark.slow
def test_processes_capturing_at_the_same_moment_never_exceed_the_concurrency(
    store: jobq.Store, db_url: str, tmp_path: Path
) -> None:
    """Twelve times over, four processes capture from a queue limited to 2 at the same
    moment (up to 16 asked for), and hold what they get: 2 of each queue run, no more."""
    queues = [f"limited-{n}" for n in range(12)]
    for queue in queues:
        store.set_limit(queue, concurrency=2)
        enqueue(store, queue, 8)
    enqueue(store, "free", 100)
    results = run_in_lockstep(db_url, tmp_path, queues, False, 10)
    held = {queue: len(runs_of(results, queue)) for queue in queues}
    assert held == dict.fromkeys(queues, 2)
    assert all(in_progress(store, queue) == 2 for queue in queues)


@pytest.mark.slow
def test_processes_capturing_at_the_same_moment_never_exceed_the_rate(
    store: jobq.Store, db_url: str, tmp_path: Path
) -> None:
    """Twelve times over, four processes capture and complete at the same moment from a
    queue limited to 3 starts an hour: 3 of each queue start, no more."""
    queues = [f"rated-{n}" for n in range(12)]
    for queue in queues:
        store.set_limit(queue, rate="3/1h")
        enqueue(store, queue, 8)
    enqueue(store, "free", 100)
    results = run_in_lockstep(db_url, tmp_path, queues, True, 11)
    started = {queue: len(runs_of(results, queue)) for queue in queues}
    assert started == dict.fromkeys(queues, 3)
    assert store.limit_usage() == {queue: (0, 3) for queue in queues}


@pytest.mark.slow
def test_processes_capturing_and_completing_never_run_more_than_the_concurrency(
    store: jobq.Store, db_url: str, tmp_path: Path
) -> None:
    """Four processes take and complete every task of a queue limited to 2; each counts the
    queue's runs in progress while it holds one: never more than 2."""
    store.set_limit("limited", concurrency=2)
    ids = enqueue(store, "limited", 60)
    enqueue(store, "free", 30)
    seeds = random.Random(7).sample(range(10**6), 4)
    queue_choices: list[list[str] | None] = [None, ["limited"], ["free", "limited"], None]
    results = run_processes(
        limit_procs.drain_sampling,
        [(db_url, f"w{n}", queue_choices[n], "limited", seeds[n]) for n in range(4)],
        tmp_path,
    )
    counts = [count for r in results for count in r["counts"]]
    assert counts and max(counts) <= 2, Counter(counts)
    limited = runs_of(results, "limited")
    assert sorted(i for i, _ in limited) == ids  # each exactly once
    assert store.counts() == {("limited", Status.DONE): 60, ("free", Status.DONE): 30}


@pytest.mark.slow
def test_processes_capturing_at_once_never_start_more_than_the_rate(
    store: jobq.Store, db_url: str, tmp_path: Path
) -> None:
    """Four processes capture and complete at once from a queue limited to 5 starts an hour
    (and no concurrency): 5 runs start, whoever takes them."""
    store.set_limit("rated", rate="5/1h")
    enqueue(store, "rated", 40)
    enqueue(store, "free", 10)
    seeds = random.Random(8).sample(range(10**6), 4)
    queue_choices: list[list[str] | None] = [None, ["rated"], ["rated", "free"], None]
    results = run_processes(
        limit_procs.capture_rounds,
        [(db_url, f"w{n}", queue_choices[n], 25, seeds[n], True) for n in range(4)],
        tmp_path,
    )
    rated = runs_of(results, "rated")
    assert len(rated) == 5, f"{len(rated)} starts within an hour of a queue limited to 5"
    assert len(runs_of(results, "free")) == 10
    assert len(start_rows(store, "rated")) == 5
    assert store.limit_usage() == {"rated": (0, 5)}


@pytest.mark.slow
def test_processes_capturing_at_once_keep_rate_and_concurrency(
    store: jobq.Store, db_url: str, tmp_path: Path
) -> None:
    """Holding their runs, four processes are held back by the concurrency (3); the rate
    (4 an hour) then caps what they start once the runs are freed."""
    store.set_limit("both", concurrency=3, rate="4/1h")
    enqueue(store, "both", 30)
    seeds = random.Random(9).sample(range(10**6), 4)
    results = run_processes(
        limit_procs.capture_rounds,
        [(db_url, f"w{n}", None, 20, seeds[n], False) for n in range(4)],
        tmp_path,
    )
    held = runs_of(results, "both")
    assert len(held) == 3
    for task_id, attempt in held:
        assert store.set_status(task_id, attempt, Status.DONE)
    results = run_processes(
        limit_procs.capture_rounds,
        [(db_url, f"v{n}", ["both"], 20, seeds[n] + 1, False) for n in range(4)],
        tmp_path,
    )
    assert len(runs_of(results, "both")) == 1
    assert store.limit_usage() == {"both": (1, 4)}


@pytest.mark.slow
def test_processes_setting_limits_at_once_all_succeed(
    store: jobq.Store, db_url: str, tmp_path: Path
) -> None:
    """A fleet of workers starting at once may each call app.set_limit for the same queue:
    every call must succeed (one of them wins), on a queue limited before or not."""
    results = run_processes(limit_procs.set_limits, [(db_url, n, 60) for n in range(4)], tmp_path)
    errors = [error for r in results for error in r["errors"]]
    assert errors == [], f"{len(errors)} failed, e.g. {errors[0]}"
    found = store.limits()
    assert {f"fresh-{n}" for n in range(60)} <= set(found)
    assert all(found[f"fresh-{n}"].concurrency in {1, 2, 3, 4} for n in range(60))
