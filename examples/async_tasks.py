"""Async tasks run concurrently on the worker's event loop; a timeout cancels them.

python examples/async_tasks.py
"""

from __future__ import annotations

import asyncio
import time

import jobq
from jobq.worker import Worker

app = jobq.App()


@app.task(timeout=2)
async def fetch(page: int, seconds: float) -> str:
    await asyncio.sleep(seconds)  # stands in for an HTTP call
    return f"page {page} after {seconds} s"


def main() -> None:
    app.migrate()
    fetch.enqueue_many([{"page": n, "seconds": 0.5} for n in range(10)])
    fetch.enqueue(page=99, seconds=10)  # longer than its timeout: cancelled, then failed
    started = time.monotonic()
    Worker(app, concurrency=16, burst=True, poll_interval=0.05).run()
    print(f"11 tasks of 0.5-10 s finished in {time.monotonic() - started:.1f} s")
    for task in reversed(app.store.list_tasks(limit=11)):
        print(f"task {task.id}: {task.status} -> {task.result or task.error!r}")


if __name__ == "__main__":
    main()
