"""Store.explain: why a task is or is not running, one test per reason, on every database."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

import jobq
from jobq import Status
from jobq.app.why import Explanation
from jobq.dialects.schema import workers
from tests import shared_database
from tests.helpers import expire_lease, set_columns

#: One migrated database per backend for the module, emptied before each test.
backend, shared_url, db_url = shared_database.FIXTURES

TRACEBACK = 'Traceback (most recent call last):\n  File "t.py", line 1\nValueError: boom\n'


def serve(store: jobq.Store, worker_id: str = "w1", queues: list[str] | None = None) -> None:
    """Register a live worker, as a starting worker does, and touch it as its heartbeat does."""
    store.register_worker(worker_id, host="h", pid=1, queues=queues, concurrency=4)
    assert store.touch_worker(worker_id)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def explained(store: jobq.Store, task_id: int, reason: str) -> Explanation:
    """store.explain(task_id), checked to give ``reason`` and to be JSON as it says."""
    found = store.explain(task_id)
    assert (found.task_id, found.reason) == (task_id, reason), found
    assert found.lines, found
    assert json.loads(json.dumps(found.to_json())) == found.to_json()
    return found


def test_a_task_due_later_says_in_how_long(store: jobq.Store) -> None:
    serve(store)
    task_id = store.enqueue("t", {}, delay=600)
    found = explained(store, task_id, "due_later")
    assert found.lines[0].startswith("due in ")
    seconds = int(found.lines[0].split()[2])
    assert 590 <= seconds <= 600, found.lines
    waits = at(found.details["run_at"]) - at(found.details["now"])
    assert timedelta(seconds=590) <= waits <= timedelta(seconds=600)
    assert len(found.lines) == 1, "a live worker serves every queue"


def test_a_failure_waits_for_its_retry_with_its_last_error_line(store: jobq.Store) -> None:
    serve(store)
    task_id = store.enqueue("t", {})
    (run,) = store.capture(1, worker_id="w1")
    assert store.set_status(run.id, run.attempt, Status.FAILED, error=TRACEBACK, retry_delay=3600)
    found = explained(store, task_id, "retry_wait")
    assert found.lines[0].startswith("waiting for its retry until ")
    assert found.lines[0].endswith("(attempt 1 failed: ValueError: boom)")
    assert found.details["error"] == "ValueError: boom"
    assert found.details["retries_left"] == 3  # a retry is spent when it is captured


def test_a_held_lock_key_names_the_run_holding_it(store: jobq.Store) -> None:
    serve(store)
    first = store.enqueue("t", {}, lock_key="ledger:1")
    second = store.enqueue("t", {}, lock_key="ledger:1")
    (run,) = store.capture(10, worker_id="w1")
    assert run.id == first
    found = explained(store, second, "lock_key_held")
    assert found.lines[0].startswith("due now")
    assert f"held by task {first} attempt 1 on worker w1, lease until " in found.lines[1]
    holder = found.details["holder"]
    assert (holder["task_id"], holder["attempt"], holder["worker"]) == (first, 1, "w1")
    assert at(holder["locked_until"]) > at(found.details["now"])


def test_a_row_behind_an_earlier_due_row_of_its_lock_key(store: jobq.Store) -> None:
    serve(store)
    first = store.enqueue("t", {}, lock_key="k")
    second = store.enqueue("t", {}, lock_key="k")
    found = explained(store, second, "lock_key_behind")
    assert f"waits behind task {first}" in found.lines[1]
    assert found.details["ahead"] == first
    explained(store, first, "ready")


def test_a_full_queue_concurrency_says_how_many_run(store: jobq.Store) -> None:
    serve(store)
    store.set_limit("lim", concurrency=1)
    ids = [store.enqueue("t", {}, queue="lim") for _ in range(2)]
    (run,) = store.capture(2, queues="lim", worker_id="w1")
    other = next(i for i in ids if i != run.id)
    found = explained(store, other, "concurrency_full")
    assert "queue concurrency full (1 of 1 running)" in found.lines
    assert found.details["limit"] == {"concurrency": 1, "running": 1}


def test_a_full_rate_window_says_when_the_next_start_is(store: jobq.Store) -> None:
    serve(store)
    store.set_limit("rated", rate="1/1h")
    ids = [store.enqueue("t", {}, queue="rated") for _ in range(2)]
    (run,) = store.capture(2, queues="rated", worker_id="w1")
    other = next(i for i in ids if i != run.id)
    found = explained(store, other, "rate_full")
    assert "rate window full (1 of 1 starts in 3600 s; next start at " in found.lines[1]
    started = store.get(run.id).started_at  # type: ignore[union-attr]
    next_start = at(found.details["limit"]["next_start_at"])
    assert abs(next_start - (started + timedelta(hours=1))) < timedelta(seconds=1)


def test_no_live_worker_serving_its_queue(store: jobq.Store) -> None:
    task_id = store.enqueue("t", {}, queue="mail")
    found = explained(store, task_id, "no_worker")
    assert found.lines == [found.lines[0], "no live worker serves its queue 'mail'"]
    assert found.lines[0].startswith("due now")
    serve(store, "other", queues=["reports"])  # serves another queue
    serve(store, "stale", queues=["mail"])
    with store.engine.begin() as conn:  # unseen for an hour: not live
        conn.execute(
            sa.update(workers)
            .where(workers.c.worker_id == "stale")
            .values(last_seen=store.dialect.now_plus(-3600.0))
        )
    assert explained(store, task_id, "no_worker").details["workers"] == []
    serve(store, "all")  # queues None: every queue
    assert explained(store, task_id, "ready").details["workers"] == ["all"]


def test_no_worker_is_said_besides_another_reason(store: jobq.Store) -> None:
    later = store.enqueue("t", {}, delay=600)
    found = explained(store, later, "due_later")
    assert found.lines[1:] == ["no live worker serves its queue 'default'"]


def test_a_ready_task_should_be_taken(store: jobq.Store) -> None:
    serve(store, queues=["default"])
    task_id = store.enqueue("t", {})
    found = explained(store, task_id, "ready")
    assert found.lines[0].startswith("due now")
    assert found.details["workers"] == ["w1"]


def test_a_running_task_names_its_worker_heartbeat_and_lease(store: jobq.Store) -> None:
    serve(store)
    task_id = store.enqueue("t", {}, timeout=60)
    store.capture(1, worker_id="w1")
    found = explained(store, task_id, "running")
    assert found.lines[0].startswith("running on worker w1 since ")
    assert "(attempt 1, last heartbeat " in found.lines[0]
    assert found.lines[1].startswith("lease until ")
    assert found.details["worker"] == "w1"
    assert found.details["last_heartbeat"] is not None
    assert (found.details["lease_expired"], found.details["past_timeout"]) == (False, False)

    expire_lease(store, task_id)
    set_columns(store, task_id, started_at=datetime(2020, 1, 1))
    found = explained(store, task_id, "running")
    assert found.details["lease_expired"] and found.details["past_timeout"]
    assert any(line.startswith("its lease expired at ") for line in found.lines)
    assert any(line.startswith("past its timeout of 60 s") for line in found.lines)


def test_a_running_task_whose_worker_left_the_registry(store: jobq.Store) -> None:
    task_id = store.enqueue("t", {})
    store.capture(1, worker_id="gone")
    found = explained(store, task_id, "running")
    assert "the worker is not in the registry" in found.lines[0]
    assert found.details["last_heartbeat"] is None


@pytest.mark.parametrize("failed", [False, True])
def test_a_finished_task_says_how_and_when(store: jobq.Store, failed: bool) -> None:
    task_id = store.enqueue("t", {}, retries=0)
    (run,) = store.capture(1, worker_id="w1")
    status = Status.FAILED if failed else Status.DONE
    assert store.set_status(run.id, run.attempt, status, error=TRACEBACK if failed else None)
    found = explained(store, task_id, "finished")
    assert found.details["finished_at"] is not None
    if failed:
        assert found.lines[0].startswith("finished failed at ")
        assert found.lines[0].endswith("(attempt 1, no retry left): ValueError: boom")
        assert found.details["error"] == "ValueError: boom"
    else:
        assert found.lines[0].startswith("finished done at ")
        assert "error" not in found.details


def test_a_cancelled_task(store: jobq.Store) -> None:
    task_id = store.enqueue("t", {}, delay=600)
    assert store.cancel(task_id)
    found = explained(store, task_id, "cancelled")
    assert found.lines[0].startswith("cancelled at ")


def test_an_unknown_id_is_task_not_found(store: jobq.Store) -> None:
    with pytest.raises(jobq.TaskNotFound):
        store.explain(987654321)


def test_a_failure_whose_retry_is_due_says_so_first(store: jobq.Store) -> None:
    serve(store)
    task_id = store.enqueue("t", {})
    (run,) = store.capture(1, worker_id="w1")
    assert store.set_status(run.id, run.attempt, Status.FAILED, error="boom", retry_delay=0)
    found = explained(store, task_id, "ready")
    assert found.lines[0] == "attempt 1 failed: boom; its retry is due now"
