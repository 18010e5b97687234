"""The jobq app bench_worker.py runs: a no-op sync task and a no-op async task.

The database is $JOBQ_DATABASE_URL (bench_worker.py points it at a schema of its own, or
a temporary SQLite file).

    python -m jobq.cli worker --app benchmarks.noop_app:app --burst --concurrency 10
"""

from __future__ import annotations

import asyncio
import time

import jobq

app = jobq.App()


@app.task(name="bench.noop")
def noop(n: int = 0) -> None:
    return None


@app.task(name="bench.noop_async")
async def noop_async(n: int = 0) -> None:
    return None


@app.task(name="bench.sleep")
def sleep(ms: float = 0) -> None:
    """Hold a slot for ``ms`` milliseconds (limit_drain.py: a limit that binds)."""
    time.sleep(ms / 1000)


@app.task(name="bench.sleep_async")
async def sleep_async(ms: float = 0) -> None:
    """Hold a slot of the event loop for ``ms`` milliseconds (sustained_load.py)."""
    await asyncio.sleep(ms / 1000)
