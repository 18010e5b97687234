"""Running one task to an Outcome, without a database."""

from __future__ import annotations

import asyncio

import pytest

import jobq
from jobq import Status
from jobq.core.registry import Registry, TaskDefinition
from jobq.core.retry import FixedBackoff
from jobq.worker import executor


def registry_with(*definitions: TaskDefinition) -> Registry:
    registry = Registry()
    for definition in definitions:
        registry.add(definition)
    return registry


def add(a: int, b: int) -> int:
    return a + b


def explode(message: str) -> None:
    raise ValueError(message)


def again(delay: float | None) -> None:
    raise jobq.Retry(delay=delay, reason="rate limited")


async def slow_add(a: int, b: int, pause: float = 0) -> int:
    await asyncio.sleep(pause)
    return a + b


BACKOFF = FixedBackoff(7)
REGISTRY = registry_with(
    TaskDefinition(name="add", func=add),
    TaskDefinition(name="explode", func=explode, backoff=BACKOFF),
    TaskDefinition(name="again", func=again, backoff=BACKOFF),
    TaskDefinition(name="slow_add", func=slow_add, timeout=0.2, backoff=BACKOFF),
)


def test_success_returns_the_result() -> None:
    assert executor.run(REGISTRY, "add", {"a": 2, "b": 3}, 1) == executor.Outcome(
        Status.DONE, result=5
    )


def test_failure_keeps_the_traceback_and_takes_the_backoff() -> None:
    outcome = executor.run(REGISTRY, "explode", {"message": "boom"}, 1)
    assert outcome.status is Status.FAILED and outcome.retry_delay == 7
    assert "Traceback" in outcome.error and "ValueError: boom" in outcome.error  # type: ignore[operator]
    assert "def explode" not in outcome.error and "explode" in outcome.error  # type: ignore[operator]


def test_retry_sets_its_own_delay_or_falls_back_to_the_backoff() -> None:
    assert executor.run(REGISTRY, "again", {"delay": 2.5}, 1) == executor.Outcome(
        Status.FAILED, error="Retry: rate limited", retry_delay=2.5
    )
    assert executor.run(REGISTRY, "again", {"delay": None}, 3).retry_delay == 7


def test_async_tasks_run_and_are_cancelled_at_their_timeout() -> None:
    assert executor.run(REGISTRY, "slow_add", {"a": 1, "b": 2}, 1).result == 3
    outcome = executor.run(REGISTRY, "slow_add", {"a": 1, "b": 2, "pause": 5}, 1)
    assert outcome == executor.Outcome(Status.FAILED, error="timed out after 0.2 s", retry_delay=7)


def test_an_unregistered_name_fails_once_for_good_and_says_so() -> None:
    outcome = executor.run(REGISTRY, "os.system", {"command": "true"}, 1)
    assert outcome == executor.Outcome(
        Status.FAILED, error="task 'os.system' is not registered in this worker", terminal=True
    )


def test_a_result_that_is_not_json_is_a_failure_naming_the_task() -> None:
    registry = registry_with(
        TaskDefinition(name="gives_a_set", func=lambda: {1}, backoff=BACKOFF),
    )
    outcome = executor.run(registry, "gives_a_set", {}, 1)
    assert outcome.status is Status.FAILED and outcome.retry_delay == 7
    assert outcome.error is not None
    assert outcome.error.startswith("task 'gives_a_set' returned a result that is not JSON: ")


class RaisingBackoff:
    """A policy whose every delay raises (a bug in the user's policy)."""

    def delay(self, attempt: int) -> float:
        raise AttributeError("'int' object has no attribute 'delay'")


def test_a_failing_backoff_keeps_the_tasks_own_error_and_its_failure_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = registry_with(TaskDefinition(name="explode", func=explode, backoff=RaisingBackoff()))
    with caplog.at_level("INFO"):
        outcome = executor.run(registry, "explode", {"message": "boom"}, 1)
    assert outcome.status is Status.FAILED and "ValueError: boom" in (outcome.error or "")
    assert outcome.retry_delay is not None and 0 <= outcome.retry_delay <= 1
    assert "has no attribute" not in (outcome.error or "")
    lines = {record.name: record.getMessage() for record in caplog.records}
    assert "backoff" in lines["jobq.retry"] and "AttributeError" in lines["jobq.retry"]
    assert "explode failed in" in lines["jobq.task"] and "ValueError: boom" in lines["jobq.task"]
