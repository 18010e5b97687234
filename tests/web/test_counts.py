"""The dashboard's background counts: refreshed by their own threads, and a failed count
said without the database's credentials."""

from __future__ import annotations

import time

import jobq
from jobq.observe.counting import ACTIVE_PART, FINISHED_PART, BackgroundCounts
from tests.web.conftest import Rows


def wait_for(check: object, seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "not refreshed in time"
        time.sleep(0.05)


def test_counts_refresh_in_the_background(store: jobq.Store, rows: Rows) -> None:
    counts = BackgroundCounts(store, interval=0.1, finished_interval=0.1)
    try:
        first = counts.active()
        assert first is not None and first.tasks[("mail", "queued")] == 1
        wait_for(lambda: counts.finished() is not None)
        finished = counts.finished()
        assert finished is not None and finished.tasks[("reports", "failed")] == 1
        assert store.cancel(rows.queued)
        wait_for(lambda: counts.finished().tasks.get(("mail", "cancelled")) == 2)  # type: ignore[union-attr]
        wait_for(lambda: ("mail", "queued") not in counts.active().tasks)  # type: ignore[union-attr]
    finally:
        counts.stop()


def test_a_failed_count_is_said_without_credentials() -> None:
    store = jobq.Store("postgresql+psycopg://jobq:pa55-w0rd-xyz@127.0.0.1:9/jobq")
    counts = BackgroundCounts(store)
    try:
        assert not counts.refresh(FINISHED_PART)
        assert counts.active() is None and counts.finished() is None
        for part in (ACTIVE_PART, FINISHED_PART):
            error = counts.error(part)
            assert error and "pa55-w0rd-xyz" not in error
    finally:
        counts.stop()
        store.dispose()
