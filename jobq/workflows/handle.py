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
    """An enqueued workflow: wait for its result, look at its nodes, cancel it.

    Returned by the ``enqueue()`` of a chain, group, chord, Workflow or signature, and by
    ``app.workflow(id)`` for one enqueued elsewhere. ``id`` is the workflow's (`jobq
    workflow show ID`); ``tasks`` are the jobq.TaskHandle of its nodes, in the order they
    were added; ``final`` those whose results make the workflow's. Its result is its final
    node's (a node no other runs after), or the list of its final nodes' results where it
    has several (a group).

    Example:
        ```python
        import jobq

        app = jobq.App()
        app.migrate()

        @app.task(queue="pipeline")
        def step(n: int) -> int:
            return n

        handle = jobq.chain(step.s(n=1), step.s(n=2)).enqueue()
        assert [task.status for task in handle.tasks] == ["queued", "blocked"]
        assert app.workflow(handle.id).final == [handle.tasks[1]]
        assert handle.cancel() == 2  # no worker ran them: both end cancelled
        try:
            handle.result(timeout=1)
        except jobq.TaskCancelled as error:
            assert str(error).endswith("was cancelled: cancelled with its workflow")
        ```
    """

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

        Args:
            timeout: seconds to wait at most, for all of them; None: no end.

        Raises:
            TaskFailed: a final node failed for good.
            TaskCancelled: a final node was cancelled: asked for, or because a node
                before it failed (its error naming that node).
            ResultTimeout: ``timeout`` seconds passed (naming the node waited for).
            TaskNotFound: a final node's row is gone (pruned).
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
        request (they end cancelled unless they finish first); no node can start again
        afterwards. How many nodes it did either to. WorkflowNotFound if its rows are gone."""
        return self.store.capability(Workflows).cancel_workflow(self.id)


def _check(timeout: Any) -> None:
    if timeout is not None:
        check_seconds("timeout", timeout)
