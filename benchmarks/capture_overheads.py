#!/usr/bin/env python
"""What a paused queue elsewhere, and --metrics-port, cost a drain (issue 21).

bench_worker.py's drain (one `jobq worker --burst --concurrency C` process draining N
no-op tasks, logs on, spawn to exit) in three settings, interleaved round by round so
that the machine's drift falls on all of them alike:

- ``plain``: nothing paused, no metrics;
- ``paused elsewhere``: another queue paused (a row in jobq_limits, which every capture
  of unlimited queues anti-joins with: the statement is the same as without a pause);
- ``--metrics-port``: the worker serves Prometheus metrics (counts every run).

On PostgreSQL (a schema of its own, dropped at the end) and a SQLite file. Prints a
Markdown table: each setting's drains per round, the median, and its change against
``plain``, also as microseconds a task.

``--in-process`` drains in this process instead (``Worker(app, burst=True)`` with or
without ``WorkerMetrics()``, nothing spawned, logging off): no interpreter start-up in
the time, so less noise for the same difference.

    .venv/bin/python benchmarks/capture_overheads.py [--tasks 50000] [--rounds 3]
    .venv/bin/python benchmarks/capture_overheads.py --in-process --tasks 20000 --rounds 5
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jobq
from benchmarks._drains import jobq_drain
from benchmarks.harness import (
    DEFAULT_POSTGRES_URL,
    SYNC_TASK,
    analyze,
    drop_schema,
    git_state,
    in_schema,
    log,
    reset,
    sqlite_url,
)

SCHEMA = "bench_capture_overheads"
PAUSED = "elsewhere"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def settings() -> dict[str, tuple[Callable[[jobq.Store], object], list[str]]]:
    """Each setting: what to do to the database before its drain, and the worker options."""
    return {
        "plain": (lambda store: store.resume_queue(PAUSED), []),
        "paused elsewhere": (lambda store: store.pause_queue(PAUSED), []),
        "--metrics-port": (lambda store: store.resume_queue(PAUSED), ["--metrics-port"]),
    }


def drain_rate(url: str, database: str, name: str, n: int, conc: int) -> float:
    """One drain in setting ``name``; jobs a second, spawn to exit."""
    prepare, options = settings()[name]
    store = jobq.Store(url)
    try:
        store.migrate()
        prepare(store)
    finally:
        store.dispose()
    if options == ["--metrics-port"]:
        options = [*options, str(free_port())]
    drain = jobq_drain(
        url, database, name, SYNC_TASK, n, conc, 600, task_logs=True, options=options
    )
    return n / drain.seconds


def drain_in_process(url: str, name: str, n: int, conc: int) -> float:
    """One drain in setting ``name`` by a Worker in this process; jobs a second."""
    from benchmarks import noop_app
    from jobq.observe.metrics import WorkerMetrics
    from jobq.worker import Worker

    prepare, options = settings()[name]
    store = jobq.Store(url)
    try:
        store.migrate()
        prepare(store)
        reset(store)
        store.enqueue_many(SYNC_TASK, [{"n": i} for i in range(n)])
        analyze(store)
        noop_app.app.store = store
        metrics = WorkerMetrics() if options else None
        worker = Worker(noop_app.app, concurrency=conc, burst=True, burst_wait=0, metrics=metrics)
        started = time.perf_counter()
        worker.run()
        seconds = time.perf_counter() - started
        left = store.counts()
        assert left == {("default", jobq.Status.DONE): n}, left
        return n / seconds
    finally:
        store.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--tasks", type=int, default=50_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--in-process", action="store_true", help="drain in this process")
    args = parser.parse_args()
    if args.in_process:
        logging.disable(logging.CRITICAL)  # the worker's lines would go to our stderr
    names = list(settings())
    rates: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        databases = {
            "PostgreSQL": in_schema(args.postgres_url, SCHEMA),
            "SQLite": sqlite_url(os.path.join(tmp, "overheads.db")),
        }
        try:
            for round_ in range(args.rounds):
                # Alternate the order, so that no setting always follows the same one.
                order = names if round_ % 2 == 0 else names[::-1]
                for database, url in databases.items():
                    for name in order:
                        if args.in_process:
                            rate = drain_in_process(url, name, args.tasks, args.concurrency)
                        else:
                            rate = drain_rate(url, database, name, args.tasks, args.concurrency)
                        log(f"round {round_ + 1}, {database}, {name}: {rate:,.0f}/s")
                        rates.setdefault((database, name), []).append(rate)
        finally:
            drop_schema(args.postgres_url, SCHEMA)
    how = "in process, logs off" if args.in_process else "logs on, spawn to exit"
    print(
        f"capture_overheads.py at {git_state()}: {args.tasks:,} no-op tasks, concurrency "
        f"{args.concurrency}, {how}; {args.rounds} rounds interleaved\n"
    )
    print("| database | setting | drains (jobs/s) | median | change | per task |")
    print("|---|---|---|---:|---:|---:|")
    for database in ("PostgreSQL", "SQLite"):
        base = statistics.median(rates[(database, "plain")])
        for name in names:
            runs = rates[(database, name)]
            median = statistics.median(runs)
            change = (median / base - 1) * 100
            per_task = (1 / median - 1 / base) * 1e6
            shown = " / ".join(f"{r:,.0f}" for r in runs)
            print(
                f"| {database} | {name} | {shown} | {median:,.0f} | {change:+.1f}% "
                f"| {per_task:+.1f} µs |"
            )


if __name__ == "__main__":
    main()
