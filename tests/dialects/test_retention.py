"""Retention on every database: finished tasks are pruned in batches, oldest first, by
their queue's retention (`jobq queues retain`) or the workers' --retain, and only by the
worker elected for the upkeep."""

from __future__ import annotations

import math
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

import jobq
from jobq.db.errors import InvalidOption, JobqError
from jobq.db.tasks import Completion, Status
from jobq.dialects.schema import task_edges, tasks
from jobq.lifecycle.bulk import prune_batch
from jobq.queues.retention import FOREVER
from jobq.upkeep import Upkeep
from jobq.upkeep.retention import ROUND_INTERVAL, Retention
from tests import shared_database
from tests.helpers import all_rows, set_columns

#: One migrated database per backend for the module, emptied before each test.
backend, shared_url, db_url = shared_database.FIXTURES

DAY = 86400.0


def finished(store: jobq.Store, queue: str, age: timedelta, status: str = "done") -> int:
    """A task of ``queue`` that finished ``age`` ago, with ``status``."""
    task_id = store.enqueue("t", {}, queue=queue, retries=0)
    finished_at = datetime.now(UTC) - age
    set_columns(store, task_id, status=status, attempt=1, finished_at=finished_at)
    return task_id


def ids(store: jobq.Store) -> set[int]:
    return {row["id"] for row in all_rows(store)}


def failed(what: str, error: JobqError) -> None:
    raise AssertionError(f"{what} failed: {error}")


def test_prune_deletes_old_finished_tasks_in_batches_and_nothing_else(store: jobq.Store) -> None:
    old = [finished(store, "a", timedelta(days=9 + n), s) for n, s in
           enumerate(["done", "failed", "cancelled", "done", "done"])]  # fmt: skip
    recent = finished(store, "a", timedelta(days=1))
    waiting = store.enqueue("t", {}, queue="a")
    running = store.enqueue("t", {}, queue="a")
    store.capture(1, queues="a", worker_id="w")
    retried = finished(store, "a", timedelta(days=20), "failed")
    set_columns(store, retried, retries_left=1, finished_at=None)  # waits for its retry
    cron = finished(store, "a", timedelta(days=30))  # a schedule's row is never pruned
    set_columns(store, cron, recurring=True)
    before = ids(store)

    # Five old ones, two a batch: three batches, the last one short.
    assert store.prune(timedelta(days=7), batch_size=2) == 5
    assert ids(store) == before - set(old)
    assert {recent, waiting, running, retried, cron} <= ids(store)
    assert store.prune(7 * DAY) == 0


def test_a_batch_takes_the_oldest_first_and_says_whether_more_may_be_left(
    store: jobq.Store,
) -> None:
    by_age = [finished(store, "a", timedelta(days=days)) for days in (30, 10, 20)]
    deleted, more = prune_batch(store, 7 * DAY, tasks.c.queue_id == "a", 2)
    assert (deleted, more) == (2, True)
    assert ids(store) == {by_age[1]}  # 30 and 20 days went first
    assert prune_batch(store, 7 * DAY, tasks.c.queue_id == "a", 2) == (1, False)


def test_prune_of_one_queue_leaves_the_others(store: jobq.Store) -> None:
    a = finished(store, "a", timedelta(days=9))
    b = finished(store, "b", timedelta(days=9))
    assert store.prune(7 * DAY, queue="a") == 1
    assert ids(store) == {b}
    assert a not in ids(store)


def test_pruned_workflow_nodes_leave_no_edges(app: jobq.App) -> None:
    @app.task
    def step(n: int) -> int:
        return n

    handle = jobq.chain(step.s(n=1), step.s(n=2)).enqueue()
    store = app.store
    for task_id in handle.tasks:
        set_columns(store, task_id, status="done", attempt=1, finished_at=datetime.now(UTC)
                    - timedelta(days=9))  # fmt: skip
    assert store.prune(7 * DAY) == 2
    with store.engine.connect() as conn:
        assert conn.execute(task_edges.select()).all() == []


def test_a_finished_parent_stays_while_a_node_after_it_has_not_finished(app: jobq.App) -> None:
    """A, B -> C, with A done 9 days ago and B running: no way of pruning (store.prune,
    one queue's, prune_batch, the upkeep's Retention by queue or by default) deletes A
    while C has not finished, so C's parent_results() are whole; plain old tasks older
    than A are pruned past it. Once C has finished, A goes."""

    @app.task(retries=1)
    def step(n: int) -> int:
        return n

    store = app.store
    wf = jobq.Workflow()
    a = wf.add(step.s(n=10, _queue="q"))
    b = wf.add(step.s(n=20, _queue="q"))
    wf.add(step.s(n=0, _queue="q"), after=[a, b])
    handle = wf.enqueue()
    a_id, b_id, c_id = (task.id for task in handle.tasks)
    captured = {t.id: t for t in store.capture(10, worker_id="w")}
    assert set(captured) == {a_id, b_id}

    def end(task_id: int, attempt: int, result: int) -> None:
        done = Completion(task_id, attempt, Status.DONE, result=result, in_workflow=True)
        assert store.set_statuses([done]) == 1

    end(a_id, 1, 10)
    set_columns(store, a_id, finished_at=datetime.now(UTC) - timedelta(days=9))
    plain = {finished(store, "q", timedelta(days=d)) for d in (10, 11)}  # older than A

    def prune_every_way() -> None:
        assert store.prune(7 * DAY, batch_size=1) == 0
        assert store.prune(7 * DAY, queue="q") == 0
        assert prune_batch(store, 7 * DAY, tasks.c.queue_id == "q", 1) == (0, False)
        retention = Retention(store, 7 * DAY, failed, Counter(), batch_size=1)
        store.set_retention("q", 7 * DAY)
        retention.step(0.0)  # q's own retention
        store.clear_retention("q")
        retention = Retention(store, 7 * DAY, failed, Counter(), batch_size=1)
        retention.step(0.0)  # the workers' --retain
        assert a_id in ids(store)

    # The plain old tasks go, a batch each, past A.
    assert store.prune(7 * DAY, batch_size=1) == 2
    assert not plain & ids(store)
    prune_every_way()  # B running, C blocked
    end(b_id, 1, 20)
    (c,) = store.capture(10, worker_id="w")
    assert c.id == c_id
    prune_every_way()  # C running
    assert store.parent_results(c_id) == [10, 20]
    failure = Completion(c_id, 1, Status.FAILED, error="x", retry_delay=0, in_workflow=True)
    assert store.set_statuses([failure]) == 1
    assert store.get(c_id).status is Status.FAILED  # type: ignore[union-attr]
    prune_every_way()  # C waiting for its retry
    (c,) = store.capture(10, worker_id="w")
    end(c_id, c.attempt, 30)
    assert store.prune(7 * DAY) == 1
    assert ids(store) == {b_id, c_id}


def test_queue_retention_is_set_cleared_and_checked(store: jobq.Store) -> None:
    store.set_retention("audit", FOREVER)
    store.set_retention("scratch", 3600)
    assert store.retentions() == {"audit": math.inf, "scratch": 3600.0}
    store.set_retention("scratch", 60)
    assert store.retentions()["scratch"] == 60.0
    assert store.clear_retention("scratch") is True
    assert store.clear_retention("scratch") is False
    assert store.retentions() == {"audit": math.inf}
    for bad in (0, -1, float("nan")):
        with pytest.raises(InvalidOption, match="seconds"):
            store.set_retention("x", bad)
    with pytest.raises(InvalidOption, match="queue"):
        store.set_retention("", 60)
    assert store.retentions() == {"audit": math.inf}


def test_retention_prunes_each_queue_by_its_own_time_or_the_default(store: jobq.Store) -> None:
    store.set_retention("audit", FOREVER)
    store.set_retention("scratch", 3600)
    kept = {
        finished(store, "audit", timedelta(days=400)),
        finished(store, "scratch", timedelta(minutes=30)),
        finished(store, "default", timedelta(days=6)),
    }
    pruned = {finished(store, "scratch", timedelta(hours=h)) for h in (2, 3, 4)}
    pruned |= {finished(store, "default", timedelta(days=d)) for d in (8, 9)}
    stats: Counter[str] = Counter()
    retention = Retention(store, 7 * DAY, failed, stats, batch_size=2)

    # One batch a step: scratch's 3 take two (2, then 1); the default's 2 take two too (a
    # full batch may leave more: 2, then 0). Then the round ends.
    now = 1000.0
    steps = 0
    while retention._round or steps == 0:
        retention.step(now)
        steps += 1
        now += 1.0  # past BATCH_PAUSE: every step is due
    assert steps == 4
    assert ids(store) == kept
    assert stats["pruned"] == len(pruned)
    # The next round waits ROUND_INTERVAL.
    late = finished(store, "default", timedelta(days=10))
    retention.step(now)
    assert late in ids(store)
    now += ROUND_INTERVAL
    retention.step(now)  # scratch: none
    retention.step(now + 1)  # the default's
    assert late not in ids(store)


def test_retain_forever_prunes_only_queues_with_a_time_of_their_own(store: jobq.Store) -> None:
    store.set_retention("scratch", 60)
    ancient = finished(store, "default", timedelta(days=900))
    scratch = finished(store, "scratch", timedelta(hours=1))
    retention = Retention(store, FOREVER, failed, Counter())
    retention.step(0.0)
    retention.step(1.0)
    assert ids(store) == {ancient}
    assert scratch not in ids(store)


def test_only_the_elected_worker_prunes(store: jobq.Store) -> None:
    stats_a: Counter[str] = Counter()
    stats_b: Counter[str] = Counter()
    a = Upkeep(store, "a", 0.2, failed, stats_a, retain=7 * DAY)
    b = Upkeep(store, "b", 0.2, failed, stats_b, retain=7 * DAY)
    a.tick(0.0)
    b.tick(0.0)
    assert (a.elected, b.elected) == (True, False)
    old = finished(store, "default", timedelta(days=8))
    b.tick(100.0)
    assert old in ids(store)
    a.tick(100.0)
    assert old not in ids(store)
    assert (stats_a["pruned"], stats_b["pruned"]) == (1, 0)
    a.resign()
