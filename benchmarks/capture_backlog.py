"""Capture latency over a large backlog of queued tasks, by which queues are asked for.

Fills 'default' with a backlog (default 200,000 queued tasks) and 'other' with 1,000,
then times Store.capture(100) from all queues, one queue, and two queues. A capture
that walks a partial index in its ORDER BY stays flat however large the backlog; one
that has to sort the backlog grows with it.

With ``--lock-keys N`` the backlog is spread over N per-task lock keys, one run of each
key is already in progress, and so every backlog row is held back by its key: each
capture walks past them all to reach 'other' (the worst case for lock keys).

    .venv/bin/python benchmarks/capture_backlog.py [--backlog 200000] [--lock-keys 5]
                                                   [--only sqlite|postgresql]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jobq
from benchmarks.harness import (
    DEFAULT_POSTGRES_URL,
    markdown_table,
    own_database,
)

CHOICES = {"all queues": None, "one queue": ["default"], "two queues": ["default", "other"]}


def measure(store: jobq.Store, backlog: int, calls: int, lock_keys: int) -> dict[str, float]:
    keys = [f"key-{k}" for k in range(lock_keys)] or [None]
    per_key = backlog // len(keys)
    for key in keys:
        for start in range(0, per_key, 50_000):
            rows = [{"i": i} for i in range(start, min(start + 50_000, per_key))]
            store.enqueue_many("t", rows, lock_key=key)
    if lock_keys:
        store.capture(lock_keys, worker_id="holders", lease=3600)  # each key's first row
    store.enqueue_many("t", [{"i": i} for i in range(1000)], queue="other")
    with store.engine.begin() as conn:
        conn.exec_driver_sql("ANALYZE")
    medians = {}
    for label, queues in CHOICES.items():
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            store.capture(100, queues=queues, worker_id="backlog")
            times.append(time.perf_counter() - started)
        medians[label] = statistics.median(times) * 1000
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=200_000)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--lock-keys", type=int, default=0)
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--pg-schema", default="jobq_backlog")
    parser.add_argument("--only", choices=["sqlite", "postgresql"])
    args = parser.parse_args()
    rows = []
    for kind, name in (("sqlite", "SQLite"), ("postgresql", "PostgreSQL")):
        if args.only not in (None, kind):
            continue
        with own_database(kind, args.postgres_url, args.pg_schema, "backlog.db") as url:
            store = jobq.Store(url)
            store.migrate()
            rows.append((name, measure(store, args.backlog, args.calls, args.lock_keys)))
            store.dispose()
    keyed = f", held back by {args.lock_keys} running lock keys" if args.lock_keys else ""
    print(f"capture(100) median ms, backlog of {args.backlog:,} queued tasks in 'default'{keyed}")
    cells = [(name, *(f"{medians[c]:.2f}" for c in CHOICES)) for name, medians in rows]
    print(markdown_table(("database", *CHOICES), "l" + "r" * len(CHOICES), cells))


if __name__ == "__main__":
    main()
