#!/usr/bin/env python
"""Store versus bare driver: what jobq's Store costs over running its own SQL by hand.

For each database (a SQLite file, PostgreSQL) and each operation it times the Store and a
bare driver loop (sqlite3 / psycopg 3) that replays the exact statements the Store sends,
captured from the Store's engine with a ``before_cursor_execute`` listener:

* enqueue_many: N tasks in one ``Store.enqueue_many`` call (one INSERT ... SELECT per
  5,000 rows) versus the same INSERT text with the same batching.
* capture+set_status: drain N queued tasks with ``capture(batch)`` then one
  ``set_status(id, attempt, "done")`` per task, each a unit of its own, versus the same
  capture and UPDATE texts.

The bare side copies the Store's transaction boundaries as recorded while capturing: a
statement the Store ran in a transaction gets BEGIN IMMEDIATE/COMMIT (SQLite) or
autocommit off and a commit (psycopg); one it ran alone in autocommit runs in autocommit.

The table is emptied before every run, and the drain's N tasks are enqueued (untimed) and
ANALYZEd before it starts, so every run starts from the same state. Store and bare runs
alternate. The result is a Markdown table on stdout; progress goes to stderr.

    .venv/bin/python benchmarks/bench_store.py
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import platform
import pstats
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sqlalchemy as sa

import jobq
from benchmarks._sql import ENQUEUE_BATCH, Statement, capture_statement
from benchmarks.harness import (
    DEFAULT_POSTGRES_URL,
    analyze,
    connect_postgres,
    connect_sqlite,
    drop_schema,
    git_state,
    in_schema,
    log,
    reset,
    sqlite_url,
    status_counts,
)
from jobq.dialects.schema import tasks

TASK_NAME = "bench.task"
WORKER = "bench-worker"
TARGET = 1.25
TARGET_TEXT = "Store costs at most 25% more than bare SQL"
# Values no real call uses, so they can be found among the captured parameters.
PROBE_ARGS = {"probe": "jobq-bench-probe-4f1c"}
PROBE_ID = 987_654_321_987
PROBE_ATTEMPT = 7_654_321


# --- the bare side ------------------------------------------------------------------


@dataclass
class Channel:
    """How the bare side runs one captured statement, mirroring how the Store ran it:
    inside a transaction (BEGIN IMMEDIATE/COMMIT on SQLite; psycopg with autocommit off
    and a commit) or on its own in autocommit."""

    stmt: Statement
    cursor: Any
    begin: Callable[[], None]
    commit: Callable[[], None]

    @property
    def mode(self) -> str:
        return "transaction" if self.stmt.transactional else "autocommit"


def _noop() -> None:
    pass


@dataclass
class Bare:
    """Raw driver connections replaying the Store's captured statements."""

    connections: list[Any]
    insert: Channel
    encode_batch: Callable[[list[Any]], Any]
    bind_insert: Callable[..., Any]
    capture: Channel
    update: Channel
    bind_update: Callable[..., Any]
    id_index: int = -1
    attempt_index: int = -1

    def enqueue_many(self, args_list: Sequence[Any]) -> list[int]:
        ch = self.insert
        ids: list[int] = []
        ch.begin()
        for start in range(0, len(args_list), ENQUEUE_BATCH):
            value = self.encode_batch(args_list[start : start + ENQUEUE_BATCH])
            ch.cursor.execute(ch.stmt.sql, self.bind_insert(value))
            ids += sorted(row[0] for row in ch.cursor.fetchall())
        ch.commit()
        return ids

    def drain(self) -> int:
        cap, upd = self.capture, self.update
        capture_cur, capture_sql, capture_params = cap.cursor, cap.stmt.sql, cap.stmt.params
        update_cur, update_sql, bind_update = upd.cursor, upd.stmt.sql, self.bind_update
        id_index, attempt_index = self.id_index, self.attempt_index
        done = 0
        while True:
            cap.begin()
            capture_cur.execute(capture_sql, capture_params)
            rows = capture_cur.fetchall()
            cap.commit()
            if not rows:
                break
            for row in rows:
                upd.begin()
                update_cur.execute(update_sql, bind_update(row[id_index], row[attempt_index]))
                applied = update_cur.rowcount == 1
                upd.commit()
                if not applied:
                    raise RuntimeError(f"bare set_status did not apply to task {row[id_index]}")
                done += 1
        return done

    def locate_columns(self) -> None:
        """Where id and attempt sit in the capture's RETURNING row (from the cursor)."""
        conn = self.capture.cursor.connection
        cur = conn.cursor()
        if isinstance(conn, sqlite3.Connection):
            conn.execute("BEGIN IMMEDIATE")
        else:
            conn.autocommit, autocommit = False, conn.autocommit
        cur.execute(self.capture.stmt.sql, self.capture.stmt.params)
        names = [d[0] for d in cur.description]
        cur.fetchall()
        conn.rollback()
        if not isinstance(conn, sqlite3.Connection):
            conn.autocommit = autocommit
        cur.close()
        self.id_index, self.attempt_index = names.index("id"), names.index("attempt")

    def close(self) -> None:
        for conn in self.connections:
            conn.close()

    def modes(self) -> str:
        return (
            f"enqueue_many: {self.insert.mode}; capture: {self.capture.mode}; "
            f"set_status: {self.update.mode}"
        )


def _slot_containing(stmt: Statement, needle: str) -> str | int:
    items = stmt.params.items() if isinstance(stmt.params, dict) else enumerate(stmt.params)
    slots = [k for k, v in items if needle in repr(v)]
    if len(slots) != 1:
        raise LookupError(f"{needle!r} found in {len(slots)} parameters")
    return slots[0]


# One encoder, as jobq.db.payload uses: compact separators, NaN refused.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


def make_bare(store: jobq.Store, kind: str, url: str, n: int, batch: int) -> Bare:
    """Capture the Store's three statements (and how it ran them) and wire up raw drivers."""
    # The probe call has the benchmark's shape (n rows), so the Store picks the same
    # transaction handling as in the timed runs; only its first statement is captured.
    probe_list = [PROBE_ARGS, *({"n": i} for i in range(1, n))]
    insert = capture_statement(store, lambda: store.enqueue_many(TASK_NAME, probe_list))
    capture = capture_statement(store, lambda: store.capture(batch, worker_id=WORKER))
    update = capture_statement(store, lambda: store.set_status(PROBE_ID, PROBE_ATTEMPT, "done"))
    args_slot = _slot_containing(insert, PROBE_ARGS["probe"])
    probe_value = insert.params[args_slot]  # type: ignore[index]
    expected = probe_list[:ENQUEUE_BATCH]
    # The batch of args travels as one parameter; build it in the same shape.
    if isinstance(probe_value, str) and probe_value == _ENCODER.encode(expected):
        encode_batch: Callable[[list[Any]], Any] = _ENCODER.encode  # one JSON array
    elif isinstance(probe_value, list) and probe_value == [_ENCODER.encode(a) for a in expected]:

        def encode_batch(chunk: list[Any]) -> Any:  # a list of JSON objects
            return [_ENCODER.encode(args) for args in chunk]

    else:
        raise RuntimeError(f"unexpected shape of the args parameter: {probe_value!r:.200}")

    connections: list[Any] = []
    if kind == "postgresql":
        # One connection per mode the Store uses, so neither toggles autocommit per call.
        by_mode: dict[bool, Any] = {}

        def channel(stmt: Statement) -> Channel:
            if stmt.transactional not in by_mode:
                conn = connect_postgres(url, autocommit=not stmt.transactional)
                connections.append(conn)
                by_mode[stmt.transactional] = conn
            conn = by_mode[stmt.transactional]
            # psycopg sends BEGIN itself before the first statement when autocommit is off.
            commit = conn.commit if stmt.transactional else _noop
            return Channel(stmt, conn.cursor(), _noop, commit)

    else:
        conn = connect_sqlite(store.engine.url.database)
        connections.append(conn)

        def begin() -> None:
            conn.execute("BEGIN IMMEDIATE")

        def commit() -> None:
            conn.execute("COMMIT")

        def channel(stmt: Statement) -> Channel:
            if stmt.transactional:
                return Channel(stmt, conn.cursor(), begin, commit)
            return Channel(stmt, conn.cursor(), _noop, _noop)

    bare = Bare(
        connections=connections,
        insert=channel(insert),
        encode_batch=encode_batch,
        bind_insert=insert.binder(args_slot),
        capture=channel(capture),
        update=channel(update),
        bind_update=update.binder(update.slot_of(PROBE_ID), update.slot_of(PROBE_ATTEMPT)),
    )
    bare.locate_columns()
    return bare


# --- the Store side -----------------------------------------------------------------


def store_enqueue_many(store: jobq.Store, args_list: Sequence[Any]) -> list[int]:
    return store.enqueue_many(TASK_NAME, args_list)


def store_drain(store: jobq.Store, batch: int) -> int:
    done = 0
    while captured := store.capture(batch, worker_id=WORKER):
        for task in captured:
            if not store.set_status(task.id, task.attempt, "done"):
                raise RuntimeError(f"set_status did not apply to task {task.id}")
            done += 1
    return done


# --- measuring ----------------------------------------------------------------------


@dataclass
class Result:
    database: str
    operation: str
    rows: int
    store: list[float] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)

    @property
    def ratio_best(self) -> float:
        return min(self.store) / min(self.bare)

    @property
    def ratio_median(self) -> float:
        return statistics.median(self.store) / statistics.median(self.bare)


_SIGNATURE_COLUMNS = [
    tasks.c[name]
    for name in (
        "name", "queue_id", "status", "priority", "retries_left", "attempt", "lease",
        "timeout", "locked_by", "locked_until", "unique_key", "lock_key", "result",
        "error", "recurring", "args",
    )
]  # fmt: skip


def table_signature(store: jobq.Store) -> tuple[Any, ...]:
    """What the rows hold, apart from ids and clock times: to check both sides agree."""
    with store.engine.connect() as conn:
        first = conn.execute(sa.select(*_SIGNATURE_COLUMNS).order_by(tasks.c.id).limit(1)).first()
        last = conn.execute(
            sa.select(*_SIGNATURE_COLUMNS).order_by(tasks.c.id.desc()).limit(1)
        ).first()
        times_set = conn.execute(
            sa.select(sa.func.count(tasks.c.finished_at), sa.func.count(tasks.c.started_at))
        ).one()
    return (tuple(first or ()), tuple(last or ()), tuple(times_set), status_counts(store))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def run_database(
    label: str,
    store: jobq.Store,
    bare: Bare,
    n: int,
    batch: int,
    repeat: int,
    enqueue_repeat: int,
) -> list[Result]:
    args_list = [{"n": i} for i in range(n)]
    enqueue = Result(label, "enqueue_many", n)
    drain = Result(label, f"capture({batch})+set_status", n)

    # Warm-up: connections, SQLAlchemy's compiled cache, psycopg's prepared statements.
    warm = args_list[: min(n, 1000)]
    for _ in range(2):
        reset(store)
        store_enqueue_many(store, warm)
        store_drain(store, batch)
        reset(store)
        bare.enqueue_many(warm)
        bare.drain()

    signatures: dict[str, list[tuple[Any, ...]]] = {"store": [], "bare": []}
    # Store and bare alternate, and which goes first alternates too.
    for r in range(enqueue_repeat):
        for side in ("store", "bare") if r % 2 == 0 else ("bare", "store"):
            reset(store)
            if side == "store":
                seconds, ids = timed(lambda: store_enqueue_many(store, args_list))
            else:
                seconds, ids = timed(lambda: bare.enqueue_many(args_list))
            if len(ids) != n or status_counts(store) != {"queued": n}:
                raise RuntimeError(f"{side} enqueue_many left {status_counts(store)}")
            if r < 2:
                signatures[side].append(table_signature(store))
            getattr(enqueue, side).append(seconds)
            log(f"  {label} enqueue_many  {side:5} run {r + 1}: {seconds:.3f} s")
    for r in range(repeat):
        for side in ("store", "bare") if r % 2 == 0 else ("bare", "store"):
            # Untimed: the same N queued rows, with fresh statistics, for every run.
            reset(store)
            store.enqueue_many(TASK_NAME, args_list)
            analyze(store)
            if side == "store":
                seconds, done = timed(lambda: store_drain(store, batch))
            else:
                seconds, done = timed(bare.drain)
            if done != n or status_counts(store) != {"done": n}:
                raise RuntimeError(f"{side} drain left {status_counts(store)}")
            if r < 2:
                signatures[side].append(table_signature(store))
            getattr(drain, side).append(seconds)
            log(f"  {label} drain         {side:5} run {r + 1}: {seconds:.3f} s")
    # Both sides must leave the same rows behind (apart from ids and clock times).
    if signatures["store"] != signatures["bare"]:
        raise RuntimeError(f"Store and bare rows differ: {signatures}")
    reset(store)
    return [enqueue, drain]


def profile_store(label: str, store: jobq.Store, n: int, batch: int, top: int) -> None:
    """cProfile one Store run of each operation; the top functions by own time, to stderr."""
    args_list = [{"n": i} for i in range(n)]
    for operation in ("enqueue_many", "drain"):
        reset(store)
        if operation == "drain":
            store.enqueue_many(TASK_NAME, args_list)
            analyze(store)
        profiler = cProfile.Profile()
        profiler.enable()
        if operation == "enqueue_many":
            store_enqueue_many(store, args_list)
        else:
            store_drain(store, batch)
        profiler.disable()
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        stats.sort_stats("tottime").print_stats(top)
        log(f"\n### cProfile: {label} Store {operation}, {n} tasks (sorted by own time)\n")
        log(out.getvalue())
    reset(store)


# --- report -------------------------------------------------------------------------


def markdown(results: list[Result], meta: list[str]) -> str:
    lines = [*meta, ""]
    lines.append(
        "| database | operation | tasks | Store s (best) | bare s (best) | Store rows/s "
        "| bare rows/s | store/bare (best) | store/bare (median) | meets target |"
    )
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for res in results:
        best_store, best_bare = min(res.store), min(res.bare)
        lines.append(
            f"| {res.database} | {res.operation} | {res.rows} | {best_store:.3f} "
            f"| {best_bare:.3f} | {res.rows / best_store:,.0f} | {res.rows / best_bare:,.0f} "
            f"| {res.ratio_best:.2f} | {res.ratio_median:.2f} "
            f"| {'yes' if res.ratio_best <= TARGET else 'no'} |"
        )
    lines.append("")
    lines.append(f'Target: "{TARGET_TEXT}" (store_time / bare_time <= {TARGET}), best runs:')
    lines.append("")
    for res in results:
        verdict = "meets" if res.ratio_best <= TARGET else "does NOT meet"
        lines.append(
            f"- {res.database} {res.operation}: ratio {res.ratio_best:.2f} {verdict} the target."
        )
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
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100, help="capture limit")
    parser.add_argument(
        "--repeat", type=int, default=3, help="drain runs per side; the best is reported"
    )
    parser.add_argument(
        "--enqueue-repeat",
        type=int,
        default=None,
        help="enqueue_many runs per side (short, so noisier); default 3 x --repeat",
    )
    parser.add_argument("--only", choices=("sqlite", "postgresql"))
    parser.add_argument(
        "--profile", action="store_true", help="also cProfile one Store run each (stderr)"
    )
    parser.add_argument("--profile-top", type=int, default=25)
    args = parser.parse_args(argv)
    if args.enqueue_repeat is None:
        args.enqueue_repeat = 3 * args.repeat

    tmpdir = None
    sqlite_path = args.sqlite_path
    if sqlite_path is None:
        tmpdir = tempfile.mkdtemp(prefix="jobq-bench-")
        sqlite_path = os.path.join(tmpdir, "bench.db")

    meta = [
        f"Machine: {os.cpu_count()} cores, {platform.system()} {platform.machine()}; "
        f"Python {platform.python_version()}, SQLAlchemy {sa.__version__}, "
        f"SQLite {sqlite3.sqlite_version}",
        f"jobq: {git_state()}",
        f"Tasks per run: {args.tasks}; capture batch: {args.batch}; runs per side: "
        f"enqueue_many {args.enqueue_repeat}, drain {args.repeat} "
        "(best reported; the median ratio alongside)",
    ]
    results: list[Result] = []
    try:
        for kind in ("sqlite", "postgresql"):
            if args.only and args.only != kind:
                continue
            url = (
                sqlite_url(sqlite_path)
                if kind == "sqlite"
                else in_schema(args.postgres_url, args.pg_schema)
            )
            store = jobq.Store(url)
            store.migrate()
            reset(store)
            bare = make_bare(store, kind, url, args.tasks, args.batch)
            try:
                if kind == "sqlite":
                    label = "SQLite (file, WAL)"
                else:
                    import psycopg

                    version = bare.connections[0].info.server_version
                    label = f"PostgreSQL {version // 10000}"
                    meta.append(
                        f"PostgreSQL server {version // 10000}.{version % 10000}, "
                        f"psycopg {psycopg.__version__}"
                    )
                meta.append(f"{label}, transactions as the Store runs them: {bare.modes()}")
                log(f"{label}: {args.tasks} tasks, {args.repeat} runs per side ({bare.modes()})")
                results += run_database(
                    label, store, bare, args.tasks, args.batch, args.repeat, args.enqueue_repeat
                )
                if args.profile:
                    profile_store(label, store, args.tasks, args.batch, args.profile_top)
            finally:
                bare.close()
                store.dispose()
    finally:
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)
        if args.only != "sqlite":
            drop_schema(args.postgres_url, args.pg_schema)
    print(markdown(results, meta))
    return 0 if all(r.ratio_best <= TARGET for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
