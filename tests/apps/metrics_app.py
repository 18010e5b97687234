"""A test app whose tasks end every way a run can: done, failed, retried, snoozed, timed
out and cancelled, for the worker's Prometheus metrics."""

from __future__ import annotations

import time

import jobq
from jobq.core.retry import FixedBackoff

app = jobq.App()


@app.task(queue="fast")
def ok(n: int) -> int:
    return n


@app.task(retries=1, backoff=FixedBackoff(0))
def boom() -> None:
    """Fails both of its attempts: one retried, then failed for good."""
    raise RuntimeError("boom")


@app.task()
def nap_once() -> int:
    """Snoozes its first attempt, is done on its second."""
    task = jobq.current_task()
    assert task is not None
    if task.attempt == 1:
        raise jobq.Snooze(0)
    return task.attempt


@app.task(retries=0, timeout=0.2)
def overrun() -> None:
    time.sleep(0.6)


@app.task()
def until_cancelled() -> None:
    while True:
        jobq.check_cancelled()
        time.sleep(0.01)
