"""What a running workflow node reads of the nodes before it: parent_results().

The worker that runs the node names its Store here when it starts (serve), so that task
code reaches the database the node lives in without being handed anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jobq.lifecycle.in_task import current_task
from jobq.workflows.rows import Workflows

if TYPE_CHECKING:
    from jobq.core.store import TaskStore

# The Store of the worker running tasks in this process (a worker has one process).
_store: TaskStore | None = None


def serve(store: TaskStore | None) -> None:
    """Let parent_results() read from ``store`` (a worker's, while it runs; None after)."""
    global _store
    _store = store


def parent_results() -> list[Any]:
    """The results of the running task's parents, in the order its ``after=`` named them.

    In a chain, the previous part's result (a list of one; a group's results where the
    part before is a group); in a chord's callback, the group's results in order. None
    for a parent whose row was pruned meanwhile. Empty for a task that runs after
    nothing, and outside a worker's run (a task function called directly). One read by
    primary key, in the calling thread. See jobq.chain and jobq.Workflow for examples.
    """
    task = current_task()
    if task is None or task.workflow_id is None or _store is None:
        return []
    return _store.capability(Workflows).parent_results(task.id)
