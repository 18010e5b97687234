"""WorkflowHandle: an enqueued workflow, to wait for its result, see its nodes, cancel it."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jobq.db.errors import WorkflowNotFound
from jobq.db.validation import check_seconds
from jobq.lifecycle.handles import TaskHandle
from jobq.workflows.rows import Workflows

if TYPE_CHECKING:
    from jobq.core.store import TaskStore


class WorkflowHandle:
    """Workflow ``id`` of ``store``; ``tasks`` are the handles of its nodes, in the order
    they were added. Its result is its final node's (a node no other runs after), or the
    list of its final nodes' results where it has several (a group)."""

    def __init__(self, id: int, store: TaskStore, task_ids: Sequence[int], final: Sequence[int]):
        #: The workflow's id (`jobq workflow show ID`).
        self.id = id
        self.store = store
        #: A TaskHandle per node, in the order the nodes were added.
        self.tasks: list[TaskHandle] = [TaskHandle(task_id, store) for task_id in task_ids]
        # Positions in ``tasks`` of the nodes whose results are the workflow's.
        self._final = list(final)

    @classmethod
    def of(cls, store: TaskStore, id: int) -> WorkflowHandle:
        """The handle of workflow ``id`` of ``store``, enqueued elsewhere (another
        process, say), read from its rows; WorkflowNotFound if it has none."""
        nodes = store.capability(Workflows).workflow_tasks(id)
        if not nodes:
            raise WorkflowNotFound(id=id)
        parents = {
            parent_id for _, _, parent_id, _ in store.capability(Workflows).workflow_edges(id)
        }
        final = [i for i, task in enumerate(nodes) if task.id not in parents]
        return cls(id, store, [task.id for task in nodes], final)

    def __repr__(self) -> str:
        return f"<WorkflowHandle {self.id}: {len(self.tasks)} node(s)>"

    @property
    def final(self) -> list[TaskHandle]:
        """The handles of the nodes whose results make the workflow's."""
        return [self.tasks[i] for i in self._final]

    def result(self, timeout: float | None = None) -> Any:
        """Block until the final node(s) end; the result (a list for several).

        Raises as TaskHandle.result does for the first final node that did not end done
        (TaskCancelled for one cancelled because a node before it failed, its error naming
        that node), ResultTimeout (naming the node waited for) once ``timeout`` seconds pass.
        """
        _check(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        results = []
        for handle in self.final:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            results.append(handle.result(left))
        return results[0] if len(results) == 1 else results

    async def wait(self, timeout: float | None = None) -> Any:
        """result(timeout) for asyncio: the same outcomes, never blocking the event loop."""
        _check(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        results = []
        for handle in self.final:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            results.append(await handle.wait(left))
        return results[0] if len(results) == 1 else results

    def cancel(self) -> int:
        """Cancel every node not finished yet: waiting ones at once, running ones by a
        request (they end cancelled unless they finish first). How many it did either to."""
        return self.store.capability(Workflows).cancel_workflow(self.id)


def _check(timeout: Any) -> None:
    if timeout is not None:
        check_seconds("timeout", timeout)
