"""bench_worker.py's bare-SQL drain: jobq's own capture and completion SQL, replayed by hand.

The child side (``python -m benchmarks._bare_loop URL --batch 100``, printing one JSON
object) captures the statements a Store sends for ``capture(batch)`` and for
``set_statuses`` (with a ``before_cursor_execute`` listener, see _sql.py; nothing is
written), then drains the queued rows at URL with the bare driver: psycopg 3 on
PostgreSQL, the stdlib ``sqlite3`` on SQLite (WAL, jobq's PRAGMAs). Each turn runs the
capture statement, then marks the captured rows done with one execute of the
set_statuses statement, each statement with the transaction handling the Store gives it
(PostgreSQL: autocommit or a commit; SQLite: BEGIN IMMEDIATE ... COMMIT around a
statement the Store runs in a transaction). The parent side (``bare_drain``) fills the
table and times the child from spawn to exit, like the worker processes.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sqlalchemy as sa

import jobq
from benchmarks._drains import Drain, fill
from benchmarks._sql import Statement, capture_statement
from benchmarks.harness import (
    ROOT,
    SYNC_TASK,
    connect_postgres,
    connect_sqlite,
    log,
    status_counts,
    worker_env,
)
from jobq.db.tasks import Completion, Status

# Values no real run has, so they can be found among the captured parameters.
PROBE_ID = 987_654_321_987
PROBE_ATTEMPT = 7_654_321
_ENCODER = json.JSONEncoder(separators=(",", ":"))


def mode(stmt: Statement) -> str:
    """How the Store runs ``stmt``: in a transaction or on its own in autocommit."""
    return "in a transaction" if stmt.transactional else "autocommit"


def _probe_record(text: str) -> dict[str, Any]:
    """The probe's end as the Store encoded it into the set_statuses parameter."""
    records = [r for r in json.loads(text) if r.get("id") == PROBE_ID]
    if len(records) != 1 or records[0].get("attempt") != PROBE_ATTEMPT:
        raise RuntimeError(f"the probe end is not in the parameter: {text[:200]!r}")
    return records[0]


class Runner:
    """Runs a captured statement on a bare connection with the Store's transaction handling."""

    def __init__(self, url: str, capture: Statement, record: Statement) -> None:
        self.sqlite: sqlite3.Connection | None = None
        self.connections: list[Any] = []
        backend = sa.make_url(url).get_backend_name()
        if backend == "sqlite":
            database = sa.make_url(url).database
            if not database:
                raise ValueError(f"the bare loop needs a SQLite file: {url}")
            self.sqlite = connect_sqlite(database)
            self.connections.append(self.sqlite)
        elif backend == "postgresql":
            # One connection per statement, so neither toggles autocommit per call.
            for stmt in (capture, record):
                self.connections.append(connect_postgres(url, autocommit=not stmt.transactional))
        else:
            raise ValueError(f"the bare loop runs on PostgreSQL or SQLite, not {backend}")
        self.capture, self.record = capture, record

    def run(self, stmt: Statement, params: Any) -> tuple[list[Any], list[str], int]:
        """Run ``stmt`` once: its rows, their column names, and its rowcount."""
        if self.sqlite is not None:
            conn: Any = self.sqlite
            if stmt.transactional:
                conn.execute("BEGIN IMMEDIATE")
        else:
            conn = self.connections[0 if stmt is self.capture else 1]
        cur = conn.cursor()
        cur.execute(stmt.sql, params)
        rows = cur.fetchall() if cur.description else []
        names = [d[0] for d in cur.description] if cur.description else []
        count = cur.rowcount
        if stmt.transactional:
            if self.sqlite is not None:
                conn.execute("COMMIT")
            else:
                conn.commit()
        cur.close()
        return rows, names, count

    def close(self) -> None:
        for conn in self.connections:
            conn.close()


def bare_loop(url: str, batch: int) -> dict[str, Any]:
    """The child side: drain the queued rows at ``url`` with the Store's own SQL.

    Returns the loop's own seconds, the rows captured and the transaction modes.
    """
    store = jobq.Store(url)
    try:
        capture = capture_statement(store, lambda: store.capture(batch, worker_id="bench"))
        probe = [Completion(PROBE_ID, PROBE_ATTEMPT, Status.DONE)]
        record = capture_statement(store, lambda: store.set_statuses(probe))
    finally:
        store.dispose()
    # The ends travel as one JSON array (bound once or more); build it in the same shape.
    slots = record.slots_containing(str(PROBE_ID))
    template = _probe_record(record.params[slots[0]])  # type: ignore[index]
    bind = record.binder(*slots)
    runner = Runner(url, capture, record)
    try:
        done = 0
        start = time.perf_counter()
        while True:
            rows, names, _ = runner.run(capture, capture.params)
            if not rows:
                break
            i, a = names.index("id"), names.index("attempt")
            ends = _ENCODER.encode([{**template, "id": row[i], "attempt": row[a]} for row in rows])
            _, _, applied = runner.run(record, bind(*[ends] * len(slots)))
            if applied != len(rows):
                raise RuntimeError(f"set_statuses applied to {applied} of {len(rows)} rows")
            done += len(rows)
        seconds = time.perf_counter() - start
    finally:
        runner.close()
    return {"seconds": seconds, "captured": done, "capture": mode(capture), "record": mode(record)}


def bare_drain(url: str, database: str, driver: str, n: int, batch: int, timeout: float) -> Drain:
    """Time the bare loop as a child process from spawn to exit; check every row is done."""
    store = jobq.Store(url)
    try:
        store.migrate()
        fill(store, SYNC_TASK, n)
        cmd = [sys.executable, "-m", "benchmarks._bare_loop", url, "--batch", str(batch)]
        log(f"bare SQL ({driver})/{database}: draining {n} tasks, capture {batch}")
        start = time.perf_counter()
        out = subprocess.run(
            cmd, cwd=ROOT, env=worker_env(url), check=True, timeout=timeout,
            stdout=subprocess.PIPE, text=True,
        ).stdout  # fmt: skip
        seconds = time.perf_counter() - start
        result = json.loads(out.strip().splitlines()[-1])
        counts = status_counts(store)
        if result["captured"] != n or counts != {"done": n}:
            raise RuntimeError(f"bare drain: {result['captured']} captured, table holds {counts}")
        loop_s = result["seconds"]
        note = (
            f"capture {batch} ({result['capture']}) + one set_statuses UPDATE "
            f"({result['record']}); loop alone {loop_s:.2f} s ({n / loop_s:,.0f}/s)"
        )
        return Drain(f"bare SQL ({driver})", database, batch, n, seconds, note, "bare")
    finally:
        store.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="jobq's database (SQLAlchemy URL), its tasks queued")
    parser.add_argument("--batch", type=int, default=100, help="the capture limit")
    args = parser.parse_args()
    print(json.dumps(bare_loop(args.url, args.batch)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
