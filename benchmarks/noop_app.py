"""The jobq app bench_worker.py runs: one no-op sync task.

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
