"""A test app whose tasks define their own options, for enqueues made without it.

- ``report``: unique per day, queue ``reports``, priority 5, no retries; fails when
  $JOBQ_TEST_FAIL_REPORT is set (to count its attempts).
- ``ledger``: lock key per account.
- ``sleepy``: a 2 s lease (a killed worker's run comes back after 2 s, not 30).
- ``nap``: sleeps, with no timeout of its own; ``short_nap``: sleeps, timeout 0.5 s.
- ``ledger`` has a 60 s timeout too.
- ``unlucky``: fails every run with its own error, retried once after ``backoff=1`` (a
  plain number of seconds).
"""

from __future__ import annotations

import os
import time

import jobq

app = jobq.App()


@app.task(unique="report:{day}", queue="reports", priority=5, retries=0)
def report(day: str) -> str:
    if os.environ.get("JOBQ_TEST_FAIL_REPORT"):
        raise RuntimeError(f"no data for {day}")
    return f"report of {day}"


@app.task(lock="ledger:{account}", timeout=60)
def ledger(account: str, amount: int) -> int:
    return amount


@app.task(lease=2, retries=3)
def sleepy(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@app.task(retries=0, timeout=0.5)
def short_nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@app.task(retries=0)
def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@app.task(retries=1, backoff=1)
def unlucky(name: str) -> None:
    raise RuntimeError(f"no luck for {name}")
