"""Running one task to an Outcome. Never touches the database."""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from jobq.core.registry import Registry, TaskDefinition
from jobq.db.errors import Cancelled
from jobq.db.payload import result_problem
from jobq.db.tasks import CANCELLED_ON_REQUEST as CANCELLED_ERROR
from jobq.db.tasks import Status, Task, Undecodable
from jobq.lifecycle.in_task import Snooze, _current_task
from jobq.worker.logs import RecordMaker, in_and_at

log = logging.getLogger("jobq.task")
# Each run logs its start and its end: two lines per task, made the cheap way.
_start_lines = RecordMaker(log)
_end_lines = RecordMaker(log)

#: Told of the exception a run's code raised, in the run's context, where it is set: the
#: run's trace span records it then (jobq.worker.run_spans). Not kept in the Outcome: the
#: frames of its traceback hold the Outcome, a cycle only a garbage collection frees.
RAISED: ContextVar[Callable[[BaseException], None]] = ContextVar("jobq_raised")


class Retry(Exception):
    """Raised by a task to be run again after ``delay`` seconds (it spends a retry).

    The run is recorded failed with the error ``Retry: <reason>``; with no retry left it
    is failed for good. To wait without spending a retry, raise jobq.Snooze.

    Args:
        delay: seconds before the next attempt; None: the task's backoff decides.
        reason: the error stored with the failed attempt.

    Example:
        ```python
        import jobq

        app = jobq.App()

        @app.task(retries=10)
        def charge(order: int) -> None:
            if bank_is_busy():
                raise jobq.Retry(delay=60, reason="the bank is busy")
        ```
    """

    def __init__(self, delay: float | None = None, reason: str = "retry requested") -> None:
        super().__init__(reason)
        self.delay = delay
        self.reason = reason


@dataclass(frozen=True)
class Outcome:
    """How a run ended, as set_status will record it."""

    status: Status
    result: Any = None
    error: str | None = None
    #: Seconds before the next attempt, when the task said (Retry) or the policy decides.
    retry_delay: float | None = None
    #: A failure no retry can mend: final, whatever retries are left.
    terminal: bool = False


def not_registered(name: str) -> Outcome:
    """The final failure of a captured task that this worker does not know."""
    # Final: another attempt would be captured by a worker like this one, most likely.
    error = f"task {name!r} is not registered in this worker"
    return Outcome(Status.FAILED, error=error, terminal=True)


def undecodable(task: Task) -> Outcome | None:
    """The final failure of a captured task whose stored arguments jobq cannot decode."""
    if not isinstance(task.args, Undecodable):
        return None
    error = f"its arguments could not be decoded (not JSON: {task.args.reason})"
    return Outcome(Status.FAILED, error=error, terminal=True)


def run_sync(
    definition: TaskDefinition,
    args: Mapping[str, Any],
    attempt: int,
    *,
    task: Task | None = None,
) -> Outcome:
    """Call a synchronous task function with ``args``, logging its start and end.

    ``task``, the captured row when there is one, is what current_task() returns
    meanwhile and names the run in the log lines.
    """
    started = _log_start(definition, attempt, task)
    token = _current_task.set(task)
    try:
        outcome = _returned(definition, definition.func(**args), attempt)
    except Exception as error:
        outcome = _failure(definition, error, attempt)
    finally:
        _current_task.reset(token)
    outcome = _in_time(definition, attempt, started, outcome)
    log_end(definition, attempt, task, outcome, time.perf_counter() - started)
    return outcome


async def run_async(
    definition: TaskDefinition,
    args: Mapping[str, Any],
    attempt: int,
    *,
    task: Task | None = None,
) -> Outcome:
    """Await an async task function with ``args``, cancelling it after its timeout.

    ``task`` is as for run_sync (current_task() is set in this coroutine's context).
    """
    started = _log_start(definition, attempt, task)
    _current_task.set(task)  # each asyncio task runs in a copy of the context
    try:
        # In this task, not one of wait_for's: cancelling the run cancels the code itself,
        # and a run that swallows its cancellation is waited for, never left behind.
        async with asyncio.timeout(definition.timeout):
            result = await definition.func(**args)
        outcome = _returned(definition, result, attempt)
    except TimeoutError:
        outcome = timed_out(definition, attempt)
    except Exception as error:
        outcome = _failure(definition, error, attempt)
    except asyncio.CancelledError:
        if task is None or not task.cancel_requested:
            raise  # the worker stopping it: not an end to record
        outcome = CANCELLED_ON_REQUEST
    # It blocked the event loop past its timeout, or swallowed its cancellation.
    outcome = _in_time(definition, attempt, started, outcome)
    log_end(definition, attempt, task, outcome, time.perf_counter() - started)
    return outcome


def _log_start(definition: TaskDefinition, attempt: int, task: Task | None) -> float:
    """Log a run's start (one line); its start on the perf_counter clock."""
    if log.isEnabledFor(logging.INFO):
        fields = _fields(definition, attempt, task)
        _start_lines.log(
            logging.INFO, "task %s %s attempt %d started",
            (fields["task_id"], definition.name, attempt), fields,
        )  # fmt: skip
    return time.perf_counter()


def _fields(definition: TaskDefinition, attempt: int, task: Task | None) -> dict[str, Any]:
    """The fields every line about a run has (see jobq.worker.logs.FIELDS)."""
    return {
        "task_id": None if task is None else task.id, "task": definition.name,
        "queue": definition.queue if task is None else task.queue_id, "attempt": attempt,
    }  # fmt: skip


def log_end(
    definition: TaskDefinition,
    attempt: int,
    task: Task | None,
    outcome: Outcome,
    seconds: float,
) -> None:
    """Log a run's end (one line per run that started): its status and duration
    (``seconds``); a failure as a warning that says which attempt of how many it was, and
    whether and when the task runs again.

    The run itself logs it as its code returns (run_sync, run_async); jobq.pool logs it
    for a run whose child process was killed or died before it could."""
    level = logging.WARNING if outcome.status is Status.FAILED else logging.INFO
    if not log.isEnabledFor(level):
        return
    duration_ms = round(seconds * 1000, 3)
    fields = _fields(definition, attempt, task)
    fields.update(status=outcome.status.value, duration_ms=duration_ms)
    why = ""
    if outcome.error is not None:
        fields["error"] = outcome.error.strip().splitlines()[-1]
        why = f": {fields['error']}"
    if outcome.status is Status.FAILED:
        ended = _failure_words(duration_ms, attempt, task, outcome, fields)
        _end_lines.log(
            level, "task %s %s %s%s", (fields["task_id"], definition.name, ended, why), fields
        )
        return
    # A run ending queued is one that snoozed (jobq.Snooze).
    ended = "snoozed" if outcome.status is Status.QUEUED else outcome.status.value
    _end_lines.log(
        level, "task %s %s attempt %d %s in %s ms%s",
        (fields["task_id"], definition.name, attempt, ended, duration_ms, why),
        fields,
    )  # fmt: skip


def _failure_words(
    duration_ms: float, attempt: int, task: Task | None, outcome: Outcome, fields: dict[str, Any]
) -> str:
    """What came of a failed run and what comes next, in words: ``failed in 3.1 ms
    (attempt 2 of 4), retrying in 8.0s at 10:32:05``, or ``failed for good in 3.1 ms
    (attempt 4 of 4)``. Adds the matching fields to ``fields`` (see jobq.worker.logs.FIELDS)."""
    took = f"in {duration_ms} ms"
    if task is None:  # run outside a worker: nothing says what comes next
        return f"failed {took} (attempt {attempt})"
    # Each capture of a retry spends one of retries_left: this is the last one possible.
    last = attempt + task.retries_left
    fields.update(max_attempts=last, final=outcome.terminal or task.retries_left <= 0)
    of = f"(attempt {attempt} of {last})"
    if fields["final"] and task.recurring:
        return f"failed {took} {of}, no retry left; its schedule runs it at its next tick"
    if fields["final"]:
        return f"failed for good {took} {of}"
    if outcome.retry_delay is None:  # the Store's backoff decides
        return f"failed {took} {of}, retrying later"
    delay = max(outcome.retry_delay, 0.0)
    fields.update(
        retry_in=round(delay, 3),
        retry_at=datetime.fromtimestamp(time.time() + delay, UTC).isoformat(timespec="seconds"),
    )
    return f"failed {took} {of}, retrying {in_and_at(delay)}"


def run(
    registry: Registry,
    name: str,
    args: Mapping[str, Any],
    attempt: int,
    *,
    task: Task | None = None,
) -> Outcome:
    """Run task ``name`` to completion in this thread (async ones on a fresh event loop)."""
    definition = registry.get(name)
    if definition is None:
        return not_registered(name)
    if task is not None and (failure := undecodable(task)) is not None:
        return failure
    if task is not None:
        definition = definition.with_timeout(task.timeout)  # a timeout given at enqueue wins
    if definition.is_async:
        return asyncio.run(run_async(definition, args, attempt, task=task))
    return run_sync(definition, args, attempt, task=task)


def escaped(
    definition: TaskDefinition,
    attempt: int,
    task: Task | None,
    error: BaseException,
    seconds: float,
) -> Outcome:
    """The outcome of a run whose code raised ``error``, a BaseException that run_sync lets
    through (sys.exit() in a task, say), ``seconds`` after it began: failed, with its end
    line logged (run_sync logged none)."""
    outcome = Outcome(Status.FAILED, error=f"{type(error).__name__}: {error}")
    log_end(definition, attempt, task, outcome, seconds)
    return outcome


def timed_out(definition: TaskDefinition, attempt: int, *, killed: bool = False) -> Outcome:
    """The outcome of a run that exceeded the task's timeout (``killed``: its process was
    killed to stop it, jobq.pool)."""
    return Outcome(
        Status.FAILED,
        error=f"timed out after {definition.timeout:g} s" + (" (killed)" if killed else ""),
        retry_delay=definition.retry_delay(attempt),
    )


def _in_time(definition: TaskDefinition, attempt: int, started: float, outcome: Outcome) -> Outcome:
    """``outcome``, unless the run took longer than its timeout: then it timed out, however
    it ended (a worker treats it so too, see Worker._expire_timeouts)."""
    timeout = definition.timeout
    if outcome.status is Status.CANCELLED:  # what was asked for, however long it took
        return outcome
    if timeout is None or time.perf_counter() - started <= timeout:
        return outcome
    return timed_out(definition, attempt)


def _returned(definition: TaskDefinition, result: Any, attempt: int) -> Outcome:
    """Done with ``result``; failed if the result cannot be stored (not JSON, say)."""
    problem = result_problem(result)
    if problem is None:
        return Outcome(Status.DONE, result=result)
    return Outcome(
        Status.FAILED,
        error=f"task {definition.name!r} returned a result that {problem}",
        retry_delay=definition.retry_delay(attempt),
    )


#: How a run that saw its cancel request (jobq.check_cancelled, or CancelledError) ends.
CANCELLED_ON_REQUEST = Outcome(Status.CANCELLED, error=CANCELLED_ERROR)


def _failure(definition: TaskDefinition, error: Exception, attempt: int) -> Outcome:
    if isinstance(error, Snooze):  # back to waiting: no retry spent, no error kept
        return Outcome(Status.QUEUED, retry_delay=error.seconds)
    if isinstance(error, Cancelled):
        return CANCELLED_ON_REQUEST
    if isinstance(error, Retry):
        delay = definition.retry_delay(attempt) if error.delay is None else error.delay
        return Outcome(Status.FAILED, error=f"Retry: {error.reason}", retry_delay=delay)
    if (raised := RAISED.get(None)) is not None:
        raised(error)
    return Outcome(
        Status.FAILED,
        error="".join(traceback.format_exception(error)),
        retry_delay=definition.retry_delay(attempt),
    )
