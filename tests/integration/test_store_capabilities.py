"""jobq.Store: the core with each capability an object of its own, and the former methods kept.

docs/reference/capabilities.md promises that ``store.<capability>``
does the work and that every method Store had as a class of mixins still answers, as the
capability's own method. The core (TaskStore) names no capability: capabilities hook in.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import jobq
from jobq.app.store import Store
from jobq.core.store import TaskStore
from jobq.db.tasks import Completion, Status
from jobq.limits.sql import Limits
from jobq.workflows.rows import Workflows

FORMER = {
    "admin": ["cancel", "retry", "retry_failed", "list_tasks", "get_with_now", "counts",
              "oldest_waiting", "due_later", "cancel_queue", "purge", "prune",
              "running_tasks", "running_lock_keys"],
    "queue_limits": ["set_limit", "clear_limit", "limits", "limit_usage", "limited_queues",
                     "withheld_queues", "limited_waiting", "capture_within_limit",
                     "capture_from_limited_queue"],
    "pauses": ["pause_queue", "resume_queue", "paused_queues"],
    "retention": ["set_retention", "clear_retention", "retentions"],
    "cron": ["sync_schedules", "schedules", "schedule_runs", "set_schedule_enabled",
             "run_schedule_now"],
    "workflows": ["enqueue_workflow", "workflow_tasks", "workflow_edges", "parents",
                  "parent_results", "cancel_workflow", "sweep_workflows", "settle_ends",
                  "end_nodes", "look_again"],
}  # fmt: skip


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    store = jobq.Store(f"sqlite:///{tmp_path}/jobq.db")
    store.migrate()
    yield store
    store.dispose()


def test_every_former_method_is_the_capabilitys_own() -> None:
    store = jobq.Store("sqlite://")
    for capability, names in FORMER.items():
        owner = getattr(store, capability)
        for name in names:
            assert getattr(store, name) == getattr(owner, name), (capability, name)


def test_each_capability_is_made_once_per_store_and_hooks_in_once() -> None:
    store = jobq.Store("sqlite://")
    assert store.capability(Workflows) is store.workflows
    assert store.capability(Limits) is store.queue_limits
    hooks = store.hooks
    assert hooks.capture_filter is store.queue_limits
    assert hooks.ends_in_workflow == store.workflows.end_nodes
    assert len(hooks.after_cancel) == len(hooks.after_removal) == 1
    # After a retry: the workflows revive the nodes below, the fair queues wake the key.
    assert hooks.after_retry == [store.fair_queues._retried, store.workflows._revive_after]
    assert hooks.fair_keys is store.fair_queues
    assert len(hooks.ends_left_alone) == len(hooks.rescues) == 1


def test_the_capabilities_work_through_their_objects(sqlite_store: Store) -> None:
    store = sqlite_store
    store.queue_limits.set_limit("limited", concurrency=1)
    store.pauses.pause_queue("paused")
    store.retention.set_retention("kept", 60)
    assert set(store.queue_limits.limits()) == {"limited"}  # a pause alone limits nothing
    assert store.pauses.paused_queues() == ["paused"]
    assert store.retention.retentions() == {"kept": 60.0}
    for queue in ("limited", "limited", "paused"):
        store.enqueue("t", {}, queue=queue)
    # The limit holds through the capture filter; the paused queue gives nothing.
    taken = store.capture(10, worker_id="w")
    assert [t.queue_id for t in taken] == ["limited"]
    failed = store.enqueue("t", {}, queue="other", retries=0)
    run = store.capture(1, queues="other", worker_id="w")[0]
    store.set_statuses([Completion(run.id, run.attempt, Status.FAILED, error="no")])
    assert [t.id for t in store.admin.list_tasks(status="failed")] == [failed]
    assert store.admin.retry(failed) is True
    with store.locks.mutex("report") as held:
        assert held.acquire() is False  # held already, by this very mutex
    assert [lock.name for lock in store.locks.held()] == []


def test_a_core_store_alone_captures_and_ends_without_any_capability(tmp_path: Path) -> None:
    jobq.Store(f"sqlite:///{tmp_path}/core.db").migrate()
    core = TaskStore(f"sqlite:///{tmp_path}/core.db")
    try:
        core.enqueue("t", {})
        run = core.capture(1, worker_id="w")[0]
        assert core.set_status(run.id, run.attempt, "done") is True
        task = core.get(run.id)
        assert task is not None and task.status is Status.DONE
        assert not hasattr(core, "workflows") and core.hooks.capture_filter is None
        # Made on demand, a capability hooks into the core it is made on.
        assert core.capability(Limits) is core.hooks.capture_filter
    finally:
        core.dispose()
