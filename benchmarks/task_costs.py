#!/usr/bin/env python
"""What one task costs a jobq worker, part by part, in microseconds per task.

Each part is jobq's own code, timed in this process with time.perf_counter over a batch
and divided by the batch's tasks, on ``--tasks`` queued no-op tasks ("bench.noop", args
{"n": i}) taken ``--batch`` (100) at a time, as a worker at concurrency 100 takes them:

1. capture SQL: the Store's capture statement alone, prepared as Store._capture prepares
   it (a worker's shape: every queue, its definitions' leases) and run through the Store's
   own path, ``store.db.run(stmt, params, fetch=True)`` (on SQLite inside BEGIN IMMEDIATE
   ... COMMIT, on PostgreSQL in autocommit), without decoding the rows;
2. row decoding: those raw rows into Task objects, ``store.capturer.captured(rows)``;
3. dispatch: what the worker does with each captured task before its run (its definition,
   Run.of, the undecodable check) and jobq.worker.runner.Runner (``--batch`` slots, the no-op sync
   task of benchmarks/noop_app.py) running them on its slot threads and handing back their
   outcomes through the callback into a queue.SimpleQueue: from the first Run.of until the
   batch's last outcome is in the queue, minus row 4;
4. the run: ``jobq.worker.executor.run_sync`` of the no-op, logging at WARNING (no lines);
5. logging: the same with the worker's default logging (``jobq.worker.logs.configure("info",
   "text")``, its handler writing to os.devnull), minus row 4: the two INFO lines a task;
6. recording: ``Store.set_statuses`` of the batch's ends (DONE), and, on a line of its own
   and not added to the total, the encoding alone (``jobq.core.run_end.encode_completions``).

Rows 1, 2 and 6 go batch after batch as a worker's turns do: capture, decode, record, so
that no more than one batch is ever in progress (a capture that had to step over thousands
of in_progress rows would cost more than a worker's). A worker records the last batch's
ends and captures the next in one statement (Store.complete_and_capture) where the
database allows it; here the two are timed apart. Rows 3 to 5 then run the tasks captured.
Each repeat starts from an empty table and ``--tasks`` freshly enqueued tasks (ANALYZEd on
PostgreSQL; untimed). A warm-up pass of 1,000 tasks comes first. Each row is
the median of ``--repeat`` repeats; the total is the sum of the rows' medians.

jobq and benchmarks/noop_app.py are imported from the current directory (the harness,
if that checkout has none, from this script's), so that one copy of this script
measures any checkout it is run in (it uses only APIs that commit 90fc2cf has too):

    .venv/bin/python benchmarks/task_costs.py
    .venv/bin/python benchmarks/task_costs.py --only sqlite --repeat 3
    git worktree add /tmp/before 90fc2cf
    cd /tmp/before && PYTHONPATH=/tmp/before /work/main/.venv/bin/python \\
        /work/main/benchmarks/task_costs.py

Markdown goes to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import queue
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

if __package__ in (None, ""):  # run as a script: measure the checkout in the working directory
    sys.path.insert(0, os.getcwd())

import sqlalchemy as sa

import jobq
from benchmarks.harness import (
    DEFAULT_POSTGRES_URL,
    analyze,
    drop_schema,
    git_state,
    in_schema,
    log,
    reset,
    sqlite_url,
    status_counts,
)
from benchmarks.noop_app import app
from jobq.core import capture_options, run_end
from jobq.core.registry import TaskDefinition
from jobq.db.tasks import DEFAULT_LEASE, Completion, Leases, Status, Task
from jobq.worker import executor, logs
from jobq.worker.runner import Run, Runner

# The checkout whose jobq is measured (the working directory's when run as a script).
MEASURED = Path(jobq.__file__).resolve().parent.parent

TASK = "bench.noop"
WORKER = "task-costs"
WARM_UP_TASKS = 1000

# The rows of the breakdown, in order: key, label, how it is measured.
ROWS: tuple[tuple[str, str, str], ...] = (
    ("capture", "1. capture SQL", "`store.db.run(capture, params, fetch=True)`, rows not decoded"),
    ("decode", "2. row decoding", "`store.capturer.captured(rows)`: raw rows to Task objects"),
    (
        "dispatch",
        "3. dispatch",
        "Run.of + `Runner.start` until the outcomes are queued, minus row 4",
    ),
    ("run", "4. the run", "`executor.run_sync` of the no-op, logging at WARNING"),
    ("logging", "5. logging", "`run_sync` with `logs.configure('info', 'text')`, minus row 4"),
    ("record", "6. recording", "`Store.set_statuses` of the batch's DONE ends"),
)
# Shown under recording, and not added to the total: it is part of row 6.
ENCODING = ("encode", "of which encoding", "`run_end.encode_completions` alone")


@dataclass
class Costs:
    """One database's microseconds per task, by row, one value per repeat."""

    database: str
    server: str
    repeats: dict[str, list[float]] = field(default_factory=dict)

    def add(self, measured: dict[str, float]) -> None:
        for key, value in measured.items():
            self.repeats.setdefault(key, []).append(value)

    def median(self, key: str) -> float:
        return statistics.median(self.repeats[key])

    @property
    def total(self) -> float:
        return sum(self.median(key) for key, _, _ in ROWS)


class Timer:
    """Seconds summed over the timed blocks of one row."""

    def __init__(self) -> None:
        self.seconds = 0.0

    @contextmanager
    def timing(self) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - started


class Bench:
    """One database's Store, its worker-shaped capture statement, and a Runner."""

    def __init__(self, store: jobq.Store, args: argparse.Namespace, devnull: TextIO) -> None:
        self.store = store
        self.args = args
        self.devnull = devnull
        registry = app.registry
        # As Worker.__init__ and Worker._capture: every queue, the definitions' own leases.
        leases = Leases(tuple((d.name, d.lease) for d in registry if d.lease != DEFAULT_LEASE))
        names = None
        if not store.dialect.capture_is_one_statement:
            raise SystemExit(f"{store.dialect.name}: capture is not one statement here")
        # As Store._capture builds and runs it.
        shape = (*capture_options.capture_shape(names, leases), True)
        self.capture = store.db.prepare(
            ("capture", *shape), lambda: store.dialect.capture_statement(*shape)
        )
        self.capture_params = capture_options.capture_parameters(args.batch, names, WORKER, leases)
        # As Runs._definition (jobq.worker.runs): the definition with the timeout the row was given.
        self._definitions: dict[tuple[str, float | None], TaskDefinition | None] = {}
        self._registry = registry
        # As Worker: runs report (fence, outcome) into a SimpleQueue from their threads.
        self.finished: queue.SimpleQueue[tuple[tuple[int, int], executor.Outcome]] = (
            queue.SimpleQueue()
        )
        self.runs: dict[tuple[int, int], Run] = {}
        # A worker at concurrency N captures N at a time and runs them on N slot threads.
        self.runner = Runner(args.batch, self._finish)

    def close(self) -> None:
        self.runner.shutdown()

    def _finish(self, run: Run, outcome: executor.Outcome) -> None:
        """Runs.finish: from a slot thread, the run's outcome to the loop's queue."""
        run.finished = True
        self.finished.put((run.task.fence, outcome))

    def definition(self, task: Task) -> TaskDefinition | None:
        key = (task.name, task.timeout)
        if key not in self._definitions:
            found = self._registry.get(task.name)
            self._definitions[key] = found and found.with_timeout(task.timeout)
        return self._definitions[key]

    # --- one pass over ``tasks`` queued tasks -----------------------------------------

    def prepare(self, tasks: int) -> None:
        """An empty table, then ``tasks`` queued no-op tasks (untimed)."""
        reset(self.store)
        self.store.enqueue_many(TASK, [{"n": i} for i in range(tasks)])
        if self.store.engine.dialect.name == "postgresql":
            analyze(self.store)  # as jobq at HEAD does after a load; 90fc2cf did not

    def measure(self, tasks: int) -> dict[str, float]:
        """Every row's microseconds per task over ``tasks`` freshly enqueued tasks."""
        self.prepare(tasks)
        batches, seconds = self._drain(tasks)
        seconds["dispatch_raw"] = self._dispatch(batches)
        seconds["run"] = self._run(batches)
        seconds["logging_raw"] = self._logged_run(batches)
        counts = status_counts(self.store)
        if counts != {"done": tasks}:
            raise RuntimeError(f"after the pass the table holds {counts}")
        per_task = {key: value / tasks * 1e6 for key, value in seconds.items()}
        per_task["dispatch"] = per_task["dispatch_raw"] - per_task["run"]
        per_task["logging"] = per_task["logging_raw"] - per_task["run"]
        return per_task

    def _drain(self, tasks: int) -> tuple[list[list[Task]], dict[str, float]]:
        """The database's rows, batch after batch as a worker goes: capture, decode, record
        (so that at most one batch is in progress at a time, as in a worker). Returns the
        captured tasks, by batch, for the rows that run them."""
        timers = {key: Timer() for key in ("capture", "decode", "encode", "record")}
        store, stmt = self.store, self.capture
        db, captured, set_statuses = store.db, store.capturer.captured, store.set_statuses
        batches = []
        left = tasks
        while left > 0:
            params = self.capture_params
            if left < self.args.batch:
                params = {**params, "limit": left}
            with timers["capture"].timing():
                rows = db.run(stmt, params, fetch=True)
            if not rows:
                raise RuntimeError(f"nothing to capture with {left} tasks left")
            with timers["decode"].timing():
                batch = captured(rows)
            ends = [Completion(task.id, task.attempt, Status.DONE) for task in batch]
            with timers["encode"].timing():
                run_end.encode_completions(ends, store.backoff, db.room())
            with timers["record"].timing():
                applied = set_statuses(ends)
            if applied != len(ends):
                raise RuntimeError(f"{len(ends) - applied} of {len(ends)} ends did not apply")
            batches.append(batch)
            left -= len(batch)
        return batches, {key: timer.seconds for key, timer in timers.items()}

    def _dispatch(self, batches: list[list[Task]]) -> float:
        """Runs.start's work per task, then Runner.start until every outcome is back."""
        timer = Timer()
        runs, finished, runner = self.runs, self.finished, self.runner
        for batch in batches:
            with timer.timing():
                runnable = []
                for task in batch:
                    run = Run.of(task, self.definition(task))
                    runs[task.fence] = run
                    if run.definition is None or executor.undecodable(task) is not None:
                        raise RuntimeError(f"task {task.id} would not run")
                    runnable.append(run)
                runner.start(runnable)
                for _ in runnable:
                    finished.get()
            runs.clear()
        return timer.seconds

    def _run(self, batches: list[list[Task]]) -> float:
        timer = Timer()
        run_sync = executor.run_sync
        for batch in batches:
            definitions = [self.definition(task) for task in batch]
            with timer.timing():
                for task, definition in zip(batch, definitions, strict=True):
                    run_sync(definition, task.args, task.attempt, task=task)  # type: ignore[arg-type]
        return timer.seconds

    def _logged_run(self, batches: list[list[Task]]) -> float:
        """_run with the worker's default logging, its lines written to os.devnull."""
        root = logging.getLogger()
        saved_handlers, saved_level = root.handlers[:], root.level
        logs.configure("info", "text")
        handlers = [h for h in root.handlers if isinstance(h, logging.StreamHandler)]
        if not handlers:
            raise RuntimeError("jobq.worker.logs.configure set no stream handler")
        for handler in handlers:
            handler.setStream(self.devnull)
        try:
            seconds = self._run(batches)
            started = time.perf_counter()
            for handler in handlers:
                handler.flush()  # the lines the handler still holds are part of the cost
            seconds += time.perf_counter() - started
        finally:
            root.handlers[:] = saved_handlers
            root.setLevel(saved_level)
        return seconds


def measure(name: str, store: jobq.Store, args: argparse.Namespace, devnull: TextIO) -> Costs:
    logging.getLogger().setLevel(logging.WARNING)
    store.migrate()
    costs = Costs(name, server_version(store))
    bench = Bench(store, args, devnull)
    try:
        log(f"{name}: warm-up ({WARM_UP_TASKS:,} tasks)")
        bench.measure(WARM_UP_TASKS)
        for repeat in range(1, args.repeat + 1):
            measured = bench.measure(args.tasks)
            costs.add(measured)
            total = sum(measured[key] for key, _, _ in ROWS)
            log(
                f"  repeat {repeat}/{args.repeat}: {total:.1f} us a task ("
                + ", ".join(f"{key} {measured[key]:.1f}" for key, _, _ in ROWS)
                + ")"
            )
    finally:
        bench.close()
    return costs


def server_version(store: jobq.Store) -> str:
    if store.engine.dialect.name == "postgresql":
        with store.engine.connect() as conn:
            version = conn.exec_driver_sql("SHOW server_version").scalar()
        return f"PostgreSQL {str(version).split()[0]}"
    return f"SQLite {sqlite3.sqlite_version}, a file in WAL mode"


@contextmanager
def sqlite(args: argparse.Namespace) -> Iterator[jobq.Store]:
    tmp = None
    path = args.sqlite_path
    if path is None:
        tmp = tempfile.mkdtemp(prefix="jobq-task-costs-")
        path = os.path.join(tmp, "task_costs.db")
    store = jobq.Store(sqlite_url(path))
    try:
        yield store
    finally:
        store.dispose()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def postgres(args: argparse.Namespace) -> Iterator[jobq.Store]:
    store = jobq.Store(in_schema(args.postgres_url, args.pg_schema))
    try:
        yield store
    finally:
        store.dispose()
        drop_schema(args.postgres_url, args.pg_schema)


BACKENDS: dict[str, tuple[str, Callable[[argparse.Namespace], Any]]] = {
    "sqlite": ("SQLite", sqlite),
    "postgresql": ("PostgreSQL", postgres),
}


def versions() -> str:
    parts = [f"Python {platform.python_version()}", f"SQLAlchemy {sa.__version__}"]
    try:
        import psycopg

        parts.append(f"psycopg {psycopg.__version__}")
    except ImportError:
        pass
    return ", ".join(parts)


def spread(values: Sequence[float]) -> str:
    return f"{min(values):.1f} to {max(values):.1f}"


def report(results: list[Costs], args: argparse.Namespace) -> str:
    lines = [
        "# What a task costs a jobq worker, µs per task",
        "",
        f"jobq at {git_state(MEASURED)}, imported from `{os.path.dirname(jobq.__file__)}`;"
        f" {versions()}; {os.cpu_count()} cores.",
        f'{args.tasks:,} queued no-op tasks (`{TASK}`, args `{{"n": i}}`) per repeat, taken'
        f" {args.batch} at a time (a worker at concurrency {args.batch}); each row is the median of"
        f" {args.repeat} repeats (range: the lowest and highest repeat); the total is the sum"
        " of rows 1-6.",
    ]
    for costs in results:
        lines += [
            "",
            f"## {costs.server}",
            "",
            "| row | µs/task (median) | range | measured as |",
            "|---|---:|---:|---|",
        ]
        for key, label, how in (*ROWS, ENCODING):
            shown = f"  {label}" if key == "encode" else label
            if key in ("dispatch", "logging"):
                how += f" (measured {costs.median(key + '_raw'):.1f})"
            lines.append(
                f"| {shown} | {costs.median(key):.1f} | {spread(costs.repeats[key])} | {how} |"
            )
        totals = [
            sum(values) for values in zip(*(costs.repeats[key] for key, _, _ in ROWS), strict=True)
        ]
        lines.append(
            f"| **total** | **{costs.total:.1f}** | {spread(totals)} |"
            f" {1e6 / costs.total:,.0f} tasks/s, were nothing to overlap |"
        )
    if len(results) > 1:
        header = " | ".join(costs.database for costs in results)
        lines += ["", f"| µs/task | {header} |", "|---|" + "---:|" * len(results)]
        for key, label, _ in (*ROWS, ENCODING):
            cells = " | ".join(f"{costs.median(key):.1f}" for costs in results)
            lines.append(f"| {label} | {cells} |")
        cells = " | ".join(f"**{costs.total:.1f}**" for costs in results)
        lines.append(f"| **total** | {cells} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20_000, help="tasks per repeat")
    parser.add_argument(
        "--batch", type=int, default=100,
        help="the worker's concurrency: tasks a capture takes, and the Runner's slots",
    )  # fmt: skip
    parser.add_argument("--repeat", type=int, default=5, help="repeats; each row their median")
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--pg-schema", default="jobq_task_costs")
    parser.add_argument("--sqlite-path", help="default: a file in a temporary directory")
    parser.add_argument("--only", choices=tuple(BACKENDS), action="append")
    args = parser.parse_args(argv)
    if args.tasks < 1 or args.batch < 1 or args.repeat < 1:
        parser.error("--tasks, --batch and --repeat must be positive")
    log(f"jobq from {os.path.dirname(jobq.__file__)} at {git_state(MEASURED)}")
    results = []
    with open(os.devnull, "w") as devnull:
        for key in args.only or tuple(BACKENDS):
            name, backend = BACKENDS[key]
            with backend(args) as store:
                results.append(measure(name, store, args, devnull))
    print(report(results, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
