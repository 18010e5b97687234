"""Running one task to an Outcome. Never touches the database."""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobq.registry import Registry, TaskDefinition
from jobq.tasks import Status


class Retry(Exception):
    """Raised by a task to be run again after ``delay`` seconds (it spends a retry)."""

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


def not_registered(name: str) -> Outcome:
    """The outcome of a captured task that this worker does not know."""
    return Outcome(Status.FAILED, error=f"task {name!r} is not registered in this worker")


def run_sync(definition: TaskDefinition, args: Mapping[str, Any], attempt: int) -> Outcome:
    """Call a synchronous task function with ``args``."""
    try:
        result = definition.func(**args)
    except Exception as error:
        return _failure(definition, error, attempt)
    return Outcome(Status.DONE, result=result)


async def run_async(definition: TaskDefinition, args: Mapping[str, Any], attempt: int) -> Outcome:
    """Await an async task function with ``args``, cancelling it after its timeout."""
    try:
        result = await asyncio.wait_for(definition.func(**args), timeout=definition.timeout)
    except TimeoutError:
        return timed_out(definition, attempt)
    except Exception as error:
        return _failure(definition, error, attempt)
    return Outcome(Status.DONE, result=result)


def run(registry: Registry, name: str, args: Mapping[str, Any], attempt: int) -> Outcome:
    """Run task ``name`` to completion in this thread (async ones on a fresh event loop)."""
    definition = registry.get(name)
    if definition is None:
        return not_registered(name)
    if definition.is_async:
        return asyncio.run(run_async(definition, args, attempt))
    return run_sync(definition, args, attempt)


def timed_out(definition: TaskDefinition, attempt: int) -> Outcome:
    """The outcome of a run that exceeded the task's timeout."""
    return Outcome(
        Status.FAILED,
        error=f"timed out after {definition.timeout:g} s",
        retry_delay=definition.backoff.delay(attempt),
    )


def _failure(definition: TaskDefinition, error: Exception, attempt: int) -> Outcome:
    if isinstance(error, Retry):
        delay = definition.backoff.delay(attempt) if error.delay is None else error.delay
        return Outcome(Status.FAILED, error=f"Retry: {error.reason}", retry_delay=delay)
    return Outcome(
        Status.FAILED,
        error="".join(traceback.format_exception(error)),
        retry_delay=definition.backoff.delay(attempt),
    )
