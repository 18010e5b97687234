"""The jobq app bench_worker.py runs: a no-op sync task and a no-op async task.

The database is $JOBQ_DATABASE_URL (bench_worker.py points it at a schema of its own, or
a temporary SQLite file).

    python -m jobq.cli worker --app benchmarks.noop_app:app --burst --concurrency 10
"""

from __future__ import annotations

import jobq

app = jobq.App()


@app.task(name="bench.noop")
def noop(n: int = 0) -> None:
    return None


@app.task(name="bench.noop_async")
async def noop_async(n: int = 0) -> None:
    return None
