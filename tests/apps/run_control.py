"""A test app whose tasks report progress, check for cancellation, snooze and wait."""

from __future__ import annotations

import asyncio
import time

import jobq

app = jobq.App()


@app.task(retries=3)
def steps(n: int, pause: float) -> int:
    """``n`` steps of ``pause`` s, reporting each and stopping when cancelled."""
    for i in range(n):
        jobq.set_progress(i + 1, n, f"step {i + 1}")
        jobq.check_cancelled()
        time.sleep(pause)
    return n


@app.task(retries=3)
async def nap(seconds: float) -> str:
    """An async task: cancelled on request while it awaits."""
    await asyncio.sleep(seconds)
    return "rested"


@app.task(retries=3)
def notices(seconds: float) -> str:
    """Returns as soon as it sees its cancel request: a run that finishes despite it."""
    task = jobq.current_task()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if task is not None and task.cancel_requested:
            return "saw the request"
        time.sleep(0.01)
    return "never asked"


@app.task(retries=3)
def snoozer(times: int) -> int:
    """Snoozes ``times`` times, then returns the attempt it ran at."""
    task = jobq.current_task()
    assert task is not None
    if task.attempt <= times:
        raise jobq.Snooze(0.05)
    return task.attempt


@app.task(queue="narrow", retries=3)
def hold(seconds: float) -> str:
    """Runs in queue 'narrow' (a test limits it to one at a time) until cancelled."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        jobq.check_cancelled()
        time.sleep(0.01)
    return "held"
