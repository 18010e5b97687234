"""outcome_label: the outcome a worker's metrics give each way a run ends."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from jobq.db.tasks import CANCEL_REQUESTED, Status, Task
from jobq.worker.executor import CANCELLED_ON_REQUEST, Outcome
from jobq.worker.observers import outcome_label
from jobq.worker.runner import Run

NOW = datetime(2026, 11, 25, tzinfo=UTC)
TASK = Task(
    1, "default", "t", {}, Status.IN_PROGRESS, 0, NOW, 2, 1, None, None, "w", NOW, None,
    None, None, None, False, NOW, NOW, None,
)  # fmt: skip


def run_of(task: Task = TASK, timed_out: bool = False) -> Run:
    return Run(task, None, None, timed_out=timed_out)


@pytest.mark.parametrize(
    ("outcome", "retries_left", "expected"),
    [
        (Outcome(Status.DONE, result=1), 2, "done"),
        (Outcome(Status.FAILED, error="boom"), 2, "retried"),
        (Outcome(Status.FAILED, error="boom"), 0, "failed"),
        (Outcome(Status.FAILED, error="undecodable", terminal=True), 2, "failed"),
        (Outcome(Status.FAILED, error="timed out after 1 s"), 2, "timed_out"),
        (Outcome(Status.QUEUED, retry_delay=5), 2, "snoozed"),
        (CANCELLED_ON_REQUEST, 2, "cancelled"),
    ],
)
def test_each_end_has_its_outcome(outcome: Outcome, retries_left: int, expected: str) -> None:
    run = run_of(dataclasses.replace(TASK, retries_left=retries_left))
    assert outcome_label(run, outcome) == expected


def test_a_run_past_its_timeout_is_timed_out_however_it_failed() -> None:
    assert outcome_label(run_of(timed_out=True), Outcome(Status.FAILED, error="x")) == "timed_out"


def test_with_a_cancel_pending_an_end_that_would_wait_again_is_a_cancel() -> None:
    CANCEL_REQUESTED.add(TASK.fence)
    try:
        assert outcome_label(run_of(), Outcome(Status.FAILED, error="boom")) == "cancelled"
        assert outcome_label(run_of(), Outcome(Status.QUEUED)) == "cancelled"
        assert outcome_label(run_of(), Outcome(Status.DONE)) == "done"
        last = run_of(dataclasses.replace(TASK, retries_left=0))
        assert outcome_label(last, Outcome(Status.FAILED, error="boom")) == "failed"
    finally:
        CANCEL_REQUESTED.discard(TASK.fence)
