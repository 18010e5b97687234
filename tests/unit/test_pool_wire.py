"""The frames between a worker and its pool children (jobq/pool/wire.py) give back exactly
what was put in: a task row with every field set, outcomes whose results and errors hold
what a task can put in a str, and progress reports."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobq.db.tasks import Status, Task
from jobq.pool import wire
from jobq.worker.executor import Outcome

NUL, SURROGATE = "\x00", "\udcff"
#: Values a result may hold: NUL, lone surrogates, nesting, big ints, awkward floats.
AWKWARD: dict[str, Any] = {
    "nul": f"a{NUL}b",
    "surrogates": [SURROGATE, "\ud800", f"x{SURROGATE}y"],
    "astral": "\U0001f600",
    "nested": {"a": [[1, [2, {"b": None}]], {"c": [True, False, {}]}], "": []},
    "ints": [2**64, -(2**200), 10**4000],
    "floats": [0.1, -0.0, 1e308, 5e-324, 1.7976931348623157e308, 123456789.0123456789],
}


def test_a_task_with_every_field_set_survives_its_frame() -> None:
    """Every field of Task (aware UTC datetimes with microseconds, progress, trace context,
    workflow id, a prior result and error) and the timeout come back equal and typed."""
    moment = datetime(2024, 2, 29, 23, 59, 58, 123456, tzinfo=UTC)
    task = Task(
        id=2**40, queue_id="q:ü", name="pool.task", args={"a": [1, {"b": f"c{NUL}"}], "n": 2**70},
        status=Status.IN_PROGRESS, priority=-5, run_at=moment, retries_left=2, attempt=3,
        lease=12.5, timeout=1.25, locked_by="host:1:abc",
        locked_until=moment + timedelta(seconds=30),
        unique_key="u:1", lock_key="l:1", result=AWKWARD, error=f"earlier{NUL}error",
        recurring=True, created_at=moment - timedelta(days=400),
        started_at=moment + timedelta(microseconds=1), finished_at=moment + timedelta(hours=1),
        progress={"current": 2.5, "total": 10, "message": "half"},
        cancel_requested_at=moment + timedelta(seconds=2), awaited=True,
        trace_context={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"},
        workflow_id=2**33,
    )  # fmt: skip
    back, timeout = wire.read_task(wire.task_frame(task, 7.5))
    assert back == task
    assert timeout == 7.5
    assert type(back.status) is Status and back.run_at.tzinfo is not None
    assert wire.read_task(wire.task_frame(task, None))[1] is None


@pytest.mark.parametrize(
    "outcome",
    [
        Outcome(Status.DONE, result=AWKWARD),
        Outcome(Status.DONE, result="r" * 20_000_000),
        Outcome(Status.DONE, result=f"{NUL}{SURROGATE}{NUL}"),
        Outcome(Status.DONE, result=None),
        Outcome(Status.FAILED, error=f"Traceback:\nValueError: {NUL}{SURROGATE}", retry_delay=1.5),
        Outcome(Status.FAILED, error="worker child died: signal 9 (SIGKILL)", terminal=True),
        Outcome(Status.QUEUED, retry_delay=0.0),
        Outcome(Status.CANCELLED, error="cancelled on request"),
    ],
    ids=["awkward", "20 MB", "nul-surrogate", "none", "error", "terminal", "snooze", "cancel"],
)
def test_an_outcome_survives_its_frame(outcome: Outcome) -> None:
    """outcome_frame -> read_reply -> outcome_of gives back an equal Outcome (and the
    child's peak memory beside it)."""
    reply = wire.read_reply(wire.outcome_frame(outcome, 123_456))
    assert reply["max_rss_kib"] == 123_456
    assert wire.outcome_of(reply) == outcome


def test_a_split_surrogate_pair_survives_its_frame() -> None:
    """An error holding a high and a low surrogate side by side, each on its own (two
    characters), comes back with those two characters: not joined into the one character
    past U+FFFF that the escapes \\ud83d\\ude00 also spell. (A result holding them never
    crosses: the child's executor refuses it first.)"""
    split = "pair " + chr(0xD83D) + chr(0xDE00) + " split"
    outcome = Outcome(Status.FAILED, error=f"Traceback:\nValueError: {split}\n")
    assert wire.outcome_of(wire.read_reply(wire.outcome_frame(outcome, 1))) == outcome


def test_progress_reports_survive_their_frame() -> None:
    """Reports by (id, attempt) come back as [id, attempt, report] each, equal."""
    reports = {
        (1, 1): {"current": 3, "total": 10, "message": f"three {SURROGATE}"},
        (2**40, 7): {"current": 0.5, "total": None, "message": None},
    }
    reply = wire.read_reply(wire.progress_frame(reports))
    assert {(task_id, attempt): report for task_id, attempt, report in reply["progress"]} == (
        reports
    )
