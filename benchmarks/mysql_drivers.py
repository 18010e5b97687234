#!/usr/bin/env python
"""PyMySQL versus mysqlclient under jobq's Store, on the same MySQL / MariaDB server.

For each driver it times, in a database of its own (created here, dropped at the end):

1. **enqueue**: N tasks enqueued one call at a time (one INSERT each, autocommit);
2. **enqueue_many**: N tasks in one call (multi-row INSERTs of 5,000 rows);
3. **drain**: capture(100) then set_statuses of the batch, until the N tasks are done
   (per batch: one capture transaction of three statements, and one UPDATE joined with
   JSON_TABLE).

Runs alternate between the drivers and the best of ``--repeat`` is reported, as tasks per
second, with the process CPU seconds of the best run (the driver's own cost shows there).
A driver that is not installed is reported as such.

    .venv/bin/python benchmarks/mysql_drivers.py [--mysql-url URL] [--tasks 20000]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sqlalchemy as sa

import jobq
from benchmarks.harness import (
    DEFAULT_MYSQL_URL,
    drop_mysql_database,
    log,
    markdown_table,
    mysql_database,
)
from jobq.db.tasks import Completion

DRIVERS = {"PyMySQL": ("pymysql", "pymysql"), "mysqlclient": ("mysqldb", "MySQLdb")}


def timed(work: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU seconds of ``work()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


def drain(store: jobq.Store) -> None:
    while batch := store.capture(100, worker_id="bench", lease=600):
        ends = [Completion(task.id, task.attempt, jobq.Status.DONE) for task in batch]
        assert store.set_statuses(ends) == len(ends)


def run(url: str, tasks: int) -> dict[str, tuple[float, float]]:
    store = jobq.Store(url)
    store.migrate()
    results = {}

    def empty() -> None:
        with store.engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM jobq_tasks")

    empty()
    results["enqueue"] = timed(lambda: [store.enqueue("t", {"n": n}) for n in range(tasks)])
    empty()
    args = [{"n": n} for n in range(tasks)]
    results["enqueue_many"] = timed(lambda: store.enqueue_many("t", args))
    results["drain"] = timed(lambda: drain(store))
    assert store.counts() == {("default", jobq.Status.DONE): tasks}
    store.dispose()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mysql-url", default=DEFAULT_MYSQL_URL)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()

    database = f"jobq_bench_{uuid.uuid4().hex[:8]}"
    base = sa.make_url(mysql_database(options.mysql_url, database))
    installed = {
        name: base.set(drivername=f"mysql+{driver}")
        for name, (driver, module) in DRIVERS.items()
        if importlib.util.find_spec(module) is not None
    }
    best: dict[str, dict[str, tuple[float, float]]] = {name: {} for name in installed}
    try:
        for round_ in range(options.repeat):
            order = list(installed) if round_ % 2 == 0 else list(reversed(installed))
            for name in order:
                log(f"round {round_ + 1}: {name}")
                for operation, seconds in run(installed[name], options.tasks).items():
                    if operation not in best[name] or seconds[0] < best[name][operation][0]:
                        best[name][operation] = seconds
    finally:
        drop_mysql_database(options.mysql_url, database)

    admin = jobq.Store(options.mysql_url).engine
    with admin.connect() as conn:
        version = conn.exec_driver_sql("SELECT VERSION()").scalar()
    admin.dispose()
    print(f"{version}, {options.tasks} tasks, best of {options.repeat}\n")
    rows: list[tuple[str, ...]] = []
    for name in DRIVERS:
        if name not in best:
            rows.append((name, "not installed", "", ""))
            continue
        cells = [
            f"{options.tasks / wall:,.0f}/s (CPU {cpu:.2f} s)"
            for wall, cpu in (best[name][op] for op in ("enqueue", "enqueue_many", "drain"))
        ]
        rows.append((name, *cells))
    header = (
        "driver",
        "enqueue (one at a time)",
        "enqueue_many",
        "drain (capture 100 + set_statuses)",
    )
    print(markdown_table(header, "lrrr", rows))


if __name__ == "__main__":
    main()
