#!/usr/bin/env python
"""Does a worker drain a bulk load as fast before anyone analyses the table as after?

For each database, in a schema (PostgreSQL) or database (MariaDB / MySQL) of its own,
created here and dropped at the end, or a temporary SQLite file:

1. migrate jobq's tables and keep the database from analysing jobq_tasks by itself:
   autovacuum off for the table on PostgreSQL; STATS_AUTO_RECALC=0 on InnoDB, whose
   persistent statistics then stay those of the empty table (innodb_stats_auto_recalc
   would recompute them in the background once a tenth of the table changed); SQLite
   never analyses unasked. With ``--stale N``, N finished rows are analysed first: the
   statistics exist but say that nothing waits, as on a server between a bulk load and
   its next auto-analyse;
2. bulk-load ``--rows`` tasks as ``jobq enqueue --file`` does: Store.enqueue_many, 5,000
   rows a call, all in one transaction (jobq itself refreshes the statistics in it where
   the database needs that, PostgreSQL; ``--without-refresh`` loads as jobq did before);
3. print the plans of the Store's capture statement (on PostgreSQL the statement of a
   worker's turn, custom and generic), then drain ``--tasks`` tasks as a worker of
   ``--slots`` slots does with no-op tasks: each turn records the previous turn's ends
   and captures as many tasks as there are slots, in one Store.complete_and_capture call
   (a drain stops early after ``--max-seconds``); ``--repeat`` drains in all;
4. analyse the table by hand (ANALYZE; ANALYZE TABLE on MySQL), print the plans again,
   and drain as many times again.

It reports the best rate of each side, the median capture call of all their drains, and
the ratio of the best rates: the target is a drain right after the load at no less than
80% of the rate after ANALYZE. Exits 1 if a database misses it.

    .venv/bin/python benchmarks/unanalysed_drain.py
    .venv/bin/python benchmarks/unanalysed_drain.py --rows 200000 --only postgresql
    .venv/bin/python benchmarks/unanalysed_drain.py --only postgresql --without-refresh
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
import sqlalchemy as sa

import jobq
from benchmarks._sql import capture_statement
from benchmarks.harness import (
    DEFAULT_MYSQL_URL,
    DEFAULT_POSTGRES_URL,
    TABLE,
    connect_postgres,
    drop_mysql_database,
    drop_schema,
    git_state,
    in_schema,
    log,
    mysql_database,
    mysql_server,
    sqlite_url,
)
from jobq.db.tasks import Completion, Status

WORKER = "unanalysed-drain"
TASK = "bench.noop"
# Rows per enqueue_many call, as `jobq enqueue --file` reads its lines (CHUNK_LINES).
CHUNK = 5000
TARGET = 0.80
INDEXES = ("jobq_tasks_capture_any_queue", "jobq_tasks_capture")


@dataclass
class Drain:
    """One timed drain: how many tasks, in how long, and each capture call's seconds."""

    tasks: int
    seconds: float
    calls: list[float]

    @property
    def rate(self) -> float:
        return self.tasks / self.seconds

    @property
    def median_ms(self) -> float:
        return statistics.median(self.calls) * 1000


@dataclass
class Result:
    """One database's load, plans and drains."""

    database: str
    rows: int
    load_seconds: float
    statistics_before: str
    plans: dict[str, dict[str, str]]
    loaded: Drain
    analyse_seconds: float
    analysed: Drain

    @property
    def ratio(self) -> float:
        return self.loaded.rate / self.analysed.rate


class Backend:
    """What differs per database: setting up, reading statistics, plans, analysing."""

    name = ""

    def __init__(self, store: jobq.Store) -> None:
        self.store = store

    def exec(self, sql: str) -> list[Any]:
        with self.store.engine.begin() as conn:
            result = conn.exec_driver_sql(sql)
            return result.all() if result.returns_rows else []

    def keep_unanalysed(self) -> None:
        """Stop the database from analysing jobq_tasks by itself."""

    def analyse(self) -> None:
        self.exec(f"ANALYZE {TABLE}")

    def statistics(self) -> str:
        """What the database holds as jobq_tasks's statistics, in one line."""
        raise NotImplementedError

    def plans(self, limit: int, queues: list[str] | None) -> dict[str, str]:
        """The plans of the Store's capture of ``limit`` tasks from ``queues``, by kind."""
        raise NotImplementedError


class Postgres(Backend):
    name = "PostgreSQL"

    def keep_unanalysed(self) -> None:
        self.exec(
            f"ALTER TABLE {TABLE} SET (autovacuum_enabled = false,"
            " toast.autovacuum_enabled = false)"
        )

    def statistics(self) -> str:
        (reltuples, columns), *_ = self.exec(
            "SELECT c.reltuples, (SELECT count(*) FROM pg_stats s WHERE s.schemaname ="
            f" current_schema() AND s.tablename = '{TABLE}') FROM pg_class c"
            f" WHERE c.oid = '{TABLE}'::regclass"
        )
        if reltuples < 0:
            return f"never analysed (reltuples {reltuples:g}, {columns} column statistics)"
        return f"reltuples {reltuples:,.0f}, {columns} column statistics"

    def plans(self, limit: int, queues: list[str] | None) -> dict[str, str]:
        # The statement a worker's turn sends: the ends of its last tasks, and a capture.
        ends = [Completion(0, 1, Status.DONE)]  # no task has id 0: nothing is recorded
        stmt = capture_statement(
            self.store,
            lambda: self.store.complete_and_capture(ends, limit, queues=queues, worker_id=WORKER),
        )
        params = dict(stmt.params)
        names = list(params)
        # psycopg prepares a statement once it has run it 5 times; PostgreSQL then plans it
        # generically (for any parameters) when that plan looks no dearer: show both.
        positional = re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m.group(1)) + 1}", stmt.sql)
        explain = "EXPLAIN (ANALYZE, BUFFERS) "
        plans = {}
        with connect_postgres(self.store.engine.url) as conn:
            # Values bound by the client: EXECUTE's arguments then have the prepared types.
            cursor = psycopg.ClientCursor(conn)
            # ANALYZE runs the statement: each is rolled back, and nothing is captured.
            rows = cursor.execute(explain + stmt.sql, params).fetchall()
            plans["custom"] = "\n".join(row[0] for row in rows)
            conn.rollback()
            cursor.execute("PREPARE jobq_turn AS " + positional)
            cursor.execute("SET plan_cache_mode = force_generic_plan")
            placeholders = ", ".join(["%s"] * len(names))
            rows = cursor.execute(
                f"{explain}EXECUTE jobq_turn({placeholders})", [params[n] for n in names]
            ).fetchall()
            plans["generic"] = "\n".join(row[0] for row in rows)
            conn.rollback()
        return plans


class MySQL(Backend):
    name = "MySQL"

    def __init__(self, store: jobq.Store, server: str) -> None:
        super().__init__(store)
        self.name = server

    def keep_unanalysed(self) -> None:
        # InnoDB's persistent statistics are recomputed in the background once a tenth of a
        # table has changed (innodb_stats_auto_recalc); without that they stay as they were.
        self.exec(f"ALTER TABLE {TABLE} STATS_AUTO_RECALC = 0")

    def analyse(self) -> None:
        self.exec(f"ANALYZE TABLE {TABLE}")

    def statistics(self) -> str:
        rows = self.exec(
            "SELECT n_rows, last_update FROM mysql.innodb_table_stats"
            f" WHERE database_name = DATABASE() AND table_name = '{TABLE}'"
        )
        options = self.exec(
            "SELECT create_options FROM information_schema.tables"
            f" WHERE table_schema = DATABASE() AND table_name = '{TABLE}'"
        )[0][0]
        stored = f"n_rows {rows[0][0]:,} as of {rows[0][1]}" if rows else "none stored"
        return f"persistent statistics: {stored} (table options: {options or 'none'})"

    def plans(self, limit: int, queues: list[str] | None) -> dict[str, str]:
        # Capture takes three statements here; the first picks the rows, in order.
        stmt = capture_statement(
            self.store, lambda: self.store.capture(limit, queues=queues, worker_id=WORKER)
        )
        with self.store.engine.connect() as conn:
            # ANALYZE runs it (rolled back): rows is the estimate, r_rows what was read.
            result = conn.exec_driver_sql("ANALYZE " + stmt.sql, stmt.params)
            keys = list(result.keys())
            rows = [dict(zip(keys, row, strict=True)) for row in result]
            conn.rollback()
        shown = ("id", "select_type", "table", "type", "key", "rows", "r_rows", "Extra")
        lines = [" | ".join(shown)]
        lines += [" | ".join(str(row.get(k)) for k in shown) for row in rows]
        return {"": "\n".join(lines)}


class SQLite(Backend):
    name = "SQLite"

    def analyse(self) -> None:
        self.exec("ANALYZE")

    def statistics(self) -> str:
        exists = self.exec("SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_stat1'")
        if not exists[0][0]:
            return "no sqlite_stat1"
        rows = self.exec(f"SELECT idx, stat FROM sqlite_stat1 WHERE tbl = '{TABLE}'")
        return f"sqlite_stat1: {len(rows)} rows for {TABLE}"

    def plans(self, limit: int, queues: list[str] | None) -> dict[str, str]:
        stmt = capture_statement(
            self.store, lambda: self.store.capture(limit, queues=queues, worker_id=WORKER)
        )
        with self.store.engine.connect() as conn:
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + stmt.sql, stmt.params).all()
        depth: dict[int, int] = {0: -1}
        lines = []
        for node, parent, _unused, detail in rows:
            depth[node] = depth.get(parent, -1) + 1
            lines.append("  " * depth[node] + detail)
        return {"": "\n".join(lines)}


def stale(store: jobq.Store, backend: Backend, rows: int) -> None:
    """``rows`` finished tasks, analysed: statistics that say nothing waits."""
    for first in range(0, rows, 100_000):
        count = min(100_000, rows - first)
        store.enqueue_many("bench.finished", [{"n": first + i} for i in range(count)])
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {TABLE} SET status = 'done', attempt = 1")
    backend.analyse()


def load(store: jobq.Store, rows: int) -> float:
    """``rows`` tasks enqueued as `jobq enqueue --file` does; the seconds it took."""
    started = time.perf_counter()

    def enqueue_all(conn: sa.Connection) -> None:
        for first in range(0, rows, CHUNK):
            count = min(CHUNK, rows - first)
            store.enqueue_many(TASK, [{"n": first + i} for i in range(count)], connection=conn)

    store.db.write(enqueue_all, atomic=True)
    return time.perf_counter() - started


def drain(store: jobq.Store, args: argparse.Namespace) -> Drain:
    """Capture and complete ``--tasks`` tasks as a worker of ``--slots`` slots does."""
    ends: list[Completion] = []
    calls: list[float] = []
    taken = 0
    started = time.perf_counter()
    while taken < args.tasks and time.perf_counter() - started < args.max_seconds:
        before = time.perf_counter()
        applied, captured = store.complete_and_capture(
            ends, min(args.slots, args.tasks - taken), queues=args.queues, worker_id=WORKER
        )
        calls.append(time.perf_counter() - before)
        if applied != len(ends):
            raise RuntimeError(f"{len(ends) - applied} ends did not apply")
        if not captured:
            raise RuntimeError(f"nothing left to capture after {taken} tasks")
        taken += len(captured)
        ends = [Completion(task.id, task.attempt, Status.DONE) for task in captured]
    if store.set_statuses(ends) != len(ends):
        raise RuntimeError("the last ends did not apply")
    return Drain(taken, time.perf_counter() - started, calls)


def drains(store: jobq.Store, args: argparse.Namespace) -> Drain:
    """The best of ``--repeat`` drains, with the capture calls of them all: the plan is the
    same from the first drain to the last, and the best run is the least disturbed by
    whatever else the machine does."""
    runs = [drain(store, args) for _ in range(args.repeat)]
    best = max(runs, key=lambda run: run.rate)
    return Drain(best.tasks, best.seconds, [call for run in runs for call in run.calls])


def walks_index(plan: str) -> str:
    """Whether ``plan`` reads a capture index in its order, or sorts what it found."""
    if "USING INDEX jobq_tasks_capture (queue_id=?)" in plan and "TEMP B-TREE" in plan:
        # SQLite reads each queue in index order into a sorter of LIMIT rows, and leaves a
        # queue at its first row that would not make it.
        return "walks each queue's part of the capture index in order, merging them"
    if any(word in plan for word in ("Sort Key", "filesort", "TEMP B-TREE FOR ORDER BY")):
        return "sorts"
    bitmap = "Bitmap Index Scan on jobq_tasks_capture" in plan
    if bitmap or not any(index in plan for index in INDEXES):
        return "does not walk the capture index"
    return "walks the capture index in order"


def measure(backend: Backend, rows: int, stale_rows: int, args: argparse.Namespace) -> Result:
    store = backend.store
    if args.without_refresh:
        store.dialect.bulk_load_rows = None  # as jobq loaded before it refreshed statistics
    store.migrate()
    backend.keep_unanalysed()
    if stale_rows:
        log(f"{backend.name}: {stale_rows:,} finished rows, analysed")
        stale(store, backend, stale_rows)
    log(f"{backend.name}: loading {rows:,} tasks")
    load_seconds = load(store, rows)
    log(f"  loaded in {load_seconds:.1f} s ({rows / load_seconds:,.0f}/s)")
    before = backend.statistics()
    plans = {"after the load": backend.plans(args.slots, args.queues)}
    log(f"  {before}: draining {args.repeat} x {args.tasks:,} tasks")
    loaded = drains(store, args)
    log(f"  {loaded.rate:,.0f} tasks/s, median capture {loaded.median_ms:.2f} ms")
    started = time.perf_counter()
    backend.analyse()
    analyse_seconds = time.perf_counter() - started
    plans["after ANALYZE"] = backend.plans(args.slots, args.queues)
    log(f"  analysed in {analyse_seconds:.2f} s: draining {args.repeat} x {args.tasks:,} tasks")
    analysed = drains(store, args)
    log(f"  {analysed.rate:,.0f} tasks/s, median capture {analysed.median_ms:.2f} ms")
    return Result(
        backend.name, rows, load_seconds, before, plans, loaded, analyse_seconds, analysed
    )


@contextmanager
def postgres(args: argparse.Namespace) -> Iterator[Backend]:
    url = in_schema(args.postgres_url, args.pg_schema)
    store = jobq.Store(url)
    try:
        yield Postgres(store)
    finally:
        store.dispose()
        drop_schema(args.postgres_url, args.pg_schema)


@contextmanager
def mysql(args: argparse.Namespace) -> Iterator[Backend]:
    server = mysql_server(args.mysql_url)
    store = jobq.Store(mysql_database(args.mysql_url, args.mysql_database))
    try:
        yield MySQL(store, server)
    finally:
        store.dispose()
        drop_mysql_database(args.mysql_url, args.mysql_database)


@contextmanager
def sqlite(args: argparse.Namespace) -> Iterator[Backend]:
    tmp = tempfile.mkdtemp(prefix="jobq-unanalysed-")
    store = jobq.Store(sqlite_url(os.path.join(tmp, "unanalysed.db")))
    try:
        yield SQLite(store)
    finally:
        store.dispose()
        shutil.rmtree(tmp, ignore_errors=True)


BACKENDS: dict[str, Callable[[argparse.Namespace], Any]] = {
    "postgresql": postgres,
    "mysql": mysql,
    "sqlite": sqlite,
}


def report(results: list[Result], args: argparse.Namespace) -> str:
    stale = f", after {args.stale:,} analysed finished rows" if args.stale else ""
    refresh = " (jobq's own statistics refresh turned off)" if args.without_refresh else ""
    lines = [
        f"# Drain after a bulk load of {args.rows:,} tasks{stale}, before and after ANALYZE"
        + refresh,
        "",
        f"jobq at {git_state()}; {os.cpu_count()} cores; best of {args.repeat} drains of"
        f" {args.tasks:,} tasks,"
        f" {args.slots} slots, no-op tasks; capturing from"
        f" {', '.join(args.queues) if args.queues else 'every queue'}",
    ]
    for r in results:
        lines += ["", f"## {r.database}", "", f"Statistics after the load: {r.statistics_before}"]
        for state, plans in r.plans.items():
            for kind, plan in plans.items():
                label = f"{state}, {kind} plan" if kind else state
                lines += ["", f"Capture, {label}: {walks_index(plan)}", "", "```", plan, "```"]
    lines += [
        "",
        "| database | load | after the load: tasks/s | median capture | ANALYZE by hand"
        " | after ANALYZE: tasks/s | median capture | ratio of the rates |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.database} | {r.rows / r.load_seconds:,.0f} rows/s"
            f" | {r.loaded.rate:,.0f} | {r.loaded.median_ms:.2f} ms"
            f" | {r.analyse_seconds:.2f} s | {r.analysed.rate:,.0f}"
            f" | {r.analysed.median_ms:.2f} ms | {r.ratio:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="tasks bulk-loaded")
    parser.add_argument("--tasks", type=int, default=20_000, help="tasks per drain")
    parser.add_argument("--slots", type=int, default=16, help="the worker's concurrency")
    parser.add_argument(
        "--max-seconds", type=float, default=30.0, help="a drain stops after this long"
    )
    parser.add_argument("--repeat", type=int, default=3, help="drains before and after ANALYZE")
    parser.add_argument(
        "--stale", type=int, default=0, metavar="N",
        help="analyse N finished rows before the load (statistics that say nothing waits)",
    )  # fmt: skip
    parser.add_argument(
        "--queues",
        type=lambda text: text.split(","),
        help="comma-separated queues the worker captures from (default: every queue); the"
        " load goes to 'default'",
    )
    parser.add_argument(
        "--without-refresh",
        action="store_true",
        help="load as jobq did before it refreshed statistics after bulk loads itself",
    )
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--pg-schema", default="jobq_unanalysed")
    parser.add_argument("--mysql-url", default=DEFAULT_MYSQL_URL)
    parser.add_argument("--mysql-database", default="jobq_unanalysed")
    parser.add_argument("--only", choices=tuple(BACKENDS), action="append")
    args = parser.parse_args(argv)
    for name in (args.pg_schema, args.mysql_database):
        if not name.isidentifier():
            raise SystemExit(f"not a plain schema or database name: {name!r}")
    results = []
    for name in args.only or tuple(BACKENDS):
        with BACKENDS[name](args) as backend:
            results.append(measure(backend, args.rows, args.stale, args))
    print(report(results, args))
    missed = [r.database for r in results if r.ratio < TARGET]
    target = f"{TARGET:.0%} of the rate after ANALYZE"
    if missed:
        print(f"\nTarget missed (a drain after the load below {target}): {', '.join(missed)}")
        return 1
    print(f"\nTarget met: every drain after the load at {target} or more.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
