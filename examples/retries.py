"""Retries with exponential backoff, and a task that asks to be retried with jobq.Retry.

python examples/retries.py
"""

from __future__ import annotations

import os
import time

import sqlalchemy as sa

import jobq
from jobq.dialects.schema import tasks
from jobq.worker import Worker

# A SQLite file of its own, so that another example run in the same directory never meets
# these tasks (its worker would fail them as not registered); $JOBQ_DATABASE_URL if set.
app = jobq.App(os.environ.get("JOBQ_DATABASE_URL") or "sqlite:///examples-retries.db")
attempts: dict[str, int] = {}


@app.task(retries=3, backoff=jobq.ExponentialBackoff(base=0.1, factor=2, jitter=0.5))
def flaky_upload(name: str, fail_times: int) -> str:
    """Fails ``fail_times`` times, then succeeds; waits 0.1 s, 0.2 s, 0.4 s... in between."""
    attempts[name] = attempts.get(name, 0) + 1
    if attempts[name] <= fail_times:
        raise ConnectionError(f"upload of {name} failed (attempt {attempts[name]})")
    return f"{name} uploaded after {attempts[name]} attempt(s)"


@app.task(retries=5)
def poll_report(report: str) -> str:
    """Asks to be run again in 0.2 s until the report is ready (here: the third time)."""
    attempts[report] = attempts.get(report, 0) + 1
    if attempts[report] < 3:
        raise jobq.Retry(delay=0.2, reason=f"{report} not ready yet")
    return f"{report} ready"


def start_afresh() -> None:
    """Create or upgrade jobq's tables, then delete the tasks earlier runs of this example
    left (its own tasks only), so that every run starts from an empty queue."""
    app.migrate()
    names = [definition.name for definition in app.registry]
    with app.store.engine.begin() as conn:
        conn.execute(sa.delete(tasks).where(tasks.c.name.in_(names)))


def settled(task_ids: list[int]) -> bool:
    """Whether every task has ended: done, or failed with no retries left."""
    tasks = [app.store.get(task_id) for task_id in task_ids]
    return all(task is not None and task.finished_at is not None for task in tasks)


def main() -> None:
    start_afresh()
    ids = [
        flaky_upload.enqueue(name="a.png", fail_times=2),  # succeeds on the third attempt
        flaky_upload.enqueue(name="b.png", fail_times=9),  # 4 attempts, then fails for good
        poll_report.enqueue(report="monthly"),
    ]
    # A burst worker stops when nothing is due; retries wait for their backoff, so run
    # bursts until every task has ended.
    while not settled(ids):
        Worker(app, burst=True, poll_interval=0.05).run()
        time.sleep(0.05)
    for task in (app.store.get(task_id) for task_id in ids):
        assert task is not None
        outcome = task.result if task.status == "done" else (task.error or "").splitlines()[-1]
        print(f"task {task.id} {task.args}: {task.status}, {task.attempt} attempt(s): {outcome}")


if __name__ == "__main__":
    main()
