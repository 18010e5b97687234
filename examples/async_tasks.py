"""Async tasks run concurrently on the worker's event loop; a timeout cancels them.

python examples/async_tasks.py
"""

from __future__ import annotations

import asyncio
import os
import time

import sqlalchemy as sa

import jobq
from jobq.dialects.schema import tasks
from jobq.worker import Worker

# A SQLite file of its own, so that another example run in the same directory never meets
# these tasks (its worker would fail them as not registered); $JOBQ_DATABASE_URL if set.
app = jobq.App(os.environ.get("JOBQ_DATABASE_URL") or "sqlite:///examples-async-tasks.db")


@app.task(timeout=2)
async def fetch(page: int, seconds: float) -> str:
    await asyncio.sleep(seconds)  # stands in for an HTTP call
    return f"page {page} after {seconds} s"


def start_afresh() -> None:
    """Create or upgrade jobq's tables, then delete the tasks earlier runs of this example
    left (its own tasks only), so that every run starts from an empty queue."""
    app.migrate()
    names = [definition.name for definition in app.registry]
    with app.store.engine.begin() as conn:
        conn.execute(sa.delete(tasks).where(tasks.c.name.in_(names)))


def main() -> None:
    start_afresh()
    fetch.enqueue_many([{"page": n, "seconds": 0.5} for n in range(10)])
    fetch.enqueue(page=99, seconds=10)  # longer than its timeout: cancelled, then failed
    started = time.monotonic()
    Worker(app, concurrency=16, burst=True, poll_interval=0.05).run()
    print(f"11 tasks of 0.5-10 s finished in {time.monotonic() - started:.1f} s")
    for task in reversed(app.store.list_tasks(limit=11)):
        print(f"task {task.id}: {task.status} -> {task.result or task.error!r}")


if __name__ == "__main__":
    main()
