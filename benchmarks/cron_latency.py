"""How late cron ticks start, and how many run, with several `jobq worker` processes.

Starts N workers (default 3) on tests/apps/cron.py, whose ``tick`` schedule fires every
second and records each run's tick and start time, lets them run for a while, stops
them with SIGTERM, and prints per database: runs, ticks run twice (must be 0), ticks
skipped, and the lag from tick to start (median, p95, max). The lag is what polling
costs: a worker notices a due tick at its next capture, within --poll-interval.

    .venv/bin/python benchmarks/cron_latency.py [--seconds 20] [--workers 3]
                                                [--poll-interval 0.5] [--only sqlite|postgresql]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sqlalchemy as sa

import jobq
from benchmarks.harness import (
    DEFAULT_POSTGRES_URL,
    ROOT,
    jobq_worker_cmd,
    own_database,
    worker_env,
)
from jobq.db.tasks import as_utc


def measure(url: str, seconds: float, workers: int, poll_interval: float) -> dict[str, object]:
    store = jobq.Store(url)
    store.migrate()
    os.environ["JOBQ_DATABASE_URL"] = url
    from tests.apps import cron as cron_app

    cron_app.LOG.create()  # its engines are per URL: each database gets its own
    env = worker_env(url, JOBQ_TEST_CRON="ticks")
    command = jobq_worker_cmd(
        "--poll-interval", str(poll_interval), "--log-level", "warning", app="tests.apps.cron:app"
    )
    processes = [
        subprocess.Popen(command, env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
        for _ in range(workers)
    ]
    try:
        while not store.schedules():
            time.sleep(0.05)
        time.sleep(seconds)
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            _, stderr = process.communicate(timeout=60)
            if process.returncode != 0:
                raise SystemExit(f"a worker failed:\n{stderr}")
    with cron_app.runs_engine().connect() as conn:
        rows = conn.execute(sa.select(cron_app.RUNS.c.tick, cron_app.RUNS.c.started)).all()
    cron_app.LOG.dispose()
    store.dispose()
    ticks = sorted(as_utc(tick) for tick, _ in rows)  # type: ignore[type-var]
    lags = sorted(started - as_utc(tick).timestamp() for tick, started in rows)  # type: ignore[union-attr]
    per_tick = Counter(ticks)
    span = (ticks[-1] - ticks[0]) // timedelta(seconds=1) + 1 if ticks else 0
    return {
        "runs": len(rows),
        "ticks run twice": sum(1 for n in per_tick.values() if n > 1),
        "ticks skipped": span - len(per_tick),
        "lag median ms": round(statistics.median(lags) * 1000, 1),
        "lag p95 ms": round(lags[int(len(lags) * 0.95) - 1] * 1000, 1),
        "lag max ms": round(lags[-1] * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--poll-interval", type=float, default=0.5)
    parser.add_argument("--only", choices=["sqlite", "postgresql"])
    args = parser.parse_args()
    results = {}
    schema = f"jobq_cron_{os.getpid()}"
    for kind, name in (("sqlite", "SQLite"), ("postgresql", "PostgreSQL")):
        if args.only in (None, kind):
            with own_database(kind, args.postgres_url, schema, "cron.db") as url:
                results[name] = measure(url, args.seconds, args.workers, args.poll_interval)
    print(
        f"{args.workers} workers, --poll-interval {args.poll_interval}, "
        f"a per-second schedule for {args.seconds:g} s"
    )
    for database, figures in results.items():
        print(f"  {database}: " + ", ".join(f"{k} {v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
