"""Django tasks as jobq tasks: each ``@task`` a backend validates is registered in its jobq
App under its ``module_path``, as a function of ``args`` and ``kwargs`` (the row's JSON
arguments: ``{"args": [...], "kwargs": {...}}``) that a jobq worker runs.

The run sends Django's ``task_started`` and ``task_finished`` signals, passes a
``TaskContext`` to a task that takes one, stores the return value as jobq's result
(normalised as Django does) and lets an exception fail the jobq run.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Mapping
from inspect import iscoroutinefunction
from typing import Any

from django.db import close_old_connections
from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.signals import task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json

from jobq.contrib.django.results import result_of
from jobq.contrib.django.settings import DjangoApp
from jobq.core.registry import TaskDefinition
from jobq.core.retry import backoff_policy
from jobq.lifecycle.in_task import current_task

#: The options of a jobq task a backend's OPTIONS may set, for all its tasks (``RETRIES``
#: ...) or per task (``TASK_OPTIONS``: ``{module_path: {"retries": 5, "timeout": 60}}``).
TASK_OPTIONS = ("retries", "timeout", "lease", "backoff")
#: Retries when OPTIONS says none: Django's contract is one run; jobq's retries are asked for.
DEFAULT_RETRIES = 0

_TASKS: dict[tuple[int, str], Task] = {}
_LOCK = threading.Lock()


def register(app: DjangoApp, task: Task, backend: type, options: Mapping[str, Any]) -> None:
    """Register ``task`` (validated by a ``backend`` with ``options``) in ``app``, once."""
    name = task.module_path
    with _LOCK:
        if (id(app), name) in _TASKS:
            return
        _TASKS[(id(app), name)] = task
    own = dict(options.get("TASK_OPTIONS", {}).get(name, {}))
    settings = {key: own.get(key, options.get(key.upper())) for key in TASK_OPTIONS}
    retries = DEFAULT_RETRIES if settings["retries"] is None else settings["retries"]
    definition = TaskDefinition(
        name=name, func=runner(app, task, backend), queue=task.queue_name, retries=retries,
        timeout=settings["timeout"], lease=float(settings["lease"] or 30),
        backoff=backoff_policy(name, settings["backoff"]),
    )  # fmt: skip
    app.registry.add(definition)


def django_task(app: DjangoApp, name: str) -> Task | None:
    """The Django task registered in ``app`` as ``name`` (a module path), if any."""
    return _TASKS.get((id(app), name))


def runner(app: DjangoApp, task: Task, backend: type) -> Callable[..., Any]:
    """The jobq task function running ``task``: sync, or async for a coroutine function."""
    if iscoroutinefunction(task.func):

        async def run_async(args: list[Any], kwargs: dict[str, Any]) -> Any:
            result = _started(app, task, backend)
            try:
                given = (TaskContext(task_result=result), *args) if task.takes_context else args
                value = normalize_json(await task.func(*given, **kwargs))
            except BaseException as error:
                _finished(backend, result, error)
                raise
            _finished(backend, result, None, value)
            return value

        return run_async

    def run(args: list[Any], kwargs: dict[str, Any]) -> Any:
        close_old_connections()  # as at the start of a request: none broken nor too old
        result = _started(app, task, backend)
        try:
            given = (TaskContext(task_result=result), *args) if task.takes_context else args
            value = normalize_json(task.func(*given, **kwargs))
        except BaseException as error:
            _finished(backend, result, error)
            raise
        finally:
            close_old_connections()
        _finished(backend, result, None, value)
        return value

    return run


def _started(app: DjangoApp, task: Task, backend: type) -> TaskResult:
    """The RUNNING TaskResult of this run (from the row the worker captured); sends
    task_started."""
    row = current_task()
    if row is None:
        raise RuntimeError(f"{task.module_path} runs only in a jobq worker")
    result = result_of(task, row, backend=str(task.backend))
    task_started.send(sender=backend, task_result=result)
    return result


def _finished(
    backend: type, result: TaskResult, error: BaseException | None, value: Any = None
) -> None:
    """Send task_finished with this attempt's outcome (SUCCESSFUL, or FAILED with the
    error: jobq may still retry it, see get_result)."""
    object.__setattr__(result, "finished_at", timezone.now())
    if error is None:
        object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
        object.__setattr__(result, "_return_value", value)
    else:
        kind = type(error)
        path = f"{kind.__module__}.{kind.__qualname__}"
        text = "".join(traceback.format_exception(error))
        result.errors.append(TaskError(exception_class_path=path, traceback=text))
        object.__setattr__(result, "status", TaskResultStatus.FAILED)
    task_finished.send(sender=backend, task_result=result)
