"""A pool child's stop (the SIGTERM its worker sends at a timeout or a cancel) and the
run's end line: once the child logged the end line of its run, a stop no longer kills
it, so its outcome reaches the worker and the worker logs no second end line."""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator

import pytest

from jobq import Status
from jobq.core.registry import TaskDefinition
from jobq.pool import child
from jobq.worker import executor
from jobq.worker.executor import Outcome


def noop() -> None:
    return None


@pytest.fixture
def task_log() -> Iterator[None]:
    """The jobq.task logger as a child sets it up: at INFO, its end lines noted."""
    logger = logging.getLogger("jobq.task")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addFilter(child._note_end_line)
    child._end_logged = False
    yield
    logger.removeFilter(child._note_end_line)
    logger.setLevel(level)
    child._end_logged = False


def test_a_stop_raises_in_the_run_until_its_end_line_is_logged(task_log: None) -> None:
    definition = TaskDefinition(name="noop", func=noop)
    executor.run_sync(definition, {}, 1)  # a start line and an end line: a run's whole log
    assert child._end_logged
    child._exit_now(signal.SIGUSR1, None)  # ignored: the run is over in this child

    child._end_logged = False  # the next run begins
    logging.getLogger("jobq.task").info("task 1 noop attempt 2 started")  # no status
    with pytest.raises(child._Stopped):
        child._exit_now(signal.SIGUSR1, None)

    executor.log_end(definition, 2, None, Outcome(Status.DONE), 0.001)
    child._exit_now(signal.SIGUSR1, None)
