"""What a running task can say about itself: its progress, a snooze, and whether it is
being cancelled. Pure: the worker (jobq.lifecycle.run_control) does the writing.

Outside a run (a task function called directly) set_progress and check_cancelled do
nothing, so that the same function works as a task and as a plain call.
"""

from __future__ import annotations

import contextvars
import math
import threading
from typing import Any

from jobq.db.errors import Cancelled, InvalidOption
from jobq.db.payload import storable_text
from jobq.db.tasks import Task

_current_task: contextvars.ContextVar[Task | None] = contextvars.ContextVar(
    "jobq_current_task", default=None
)


def current_task() -> Task | None:
    """The task whose code is running here (its jobq.Task row as captured), or None
    outside one (a task function called directly, say).

    Its ``id`` and ``attempt`` name the run (``attempt`` is its fencing token, 1 on the
    first run); for a periodic task, ``run_at`` is the tick it runs for (or, on a retry,
    when the retry fell due). ``cancel_requested`` says whether a cancel of the run was
    asked for. It works in sync and async tasks, and in a thread an async task starts
    with ``asyncio.to_thread`` (which copies the context).

    Example:
        ```python
        import jobq
        from jobq.worker import Worker

        app = jobq.App()
        app.migrate()

        @app.task(queue="whoami")
        def whoami() -> str:
            task = jobq.current_task()
            return f"{task.name} #{task.id}, attempt {task.attempt}"

        handle = whoami.enqueue()
        Worker(app, queues=["whoami"], burst=True, burst_wait=0).run()
        assert handle.result(timeout=5) == f"whoami #{handle.id}, attempt 1"
        assert jobq.current_task() is None  # not inside a run
        ```
    """
    return _current_task.get()


#: Longest progress message kept (characters); a longer one is cut, not refused.
MESSAGE_LIMIT = 1000


class Snooze(Exception):
    """Raised by a task to wait ``seconds`` and run again: no retry spent, no error kept.

    The task goes back to ``queued`` with ``run_at`` ``seconds`` from now; its next run
    is a new attempt (``current_task().attempt`` grows).

    Args:
        seconds: how long to wait, a finite number >= 0.

    Raises:
        InvalidOption: ``seconds`` is not such a number.

    Example:
        ```python
        import jobq

        app = jobq.App()

        @app.task
        def poll(job: str) -> str:
            if not ready(job):
                raise jobq.Snooze(30)  # look again in 30 s
            return "ready"
        ```
    """

    def __init__(self, seconds: float = 0.0) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise InvalidOption(option="seconds", reason=f"{seconds!r} is not a number")
        if not math.isfinite(seconds) or seconds < 0:
            raise InvalidOption(option="seconds", reason=f"{seconds!r} is not a finite number >= 0")
        super().__init__(f"snoozed for {seconds:g} s")
        self.seconds = float(seconds)


class ProgressReports:
    """The newest progress of each run of this process not yet written, by fence.

    Task code (any thread) puts; the worker takes what is pending and writes it, at most
    once a second a run.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[tuple[int, int], dict[str, Any]] = {}

    def put(self, fence: tuple[int, int], progress: dict[str, Any]) -> None:
        with self._lock:
            self._pending[fence] = progress

    def put_if_absent(self, fence: tuple[int, int], progress: dict[str, Any]) -> None:
        """Put back a report that could not be written, unless a newer one came since."""
        with self._lock:
            self._pending.setdefault(fence, progress)

    def take(self) -> dict[tuple[int, int], dict[str, Any]]:
        """Every pending report, removed."""
        with self._lock:
            pending, self._pending = self._pending, {}
        return pending

    def __bool__(self) -> bool:
        return bool(self._pending)


#: This process's pending progress reports (a worker has one process).
PROGRESS = ProgressReports()


def set_progress(current: float, total: float | None = None, message: str | None = None) -> None:
    """Record the running task's progress; its worker stores it within a second.

    ``TaskHandle.progress`` then reads ``{"current": ..., "total": ..., "message": ...}``,
    which the row keeps after the task ends. Outside a run it does nothing.

    Args:
        current: how far it got, a number.
        total: the number it goes to; None: unknown.
        message: a short text, cut to 1,000 characters.

    Raises:
        InvalidOption: a bad value, naming the one at fault.
    """
    _check_number("current", current)
    if total is not None:
        _check_number("total", total)
    if message is not None:
        if not isinstance(message, str):
            raise InvalidOption(option="message", reason=f"{message!r} is not a string")
        message = storable_text(message[:MESSAGE_LIMIT])
    task = current_task()
    if task is None:
        return
    PROGRESS.put(task.fence, {"current": current, "total": total, "message": message})


def check_cancelled() -> None:
    """Raise jobq.Cancelled if a cancel of the running task was asked for.

    Long loops of sync tasks call it between steps; the run then ends cancelled (no
    retry spent). The worker looks for cancel requests every half second. Outside a run
    it does nothing.

    Example:
        ```python
        import jobq

        app = jobq.App()

        @app.task
        def resize_all(paths: list[str]) -> None:
            for n, path in enumerate(paths):
                jobq.check_cancelled()  # raises jobq.Cancelled once cancel() was asked
                jobq.set_progress(n, len(paths), path)
        ```
    """
    task: Task | None = current_task()
    if task is not None and task.cancel_requested:
        raise Cancelled(id=task.id)


def _check_number(option: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidOption(option=option, reason=f"{value!r} is not a number")
    if not math.isfinite(value):
        raise InvalidOption(option=option, reason=f"{value!r} is not a finite number")
