#!/usr/bin/env python
"""Does capture stay an index scan when the table is mostly finished rows?

Fills the tasks table with many finished rows (enqueued through the Store, then marked
done with one UPDATE) plus a few queued ones, runs ANALYZE (VACUUM ANALYZE on
PostgreSQL), then prints the plan of the Store's own capture statement, captured from
its engine exactly as sent:

* PostgreSQL: EXPLAIN (ANALYZE, BUFFERS), inside a transaction that is rolled back;
* SQLite: EXPLAIN QUERY PLAN, plus the statement's run time inside a rolled-back
  transaction;

and finally times real ``Store.capture`` calls draining the queued rows. It says whether
the plan uses the partial index jobq_tasks_capture.

    .venv/bin/python benchmarks/explain_capture.py
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jobq
from benchmarks._sql import Statement, capture_statement
from benchmarks.harness import (
    DEFAULT_POSTGRES_URL,
    TABLE,
    connect_postgres,
    connect_sqlite,
    drop_schema,
    in_schema,
    log,
    reset,
    sqlite_url,
    status_counts,
)

INDEX = "jobq_tasks_capture"
WORKER = "explain-worker"
# Rows per enqueue_many call while filling, to bound memory.
FILL_CHUNK = 100_000


def fill(store: jobq.Store, finished: int, queued: int) -> None:
    """``finished`` done rows, then ``queued`` queued ones, all through the Store."""
    start = time.perf_counter()
    for first in range(0, finished, FILL_CHUNK):
        count = min(FILL_CHUNK, finished - first)
        store.enqueue_many("explain.finished", [{"n": first + i} for i in range(count)])
    log(f"  enqueued {finished} rows in {time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    now = "now()" if store.engine.dialect.name == "postgresql" else (
        "strftime('%Y-%m-%d %H:%M:%f', 'now')"
    )  # fmt: skip
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {TABLE} SET status = 'done', finished_at = {now}")
    log(f"  marked them done with one UPDATE in {time.perf_counter() - start:.1f} s")
    store.enqueue_many("explain.queued", [{"n": i} for i in range(queued)])


def _summary(label: str, times: list[float], queued: int) -> str:
    ms = [t * 1000 for t in times]
    return (
        f"{label} x {len(ms)} calls (draining {queued} queued rows among the finished "
        f"ones): median {statistics.median(ms):.2f} ms, min {min(ms):.2f} ms, "
        f"max {max(ms):.2f} ms"
    )


def _drain(capture: Callable[[], int], queued: int) -> list[float]:
    """Call ``capture`` (which returns how many it took) until it takes none; the times."""
    times: list[float] = []
    got = 0
    while True:
        start = time.perf_counter()
        n = capture()
        times.append(time.perf_counter() - start)
        if not n:
            break
        got += n
    if got != queued:
        raise RuntimeError(f"captured {got} tasks, expected {queued}")
    return times


def time_captures(store: jobq.Store, stmt: Statement, raw: Any, limit: int, queued: int) -> str:
    """Drain the queued rows with the bare statement, put them back, drain with the Store.

    The bare side runs the captured statement as the Store runs it: in its own
    transaction (BEGIN IMMEDIATE/COMMIT on SQLite, a commit on PostgreSQL) or in
    autocommit, so both timings include the commit.
    """
    is_sqlite = isinstance(raw, sqlite3.Connection)
    if not is_sqlite:
        raw.autocommit = not stmt.transactional
    cur = raw.cursor()

    def bare_capture() -> int:
        if is_sqlite and stmt.transactional:
            raw.execute("BEGIN IMMEDIATE")
        cur.execute(stmt.sql, stmt.params)
        n = len(cur.fetchall())
        if stmt.transactional:
            raw.commit()
        return n

    bare = _drain(bare_capture, queued)
    # Back to queued, as enqueued.
    if is_sqlite:
        raw.execute("BEGIN IMMEDIATE")
    cur.execute(
        f"UPDATE {TABLE} SET status = 'queued', attempt = 0, locked_by = NULL, "
        "locked_until = NULL, started_at = NULL WHERE status = 'in_progress'"
    )
    if cur.rowcount != queued:
        raise RuntimeError(f"reset {cur.rowcount} rows, expected {queued}")
    raw.commit()
    cur.close()
    if not is_sqlite:
        raw.autocommit = False

    def store_capture() -> int:
        return len(store.capture(limit, worker_id=WORKER))

    stored = _drain(store_capture, queued)
    mode = "transaction" if stmt.transactional else "autocommit"
    return "\n".join(
        [
            f"- {_summary(f'bare capture statement ({mode})', bare, queued)}",
            f"- {_summary(f'Store.capture({limit})', stored, queued)}",
        ]
    )


def verdict(plan: str) -> str:
    if INDEX in plan:
        return f"uses the partial index {INDEX}: yes"
    return f"uses the partial index {INDEX}: NO"


def explain_postgres(url: str, finished: int, queued: int, limit: int, vacuum: bool) -> str:
    store = jobq.Store(url)
    store.migrate()
    reset(store)
    log(f"PostgreSQL: filling {finished} finished + {queued} queued rows")
    fill(store, finished, queued)
    conn = connect_postgres(url)
    try:
        conn.autocommit = True
        start = time.perf_counter()
        conn.execute(f"{'VACUUM ' if vacuum else ''}ANALYZE {TABLE}")
        log(f"  {'VACUUM ANALYZE' if vacuum else 'ANALYZE'} in {time.perf_counter() - start:.1f} s")
        conn.autocommit = False
        stmt = capture_statement(store, lambda: store.capture(limit, worker_id=WORKER))
        plans = []
        # Twice, each rolled back: the first warms the cache; both are shown.
        for _ in range(2):
            cur = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + stmt.sql, stmt.params)
            plans.append("\n".join(row[0] for row in cur.fetchall()))
            conn.rollback()
        size = conn.execute(
            f"SELECT pg_size_pretty(pg_relation_size('{INDEX}')), "
            f"pg_size_pretty(pg_relation_size('{TABLE}'))"
        ).fetchone()
        conn.rollback()
        v = conn.info.server_version
        server = f"{v // 10000}.{v % 10000}"
        counts = status_counts(store)
        timing = time_captures(store, stmt, conn, limit, queued)
    finally:
        conn.close()
    reset(store)
    store.dispose()
    return "\n".join(
        [
            f"## PostgreSQL {server}",
            "",
            f"Rows: {counts}; index {INDEX}: {size[0]}, table: {size[1]}"
            f"{'; after VACUUM ANALYZE' if vacuum else '; after ANALYZE (no VACUUM)'}",
            "",
            f"Store capture statement (limit {limit}, all queues), "
            "EXPLAIN (ANALYZE, BUFFERS), second of two rolled-back runs:",
            "",
            "```",
            plans[1],
            "```",
            "",
            f"First (cold) run: {_pg_execution_time(plans[0])}.",
            "",
            f"- {verdict(plans[1])}",
            timing,
        ]
    )


def _pg_execution_time(plan: str) -> str:
    lines = [line.strip() for line in plan.splitlines() if "Execution Time" in line]
    return lines[0] if lines else "execution time not reported"


def explain_sqlite(path: str, finished: int, queued: int, limit: int) -> str:
    store = jobq.Store(sqlite_url(path))
    store.migrate()
    reset(store)
    log(f"SQLite: filling {finished} finished + {queued} queued rows")
    fill(store, finished, queued)
    conn = connect_sqlite(path)
    try:
        start = time.perf_counter()
        conn.execute("ANALYZE")
        log(f"  ANALYZE in {time.perf_counter() - start:.1f} s")
        stmt = capture_statement(store, lambda: store.capture(limit, worker_id=WORKER))
        rows = conn.execute("EXPLAIN QUERY PLAN " + stmt.sql, stmt.params).fetchall()
        plan = _sqlite_plan_tree(rows)
        counts = status_counts(store)
        timing = time_captures(store, stmt, conn, limit, queued)
    finally:
        conn.close()
    reset(store)
    store.dispose()
    size = os.path.getsize(path)
    return "\n".join(
        [
            f"## SQLite {sqlite3.sqlite_version} (file, WAL)",
            "",
            f"Rows: {counts}; database file {size / 1e6:.0f} MB; after ANALYZE",
            "",
            f"Store capture statement (limit {limit}, all queues), EXPLAIN QUERY PLAN:",
            "",
            "```",
            plan,
            "```",
            "",
            f"- {verdict(plan)}",
            timing,
        ]
    )


def _sqlite_plan_tree(rows: list[Any]) -> str:
    """EXPLAIN QUERY PLAN rows (id, parent, notused, detail) drawn as an indented tree."""
    depth: dict[int, int] = {0: -1}
    lines = []
    for node, parent, _notused, detail in rows:
        depth[node] = depth.get(parent, -1) + 1
        lines.append("  " * depth[node] + detail)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument(
        "--pg-schema",
        default="jobq_bench",
        help="PostgreSQL schema to work in, created and dropped by the script "
        "('' = the URL's own search_path)",
    )
    parser.add_argument("--sqlite-path", default=None, help="default: a temporary file")
    parser.add_argument("--pg-rows", type=int, default=1_000_000, help="finished rows")
    parser.add_argument("--sqlite-rows", type=int, default=200_000, help="finished rows")
    parser.add_argument("--queued", type=int, default=1000, help="queued rows")
    parser.add_argument("--limit", type=int, default=100, help="capture limit")
    parser.add_argument(
        "--no-vacuum",
        action="store_true",
        help="PostgreSQL: ANALYZE only, leaving the UPDATE's dead index entries in place",
    )
    parser.add_argument("--only", choices=("sqlite", "postgresql"))
    args = parser.parse_args(argv)

    tmpdir = None
    sqlite_path = args.sqlite_path
    if sqlite_path is None:
        tmpdir = tempfile.mkdtemp(prefix="jobq-explain-")
        sqlite_path = os.path.join(tmpdir, "explain.db")
    sections = [f"# Capture plans ({os.cpu_count()} cores)"]
    try:
        if args.only in (None, "sqlite"):
            sections.append(explain_sqlite(sqlite_path, args.sqlite_rows, args.queued, args.limit))
        if args.only in (None, "postgresql"):
            url = in_schema(args.postgres_url, args.pg_schema)
            sections.append(
                explain_postgres(url, args.pg_rows, args.queued, args.limit, not args.no_vacuum)
            )
    finally:
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)
        if args.only != "sqlite":
            drop_schema(args.postgres_url, args.pg_schema)
    print("\n\n".join(sections))
    return 0


if __name__ == "__main__":
    sys.exit(main())
