#!/usr/bin/env python
"""What `jobq metrics` costs on PostgreSQL with many finished rows: its two counts, a scrape.

In a schema of its own (``--pg-schema``, created here and dropped at the end unless
``--keep``), it migrates jobq's tables and fills them with INSERT ... SELECT
generate_series: ``--finished`` finished rows (90% done, 5% failed for good, 5% cancelled)
and ``--waiting`` queued ones (a tenth of them not yet due), over ``--queues`` queues, then
VACUUM ANALYZE (as autovacuum would have by then). It then times, with the exporter's own
code (jobq.observe.exporter):

- the active count (the partial index's rows: every ``--interval`` seconds), median of
  ``--repeat``;
- the finished count (a GROUP BY over the whole table), median of ``--finished-repeat``;
- a scrape of /metrics over HTTP, which answers from the last counts, median of 50;
- for reference, one Store.counts() (what `jobq status` runs: one GROUP BY of everything).

and prints each count's plan (EXPLAIN ANALYZE, the node lines) and a table.

    .venv/bin/python benchmarks/exporter_counts.py
    .venv/bin/python benchmarks/exporter_counts.py --finished 1000000 --keep

The server: ``$JOBQ_BENCH_POSTGRES_URL``, else postgresql+psycopg://root@127.0.0.1:5432/test.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sqlalchemy as sa

import jobq
from benchmarks.harness import BENCH_POSTGRES_URL, TABLE, drop_schema, in_schema, log
from jobq.observe.counting import TaskCounts
from jobq.observe.exporter import DatabaseExporter

#: Loads the rows of a benchmark: (store, finished, waiting, queues) -> seconds taken.
Filler = Callable[[jobq.Store, int, int, int], float]
#: Rows per INSERT ... SELECT: each its own transaction, so WAL and locks stay small.
CHUNK = 1_000_000

# Finished rows: status by g % 20 (18 done, 1 failed for good, 1 cancelled).
FINISHED_ROWS = f"""
INSERT INTO {TABLE} (queue_id, name, args, status, priority, run_at, retries_left, attempt,
                     created_at, started_at, finished_at)
SELECT 'q' || ((g / 7) % :queues), 'bench.noop', '{{"n": 1}}',
       CASE g % 20 WHEN 0 THEN 'failed' WHEN 1 THEN 'cancelled' ELSE 'done' END,
       0, now() - make_interval(secs => g % 86400), 0, 1,
       now() - make_interval(secs => g % 86400), now() - make_interval(secs => g % 86400),
       now() - make_interval(secs => g % 86400 - 1)
FROM generate_series(:first, :last) AS g
"""
# Waiting rows: queued, due a while ago except each tenth, due in an hour.
WAITING_ROWS = f"""
INSERT INTO {TABLE} (queue_id, name, args, status, priority, run_at, retries_left, attempt,
                     created_at)
SELECT 'q' || ((g / 7) % :queues), 'bench.noop', '{{"n": 1}}', 'queued', 0,
       CASE WHEN g % 10 = 0 THEN now() + interval '1 hour'
            ELSE now() - make_interval(secs => g % 3600) END,
       3, 0, now() - make_interval(secs => g % 3600)
FROM generate_series(1, :rows) AS g
"""


@contextmanager
def loaded(args: argparse.Namespace, fill: Filler) -> Iterator[jobq.Store]:
    """A migrated Store on schema ``args.pg_schema`` of ``args.postgres_url`` holding the
    rows ``fill`` loads, or those already there; the schema is dropped at the end unless
    ``args.keep``."""
    store = jobq.Store(in_schema(args.postgres_url, args.pg_schema))
    try:
        store.migrate()
        with store.engine.connect() as conn:
            present = conn.exec_driver_sql(f"SELECT count(*) FROM {TABLE}").scalar()
        if present:
            log(f"{present:,} rows already in {args.pg_schema}.{TABLE}: measuring those")
        else:
            log(f"loading {args.finished:,} finished and {args.waiting:,} waiting rows")
            log(f"loaded in {fill(store, args.finished, args.waiting, args.queues):.0f} s")
        yield store
    finally:
        store.dispose()
        if not args.keep:
            drop_schema(args.postgres_url, args.pg_schema)


def fill(store: jobq.Store, finished: int, waiting: int, queues: int) -> float:
    """The rows, loaded and vacuumed; the seconds it took."""
    started = time.perf_counter()
    for first in range(1, finished + 1, CHUNK):
        last = min(first + CHUNK - 1, finished)
        with store.engine.begin() as conn:
            conn.execute(sa.text(FINISHED_ROWS), {"queues": queues, "first": first, "last": last})
        log(f"  {last:,} finished rows ({time.perf_counter() - started:.0f} s)")
    with store.engine.begin() as conn:
        conn.execute(sa.text(WAITING_ROWS), {"queues": queues, "rows": waiting})
    log(f"  {waiting:,} waiting rows; VACUUM ANALYZE")
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f"VACUUM ANALYZE {TABLE}")
    return time.perf_counter() - started


def timed(action: Callable[[], object], repeat: int) -> list[float]:
    """Seconds each of ``repeat`` calls of ``action`` took."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return times


def plan(store: jobq.Store, stmt: sa.Select[Any]) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of ``stmt``, its node lines only."""
    sql = str(stmt.compile(store.engine, compile_kwargs={"literal_binds": True}))
    with store.engine.connect() as conn:
        rows = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS) " + sql).all()
    lines = [row[0] for row in rows]
    return "\n".join(line for line in lines if "->" in line or not line.startswith(" "))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read()


def measure(store: jobq.Store, args: argparse.Namespace) -> list[tuple[str, list[float]]]:
    counts = TaskCounts(store)
    log("plans (warm, second run):")
    statements = {"active": counts.active_statement, "finished": counts.finished_statement}
    for name, stmt in statements.items():
        plan(store, stmt)  # the first run reads the table into the cache
        log(f"-- {name}\n{plan(store, stmt)}")
    exporter = DatabaseExporter(store)
    results = [
        ("active count", timed(lambda: exporter.refresh("active"), args.repeat)),
        ("finished count", timed(lambda: exporter.refresh("finished"), args.finished_repeat)),
    ]
    server = exporter.serve(port := free_port())
    try:
        body = scrape(port)  # the first: connects, imports nothing more
        results.append(("scrape (HTTP)", timed(lambda: scrape(port), 50)))
    finally:
        server.shutdown()
    results.append(("Store.counts() (jobq status)", timed(store.counts, 1)))
    log(body.decode())
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres-url", default=BENCH_POSTGRES_URL)
    parser.add_argument("--pg-schema", default="jobq_exporter_bench")
    parser.add_argument("--finished", type=int, default=10_000_000)
    parser.add_argument("--waiting", type=int, default=100_000)
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--finished-repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="Leave the schema and its rows.")
    args = parser.parse_args()
    with loaded(args, fill) as store:
        with store.engine.connect() as conn:
            size = conn.exec_driver_sql(
                f"SELECT pg_size_pretty(pg_total_relation_size('{TABLE}'))"
            ).scalar()
        results = measure(store, args)
    print(f"\n{args.finished:,} finished + {args.waiting:,} waiting rows ({size} with indexes)")
    print(f"{'':30} {'median':>10} {'min':>10} {'runs':>5}")
    for label, times in results:
        median, best = statistics.median(times), min(times)
        print(f"{label:30} {median * 1000:8.1f}ms {best * 1000:8.1f}ms {len(times):5}")


if __name__ == "__main__":
    main()
