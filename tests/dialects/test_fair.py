"""Fair queues on every database: captures shared between fair keys by weight (deficit
round robin over jobq_fair_keys, a cursor in jobq_limits), capped per key, keys idled and
woken, and every other queue captured as before."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

import jobq
from jobq import Status
from jobq.db.errors import InvalidOption
from jobq.dialects.schema import fair_keys, limits, tasks
from jobq.limits import FairShare
from tests import shared_database
from tests.dialects.test_limits import capture, finish
from tests.helpers import until

#: One migrated database per backend for the module, emptied before each test.
backend, shared_url, db_url = shared_database.FIXTURES


def enqueue(
    store: jobq.Store, key: str | None, n: int, queue: str = "q", **options: Any
) -> list[int]:
    """``n`` tasks of fair key ``key`` in ``queue``."""
    args = [{"i": i} for i in range(n)]
    return store.enqueue_many("t", args, queue=queue, fair_key=key, **options)


def keys_of(captured: list[jobq.Task]) -> Counter[str | None]:
    return Counter(task.fair_key for task in captured)


def key_rows(store: jobq.Store) -> dict[str, bool]:
    """Each key of queue q: whether it is idle."""
    k = fair_keys.c
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(k.fair_key, k.idle).where(k.queue == "q"))
        return {key: bool(idle) for key, idle in rows}


@pytest.fixture
def fair(store: jobq.Store) -> jobq.Store:
    """``store`` with queue q fair (equal weights, no cap)."""
    store.fair_queues.make_fair("q")
    return store


@pytest.fixture
def other(db_url: str) -> Iterator[jobq.Store]:
    """A second Store on the same database, with a copy of jobq_limits of its own."""
    s = jobq.Store(db_url)
    yield s
    s.dispose()


# --- settings ---------------------------------------------------------------------------


def test_make_fair_weights_and_unfair_round_trip(store: jobq.Store) -> None:
    assert store.fair_queues.shares() == {}
    share = store.fair_queues.make_fair("q", weights={"acme": 3, "b": 2}, max_running_per_key=4)
    assert share == FairShare("q", 1, 4)
    assert store.fair_queues.shares() == {"q": share}
    assert store.fair_queues.weights("q") == {"acme": 3, "b": 2}
    again = store.fair_queues.make_fair("q", weights={"b": 5}, default_weight=2)
    assert again == FairShare("q", 2, None)
    assert store.fair_queues.weights("q") == {"acme": 3, "b": 5}
    assert store.limits() == {}  # fairness is not a limit
    assert store.fair_queues.make_unfair("q") is True
    assert store.fair_queues.make_unfair("q") is False
    assert store.fair_queues.shares() == {}
    assert store.fair_queues.weights("q") == {}


def test_fairness_limits_and_pauses_keep_each_other(store: jobq.Store) -> None:
    store.set_limit("q", concurrency=3)
    store.fair_queues.make_fair("q")
    store.pause_queue("q")
    assert store.clear_limit("q") is True
    assert store.resume_queue("q") is True
    assert list(store.fair_queues.shares()) == ["q"]  # the row stayed, for fairness
    store.set_limit("q", concurrency=3)
    assert store.fair_queues.make_unfair("q") is True
    assert str(store.limits()["q"]) == "concurrency 3"  # the limit stayed


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"default_weight": 0}, "default_weight"),
        ({"max_running_per_key": 0}, "max_running_per_key"),
        ({"weights": {"a": 0}}, "weight"),
        ({"weights": {"": 2}}, "weight"),
        ({"weights": {"a": True}}, "weight"),
    ],
)
def test_bad_settings_are_refused_and_nothing_is_written(
    store: jobq.Store, options: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidOption, match=f"^Option {named!r} is invalid"):
        store.fair_queues.make_fair("q", **options)
    assert store.fair_queues.shares() == {}


def test_an_empty_fair_key_is_refused(store: jobq.Store) -> None:
    with pytest.raises(InvalidOption, match="fair_key"):
        store.enqueue("t", {}, fair_key="")


# --- keys at enqueue ------------------------------------------------------------------


def test_keyless_rows_of_a_fair_queue_share_the_key_of_their_own(fair: jobq.Store) -> None:
    enqueue(fair, None, 2)
    enqueue(fair, "acme", 1)
    enqueue(fair, None, 1, queue="plain")
    with fair.engine.connect() as conn:
        rows = conn.execute(sa.select(tasks.c.queue_id, tasks.c.fair_key)).all()
    assert Counter(rows) == Counter({("q", ""): 2, ("q", "acme"): 1, ("plain", None): 1})
    assert set(key_rows(fair)) == {"", "acme"}


def test_a_store_that_did_not_know_the_queue_was_fair_is_settled(
    store: jobq.Store, other: jobq.Store
) -> None:
    assert other.fair_queues.shares() == {}
    other.queue_limits.fair_shares()  # other reads jobq_limits now: q is not fair yet
    store.fair_queues.make_fair("q")
    enqueue(other, None, 2)  # stored keyless, no key woken
    enqueue(other, "late", 1)
    assert capture(store, 10, "q") == []
    assert store.fair_queues.settle("q") == 2 + 2  # two rows keyed, two keys woken
    assert keys_of(capture(store, 10, "q")) == {"": 2, "late": 1}


def test_settling_reads_without_holding_writers_off(fair: jobq.Store) -> None:
    """With nothing to settle, settle() writes nothing: it finishes while another
    transaction holds the database's (SQLite) or the rows' write locks."""
    enqueue(fair, "a", 3)
    captured = capture(fair, 1, "q")
    done: list[int] = []
    with fair.engine.connect() as holder, holder.begin():
        # Hold writers off: SQLite's write lock, the rows' and the keys' locks elsewhere.
        if fair.engine.dialect.name == "sqlite":
            holder.exec_driver_sql("UPDATE jobq_limits SET updated_at = updated_at")
        else:
            holder.execute(sa.select(tasks.c.id).with_for_update())
            holder.execute(sa.select(fair_keys.c.fair_key).with_for_update())
        thread = threading.Thread(target=lambda: done.append(fair.fair_queues.settle("q")))
        thread.start()
        until(lambda: done, timeout=60)
    assert done == [0]
    finish(fair, captured)


# --- shares -----------------------------------------------------------------------------


def test_a_small_tenant_is_served_at_once_behind_a_large_backlog(fair: jobq.Store) -> None:
    enqueue(fair, "big", 200)
    assert keys_of(capture(fair, 8, "q")) == {"big": 8}
    for tenant in ("b", "c", "d"):
        enqueue(fair, tenant, 5)
    seen: Counter[str | None] = Counter()
    for _ in range(3):  # four keys with work: two rows each a capture of 8
        got = capture(fair, 8, "q")
        assert len(got) == 8
        seen += keys_of(got)
    assert seen == {"big": 9, "b": 5, "c": 5, "d": 5}


def test_weights_share_the_captures_in_proportion(fair: jobq.Store) -> None:
    fair.fair_queues.make_fair("q", weights={"a": 3})
    enqueue(fair, "a", 400)
    enqueue(fair, "b", 400)
    seen: Counter[str | None] = Counter()
    for _ in range(5):
        seen += keys_of(capture(fair, 40, "q"))
    assert seen == {"a": 150, "b": 50}


def test_a_heavy_key_wins_many_rows_of_a_capture_beside_keys_that_win_one(
    fair: jobq.Store,
) -> None:
    """Keys whose visit takes one row and a key whose visit takes twenty, in one capture
    (MariaDB reads the first by its walk, the second by a statement of its own); a visit
    the full capture cut short is finished by the next one."""
    fair.fair_queues.make_fair("q", weights={"heavy": 20})
    enqueue(fair, "heavy", 100)
    lights = [f"l{i:02}" for i in range(30)]
    for key in lights:
        enqueue(fair, key, 3)
    # Key order: heavy's visit (20 rows), then one row each of the lights until 31.
    assert keys_of(capture(fair, 31, "q")) == Counter(
        {"heavy": 20, **dict.fromkeys(lights[:11], 1)}
    )
    # The other lights, then 12 rows of heavy's next visit: the capture is full.
    assert keys_of(capture(fair, 31, "q")) == Counter(
        {"heavy": 12, **dict.fromkeys(lights[11:], 1)}
    )
    # Heavy's visit goes on where it was cut (8 more), then the lights from the first.
    assert keys_of(capture(fair, 31, "q")) == Counter({"heavy": 8, **dict.fromkeys(lights[:23], 1)})


def test_a_round_starts_after_the_last_key_visited(fair: jobq.Store) -> None:
    """Captures of one row each go round the keys in key order, whatever each key's
    backlog, and a key that joins is visited when the round reaches it."""
    enqueue(fair, "b", 5)
    enqueue(fair, "d", 5)
    order = [capture(fair, 1, "q")[0].fair_key for _ in range(3)]
    assert order == ["b", "d", "b"]
    enqueue(fair, "a", 5)
    enqueue(fair, "c", 5)
    order = [capture(fair, 1, "q")[0].fair_key for _ in range(5)]
    assert order == ["c", "d", "a", "b", "c"]


def test_a_key_that_runs_short_leaves_its_rounds_to_the_others(fair: jobq.Store) -> None:
    """With every key in one page, a capture reads each key's rows for the rounds the batch
    takes (here ten), and reads again for the keys that may have more when one ran short."""
    enqueue(fair, "a", 2)
    enqueue(fair, "b", 50)
    enqueue(fair, "c", 50)
    assert keys_of(capture(fair, 30, "q")) == {"a": 2, "b": 14, "c": 14}


def test_within_a_key_rows_go_by_priority_then_due_time(fair: jobq.Store) -> None:
    low = enqueue(fair, "a", 2)
    high = fair.enqueue("t", {}, queue="q", fair_key="a", priority=5)
    later = fair.enqueue("t", {}, queue="q", fair_key="a", delay=3600)
    assert [task.id for task in capture(fair, 10, "q")] == [high, *low]
    assert fair.get(later).status is Status.QUEUED


def test_a_key_never_runs_more_than_its_cap(store: jobq.Store) -> None:
    store.fair_queues.make_fair("q", max_running_per_key=2)
    enqueue(store, "a", 10)
    enqueue(store, "b", 10)
    first = capture(store, 10, "q")
    assert keys_of(first) == {"a": 2, "b": 2}
    assert capture(store, 10, "q") == []
    finish(store, [task for task in first if task.fair_key == "a"][:1])
    assert keys_of(capture(store, 10, "q")) == {"a": 1}


def test_a_limit_bounds_a_fair_queue_and_fairness_shares_it(store: jobq.Store) -> None:
    store.set_limit("q", concurrency=4)
    store.fair_queues.make_fair("q")
    enqueue(store, "a", 10)
    enqueue(store, "b", 10)
    assert keys_of(capture(store, 10, "q")) == {"a": 2, "b": 2}


def test_a_paused_fair_queue_is_not_captured(fair: jobq.Store) -> None:
    enqueue(fair, "a", 3)
    fair.pause_queue("q")
    assert capture(fair, 10) == []
    fair.resume_queue("q")
    assert len(capture(fair, 10)) == 3


def test_other_queues_are_captured_as_before_beside_a_fair_one(fair: jobq.Store) -> None:
    enqueue(fair, "a", 3)
    plain = enqueue(fair, None, 3, queue="plain")
    got = capture(fair, 10)
    assert Counter(task.queue_id for task in got) == {"q": 3, "plain": 3}
    assert sorted(task.id for task in got if task.queue_id == "plain") == plain


def test_an_unfair_queue_goes_back_to_plain_order(fair: jobq.Store) -> None:
    big = enqueue(fair, "big", 5)
    enqueue(fair, "small", 1)
    fair.fair_queues.make_unfair("q")
    assert [task.id for task in capture(fair, 5, "q")] == big


# --- idle keys and their return ---------------------------------------------------------


def test_a_drained_key_is_idled_and_rejoins_without_credit(fair: jobq.Store) -> None:
    enqueue(fair, "a", 100)
    enqueue(fair, "b", 2)
    finish(fair, capture(fair, 4, "q"))  # a twice, b twice: b has nothing left
    finish(fair, capture(fair, 4, "q"))  # only a has work; b is found empty and idled
    assert key_rows(fair)["b"] is True
    for _ in range(5):
        finish(fair, capture(fair, 10, "q"))  # a alone, round after round
    enqueue(fair, "b", 10)
    assert key_rows(fair)["b"] is False  # woken: it rejoins
    assert keys_of(capture(fair, 4, "q")) == {"a": 2, "b": 2}  # no credit for its absence


def test_a_retry_keeps_its_key_awake(fair: jobq.Store) -> None:
    (task,) = (fair.get(i) for i in enqueue(fair, "a", 1))
    (run,) = capture(fair, 1, "q")
    assert capture(fair, 1, "q") == []  # nothing waits, but a run: the key stays awake
    assert key_rows(fair)["a"] is False
    assert fair.set_status(run.id, run.attempt, Status.FAILED, retry_delay=0)
    (again,) = capture(fair, 1, "q")
    assert (again.id, again.attempt) == (task.id, 2)


def test_an_expired_run_of_a_fair_queue_is_captured_again(fair: jobq.Store) -> None:
    enqueue(fair, "a", 1)
    (run,) = capture(fair, 1, "q")
    with fair.engine.begin() as conn:
        past = datetime.now(UTC) - timedelta(minutes=5)
        conn.execute(sa.update(tasks).where(tasks.c.id == run.id).values(locked_until=past))
    # A Store looks for a fair queue's expired runs once a second (EXPIRED_EVERY).
    (again,) = until(lambda: capture(fair, 1, "q"), timeout=10)
    assert (again.id, again.attempt) == (run.id, 2)


def test_an_expired_run_taken_again_counts_against_its_keys_cap(store: jobq.Store) -> None:
    store.fair_queues.make_fair("q", max_running_per_key=1)
    enqueue(store, "a", 1)
    (run,) = capture(store, 10, "q")
    enqueue(store, "a", 1)
    with store.engine.begin() as conn:
        past = datetime.now(UTC) - timedelta(minutes=5)
        conn.execute(sa.update(tasks).where(tasks.c.id == run.id).values(locked_until=past))
    again = until(lambda: capture(store, 10, "q"), timeout=10)
    assert [(task.id, task.attempt) for task in again] == [(run.id, 2)]  # not the new row too


def test_lock_keys_hold_in_a_fair_queue(fair: jobq.Store) -> None:
    enqueue(fair, "a", 3, lock_key="ledger")
    assert len(capture(fair, 10, "q")) == 1


# --- captures at once -------------------------------------------------------------------


def test_captures_at_once_never_take_a_row_twice(fair: jobq.Store, db_url: str) -> None:
    for key in ("a", "b", "c"):
        enqueue(fair, key, 60)
    stores = [jobq.Store(db_url) for _ in range(3)]
    taken: list[int] = []
    lock = threading.Lock()

    def drain(s: jobq.Store) -> None:
        while got := capture(s, 7, "q", worker=str(id(s))):
            with lock:
                taken.extend(task.id for task in got)

    threads = [threading.Thread(target=drain, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    for s in stores:
        s.dispose()
    assert len(taken) == len(set(taken)) == 180


def test_a_row_locked_elsewhere_waits_for_its_lock_to_end(fair: jobq.Store) -> None:
    if fair.engine.dialect.name == "sqlite":
        pytest.skip("SQLite locks the whole database for a write, not rows")
    first, second = enqueue(fair, "a", 2)
    with fair.engine.connect() as other, other.begin():
        other.execute(sa.select(tasks.c.id).where(tasks.c.id == first).with_for_update())
        assert [task.id for task in capture(fair, 2, "q")] == [second]
    assert [task.id for task in capture(fair, 2, "q")] == [first]


def test_a_capture_writes_one_row_whatever_the_keys_it_serves(fair: jobq.Store) -> None:
    """A capture serving 100 keys writes the rows it takes and the queue's cursor: no key's
    row; and it reads its keys along an index, from the cursor, not by a scan of the
    queue's keys."""
    dialect = fair.engine.dialect.name
    # PostgreSQL's planner rightly scans a table of a few thousand keys: make it 20,000.
    names = [f"key{i:05}" for i in range(20_000 if dialect == "postgresql" else 5_000)]
    with fair.engine.begin() as conn:
        conn.execute(sa.insert(fair_keys), [{"queue": "q", "fair_key": n} for n in names])
    enqueue(fair, None, 1)  # any row: the keys without rows are idled as they are visited
    for name in names[1_000:1_100]:
        enqueue(fair, name, 1)
    if dialect == "postgresql":  # its plans go by statistics: as autovacuum keeps them
        with fair.engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE jobq_fair_keys")
    with fair.engine.begin() as conn:  # the last capture stopped before key 1,000
        conn.execute(sa.update(limits).where(limits.c.queue == "q").values(fair_cursor=names[999]))
    sent: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        sent.append((statement, parameters))

    sa.event.listen(fair.engine, "before_cursor_execute", record)
    try:
        got = capture(fair, 100, "q")
    finally:
        sa.event.remove(fair.engine, "before_cursor_execute", record)
    assert sorted(task.fair_key or "" for task in got) == names[1_000:1_100]
    writes = [
        table for table in ("jobq_limits", "jobq_tasks", "jobq_fair_keys") for s, _ in sent
        if f"UPDATE {table} " in s or f"INSERT INTO {table} " in s
    ]  # fmt: skip
    assert sorted(writes) == ["jobq_limits", "jobq_tasks"], writes
    ((statement, parameters),) = [(s, p) for s, p in sent if "FROM jobq_fair_keys" in s]
    with fair.engine.connect() as conn:
        explain = "EXPLAIN QUERY PLAN " if dialect == "sqlite" else "EXPLAIN "
        plan = " ".join(str(row) for row in conn.exec_driver_sql(explain + statement, parameters))
        cursor = conn.execute(sa.select(limits.c.fair_cursor).where(limits.c.queue == "q"))
        assert cursor.scalar() == names[1_099]
    if dialect == "sqlite":
        assert "SEARCH jobq_fair_keys USING" in plan and "fair_key>?" in plan, plan
    elif dialect == "postgresql":
        assert "Index" in plan and "jobq_fair_keys_awake" in plan, plan
    else:
        assert "'range'" in plan, plan


# --- why a row waits ----------------------------------------------------------------------


def test_why_says_a_row_waits_for_its_keys_turn_or_cap(store: jobq.Store) -> None:
    store.fair_queues.make_fair("q", max_running_per_key=1)
    enqueue(store, "a", 3)
    (b,) = enqueue(store, "b", 1)
    taken = capture(store, 1, "q")  # a's first row
    assert keys_of(taken) == {"a": 1}
    third = max(task.id for task in store.list_tasks(queue="q") if task.fair_key == "a")
    said = store.explain(third)
    assert (said.reason, said.details["fair"]["running"]) == ("fair_key_cap", 1)
    assert "its key 'a' is at its cap (1 of 1 running)" in said.lines
    finish(store, taken)
    said = store.explain(third)
    assert said.reason == "fair_turn"
    assert said.details["fair"]["rows_ahead"] == 1
    assert store.explain(b).reason in ("ready", "no_worker")


def test_why_says_a_keyless_row_of_a_stale_store_waits_for_the_upkeep(
    store: jobq.Store, other: jobq.Store
) -> None:
    other.queue_limits.fair_shares()
    store.fair_queues.make_fair("q")
    (row,) = enqueue(other, None, 1)
    assert store.explain(row).reason == "fair_unsettled"
    store.fair_queues.settle("q")
    assert store.explain(row).reason in ("ready", "no_worker")
