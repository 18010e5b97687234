"""How a schedule's run is named in its history, and the one line of its error."""

from __future__ import annotations

import traceback
from datetime import UTC, datetime

import pytest

from jobq.cron.runs import ScheduleRun, run_status
from jobq.db.tasks import Status

AT = datetime(2026, 1, 1, tzinfo=UTC)


def run_with(error: str | None) -> ScheduleRun:
    return ScheduleRun(
        schedule="s", task_id=1, attempt=1, status="failed", started_at=AT, finished_at=AT,
        error=error,
    )  # fmt: skip


def stored(error: BaseException) -> str:
    """The error a worker stores for a task that raised ``error``."""
    try:
        raise error
    except BaseException as raised:
        return "".join(traceback.format_exception(raised))


@pytest.mark.parametrize(
    ("status", "error", "expected"),
    [
        (Status.DONE, None, "done"),
        (Status.FAILED, "boom", "failed"),
        (Status.FAILED, None, "failed"),
        (Status.FAILED, "timed out after 1.5 s", "timed out"),
        (Status.FAILED, "Traceback ...\nError: timed out after 3 s", "failed"),
        (Status.CANCELLED, "not today", "cancelled"),
        (Status.QUEUED, None, "released"),
    ],
)
def test_run_status(status: Status, error: str | None, expected: str) -> None:
    assert run_status(status, error) == expected


def test_an_end_by_rescue_is_a_lease_expired() -> None:
    assert run_status(Status.FAILED, "lease expired", lease_expired=True) == "lease expired"


def test_every_run_status_fits_its_column() -> None:
    names = {run_status(s, None) for s in (Status.DONE, Status.FAILED, Status.QUEUED)}
    names |= {run_status(Status.CANCELLED, None), run_status(Status.FAILED, "timed out after 1 s")}
    names.add(run_status(Status.FAILED, None, lease_expired=True))
    assert len(names) == 6 and max(map(len, names)) <= 16  # jobq_schedule_runs.status


def chained() -> BaseException:
    try:
        raise KeyError("inner")
    except KeyError as inner:
        outer = RuntimeError("outer")
        outer.__cause__ = inner
        return outer


def noted() -> BaseException:
    error = ValueError("with a note")
    error.add_note("see the runbook")
    return error


@pytest.mark.parametrize(
    ("error", "summary"),
    [
        (None, None),
        ("", None),
        (" \n\n", None),
        ("lease expired", "lease expired"),
        ("timed out after 2 s", "timed out after 2 s"),
        ("  first line  \nsecond line", "first line"),
        (stored(ValueError("bad value")), "ValueError: bad value"),
        # The exception's line, not the last of a message over several lines.
        (stored(ValueError("line one\nline two\nline three")), "ValueError: line one"),
        # The last exception of a chain, not its cause.
        (stored(chained()), "RuntimeError: outer"),
        (stored(noted()), "ValueError: with a note"),
        (
            stored(ExceptionGroup("several", [ValueError("a"), TypeError("b")])),
            "ExceptionGroup: several (2 sub-exceptions)",
        ),
        # A traceback cut short: its last line.
        ('Traceback (most recent call last):\n  File "x.py", line 1', 'File "x.py", line 1'),
    ],
)
def test_error_summary(error: str | None, summary: str | None) -> None:
    assert run_with(error).error_summary == summary
