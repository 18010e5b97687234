"""TaskHandle: an enqueued task's id that can read the task, wait for its result, cancel it.

App.enqueue returns one. It is an int (the id), so code that stored, compared, logged or
serialised ids keeps working; it also holds the TaskStore the task was enqueued into.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jobq.db.errors import TaskCancelled, TaskFailed, TaskNotFound
from jobq.db.tasks import CANCELLED_ON_REQUEST, Status, Task
from jobq.db.validation import check_seconds
from jobq.lifecycle import waiting
from jobq.lifecycle.admin import TaskAdmin

if TYPE_CHECKING:
    from jobq.core.store import TaskStore


class TaskHandle(int):
    """Task ``id`` of ``store``: an int equal to the id, with ways to follow the task.

    ``handle.id`` and ``int(handle)`` are the plain id; ``str(handle)`` and JSON give the
    number; pickling gives a plain int (a TaskStore does not travel). Arithmetic gives ints.
    ``enqueue`` returns one; ``App.handle(id)`` makes one for a task enqueued elsewhere.

    Example:
        ```python
        import jobq
        from jobq.worker import Worker

        app = jobq.App()
        app.migrate()

        @app.task
        def add(a: int, b: int) -> int:
            return a + b

        handle = add.enqueue(a=2, b=3)
        assert handle.status == "queued" and handle == handle.id
        Worker(app, burst=True, burst_wait=0).run()
        assert handle.result(timeout=5) == 5
        ```
    """

    #: The TaskStore the task lives in.
    store: TaskStore

    def __new__(cls, id: int, store: TaskStore) -> TaskHandle:
        handle = super().__new__(cls, id)
        handle.store = store
        return handle

    @property
    def id(self) -> int:
        """The task's id, as a plain int."""
        return int(self)

    def __repr__(self) -> str:
        return f"<TaskHandle {int(self)}>"

    # int's own: str() (print, f-strings, logs) shows the number, as for the id it was.
    __str__ = int.__repr__

    def __reduce__(self) -> tuple[type[int], tuple[int]]:
        return (int, (int(self),))

    # --- reading -------------------------------------------------------------------------

    def refresh(self) -> Task | None:
        """The task's row as it is now, or None if there is none (never was, or deleted)."""
        return self.store.get(int(self))

    def _row(self) -> Task:
        task = self.refresh()
        if task is None:
            raise TaskNotFound(id=int(self))
        return task

    @property
    def status(self) -> Status:
        """The task's status now (one read); TaskNotFound if its row is gone."""
        return self._row().status

    @property
    def progress(self) -> dict[str, Any] | None:
        """What the task last said of its progress (jobq.set_progress): current, total,
        message; None if nothing yet. One read; TaskNotFound if its row is gone."""
        return self._row().progress

    # --- waiting -------------------------------------------------------------------------

    def result(self, timeout: float | None = None) -> Any:
        """Block until the task ends, and return its result.

        On PostgreSQL the database notifies the end (no polling); elsewhere the row is
        read at growing intervals, 5 ms to 200 ms apart. A database that restarts or ends
        its sessions meanwhile is waited for (its connections replaced).

        Args:
            timeout: seconds to wait at most; None: no end; 0: do not wait. None or a
                finite number >= 0.

        Returns:
            What the task returned (as stored: JSON, so a tuple comes back a list).

        Raises:
            TaskFailed: it failed for good; its ``error`` holds the stored error,
                traceback included.
            TaskCancelled: it was cancelled.
            ResultTimeout: ``timeout`` seconds passed first; the task goes on.
            TaskNotFound: there is no such task, or its row was deleted meanwhile.
            InvalidOption: a bad ``timeout``, before anything is read or written.
            DatabaseUnavailable: the database cannot be reached when ``timeout`` passes.
        """
        _check_timeout(timeout)
        return outcome(waiting.wait_for_end(self.store, int(self), timeout))

    async def wait(self, timeout: float | None = None) -> Any:
        """result(timeout) for asyncio: the same outcomes, never blocking the event loop."""
        _check_timeout(timeout)
        return outcome(await waiting.wait_for_end_async(self.store, int(self), timeout))

    # --- acting --------------------------------------------------------------------------

    def cancel(self) -> bool:
        """Cancel the task (TaskStore.cancel): a waiting one at once, a running one by a request.

        A running task's worker sees the request within a second: an async run is
        cancelled, a sync one sees it through jobq.check_cancelled(). The run's own end
        decides: done and final failures stand; an end that would make it wait again is
        recorded cancelled instead.

        Returns:
            True if it did either, False if the task has ended already.

        Raises:
            TaskNotFound: there is no such task.
        """
        return self.store.capability(TaskAdmin).cancel(int(self))


def outcome(task: Task) -> Any:
    """The result of ``task``, a terminal row; or TaskFailed / TaskCancelled saying why not."""
    if task.status is Status.DONE:
        return task.result
    if task.status is Status.CANCELLED:
        summary = last_line(task.error) or CANCELLED_ON_REQUEST
        raise TaskCancelled(id=task.id, summary=summary, error=task.error)
    summary = last_line(task.error) or "no error was recorded"
    raise TaskFailed(id=task.id, summary=summary, error=task.error)


def last_line(error: str | None) -> str | None:
    """The last non-blank line of a stored error: a traceback's exception and message."""
    if not error:
        return None
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    return lines[-1] if lines else None


def _check_timeout(timeout: Any) -> None:
    """None, or a finite number of seconds >= 0; else InvalidOption naming ``timeout``."""
    if timeout is not None:
        check_seconds("timeout", timeout)
