"""The wording of the worker's log lines: pure functions of jobq.logs."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from jobq.logs import in_and_at, seconds, stopped_summary


def test_delays_read_as_seconds_under_a_minute_and_units_beyond() -> None:
    assert [seconds(s) for s in (0, 8, 59.94, 125, 3 * 3600)] == [
        "0.0s", "8.0s", "59.9s", "2m 5s", "3h",
    ]  # fmt: skip


def test_in_and_at_gives_the_local_time_and_the_date_only_when_not_today() -> None:
    morning = datetime(2026, 11, 24, 10, 31, 57).timestamp()
    assert in_and_at(8, now=morning) == "in 8.0s at 10:32:05"
    evening = datetime(2026, 11, 24, 23, 59, 0).timestamp()
    assert in_and_at(120, now=evening) == "in 2m at 2026-11-25 00:01:00"


def test_the_stopped_summary_is_a_sentence_without_zero_counts() -> None:
    stats = Counter(captured=10, done=8, failed=2, timed_out=0, rescued=1, slot_expired=3)
    assert stopped_summary(stats) == (
        "captured 10 tasks (8 done, 2 failed, 1 rescued after their leases expired, "
        "slot expired: 3)"
    )
    assert stopped_summary(Counter(captured=1, done=1)) == "captured 1 task (1 done)"
    assert stopped_summary(Counter()) == "captured 0 tasks"
