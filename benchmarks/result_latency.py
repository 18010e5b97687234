#!/usr/bin/env python
"""How soon a TaskHandle's result() returns once its task has ended.

One real `jobq worker` process (benchmarks/noop_app.py, concurrency 10, logs at warning)
runs the tasks; this process enqueues a no-op, waits on its handle with result(), and
repeats, N times (``--samples``, default 200) after a few unmeasured warm-up rounds. The
delay measured is from the row's finished_at (the database's clock: the server runs on
this machine) to the moment result() returned here (time.time()).

- PostgreSQL: the waiter is woken by the database's notification of the end (revision
  0009's trigger on awaited rows), in a schema of its own (``--pg-schema``, created here,
  dropped at the end).
- SQLite (a temporary file): the waiter polls its row, 5 ms, 10 ms, 20 ms ... at most
  200 ms apart, for comparison. SQLite's clock keeps milliseconds only.

Also shown: the whole round trip, enqueue to result() returned (this process's clock),
which includes the worker noticing the task (on PostgreSQL through NOTIFY; SQLite: its
poll, ``--poll-interval``). The report is Markdown on stdout; progress goes to stderr.

    .venv/bin/python benchmarks/result_latency.py [--samples 200] [--only postgresql|sqlite]
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jobq
from benchmarks.harness import (
    DEFAULT_POSTGRES_URL,
    SYNC_TASK,
    git_state,
    jobq_worker_cmd,
    log,
    markdown_table,
    own_database,
    percentile,
    reset,
    worker_env,
)
from jobq.db.tasks import as_utc
from jobq.lifecycle import waiting

ROOT = Path(__file__).resolve().parent.parent
WARM_UP = 5  # rounds not measured: the worker's and the waiter's first statements
WAIT = 30.0  # seconds one result() may take before the run is called broken


@dataclass
class Run:
    """The samples of one database, in seconds."""

    database: str
    how: str
    after_end: list[float]
    round_trip: list[float]
    reads: int


@contextmanager
def worker(url: str, poll_interval: float) -> Iterator[None]:
    """A running `jobq worker` on ``url`` for the block; stopped with SIGTERM after."""
    store = jobq.Store(url)
    command = jobq_worker_cmd(
        "--concurrency", "10", "--poll-interval", str(poll_interval), "--log-level", "warning"
    )
    with tempfile.TemporaryFile() as stderr:
        process = subprocess.Popen(command, cwd=ROOT, env=worker_env(url), stderr=stderr)
        try:
            deadline = time.monotonic() + 60
            while not store.live_workers():  # registered: its loop is about to capture
                if process.poll() is not None or time.monotonic() > deadline:
                    stderr.seek(0)
                    raise RuntimeError(f"the worker did not start:\n{stderr.read().decode()}")
                time.sleep(0.05)
            yield
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            store.dispose()


def measure(url: str, database: str, how: str, samples: int, poll_interval: float) -> Run:
    """``samples`` rounds of enqueue, result(), on ``url`` with a worker running."""
    store = jobq.Store(url)
    store.migrate()
    reset(store)
    after_end: list[float] = []
    round_trip: list[float] = []
    watcher = waiting.watcher_for(store)
    try:
        with worker(url, poll_interval):
            reads = 0
            for i in range(WARM_UP + samples):
                started = time.perf_counter()
                handle = jobq.TaskHandle(store.enqueue(SYNC_TASK, {"n": i}), store)
                before = watcher.reads
                handle.result(timeout=WAIT)
                returned = datetime.now(UTC)
                took = time.perf_counter() - started
                if i < WARM_UP:
                    continue
                reads += watcher.reads - before
                task = handle.refresh()
                assert task is not None and task.finished_at is not None
                finished = as_utc(task.finished_at)
                assert finished is not None
                after_end.append((returned - finished).total_seconds())
                round_trip.append(took)
                if (i - WARM_UP + 1) % 50 == 0:
                    log(f"{database}: {i - WARM_UP + 1}/{samples}")
    finally:
        store.dispose()
    return Run(database, how, after_end, round_trip, reads)


def report(runs: list[Run], samples: int) -> None:
    """The Markdown report on stdout."""
    print("# TaskHandle.result(): end to return\n")
    print(
        f"{samples} sequential samples per database, one `jobq worker` process "
        f"(benchmarks/noop_app.py, `{SYNC_TASK}`); jobq at {git_state()}; "
        f"Python {platform.python_version()}, {os.cpu_count()} cores.\n"
    )
    print("finished_at (database clock) -> result() returned, in ms:\n")
    rows = []
    for run in runs:
        ms = [s * 1000 for s in run.after_end]
        cells = [f"{percentile(ms, p):.2f}" for p in (50, 90, 99)]
        rows.append((run.database, run.how, *cells, f"{max(ms):.2f}", f"{run.reads / len(ms):.1f}"))
    header = ("database", "waiter", "p50", "p90", "p99", "max", "row reads per wait")
    print(markdown_table(header, "llrrrrr", rows))
    print("\nenqueue -> result() returned (round trip, this process's clock), in ms:\n")
    trips = [[s * 1000 for s in run.round_trip] for run in runs]
    rows = [
        (run.database, *(f"{percentile(ms, p):.2f}" for p in (50, 90, 99)))
        for run, ms in zip(runs, trips, strict=True)
    ]
    print(markdown_table(("database", "p50", "p90", "p99"), "lrrr", rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=200, help="measured rounds (200)")
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--pg-schema", default="bench_result_latency")
    parser.add_argument("--only", choices=["postgresql", "sqlite"])
    parser.add_argument(
        "--poll-interval", type=float, default=0.05,
        help="the worker's --poll-interval (seconds): how soon it sees tasks on SQLite",
    )  # fmt: skip
    args = parser.parse_args()
    if args.samples < 1:
        parser.error("--samples must be at least 1")
    runs: list[Run] = []
    for kind, name, how in (
        ("postgresql", "PostgreSQL", "notified"),
        ("sqlite", "SQLite", "polling"),
    ):
        if args.only in (None, kind):
            with own_database(kind, args.postgres_url, args.pg_schema) as url:
                log(f"{name}: {how} waiter")
                runs.append(measure(url, name, how, args.samples, args.poll_interval))
    report(runs, args.samples)


if __name__ == "__main__":
    main()
