"""What a fair queue's capture costs against a plain capture of the same batch (issue 43).

Loads one fair queue with ``--rows`` waiting rows (1,000,000) spread over ``--keys`` fair
keys (10,000; round robin, so every key has work) and a plain queue with as many rows
without keys, both due, then times ``Store.capture(--batch)`` from each, alternating,
``--rounds`` times after ``--warmup`` untimed rounds (the first captures after a bulk load
of 2,000,000 rows pay for the load: pages read and written back for the first time): the
median of each and their ratio. Rows go in with one INSERT ...
SELECT per queue (the database's own row generator); the fair queue's keys are then
found by ``store.fair_queues.settle``, as for rows written before a queue became fair.

    .venv/bin/python benchmarks/fair_capture.py                       # three databases
    .venv/bin/python benchmarks/fair_capture.py --only postgresql --rows 100000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sqlalchemy as sa

import jobq
from benchmarks.harness import (
    DEFAULT_MYSQL_URL,
    DEFAULT_POSTGRES_URL,
    analyze,
    database,
    git_state,
    log,
    markdown_table,
)

#: Each database's generator of the integers 1..:n, as a subquery with a column ``i``.
NUMBERS = {
    "postgresql": "SELECT generate_series(1, :n) AS i",
    "sqlite": "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < :n) "
    "SELECT i FROM s",
    "mariadb": "SELECT seq AS i FROM seq_1_to_{n}",
}
NOW = {
    "postgresql": "now() - interval '1 hour'",
    "sqlite": "strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hour')",
    "mariadb": "UTC_TIMESTAMP(6) - INTERVAL 1 HOUR",
}
#: How each database makes text of an integer, for the keys.
KEY = {
    "postgresql": "'k' || (i % :keys)",
    "sqlite": "'k' || (i % :keys)",
    "mariadb": "CONCAT('k', i % :keys)",
}


def load(store: jobq.Store, kind: str, queue: str, rows: int, keys: int | None) -> None:
    """``rows`` due rows in ``queue``, over ``keys`` fair keys (None: no keys)."""
    numbers = NUMBERS[kind].replace("{n}", str(rows))
    key = "NULL" if keys is None else KEY[kind]
    sql = (
        "INSERT INTO jobq_tasks (queue_id, name, args, run_at, retries_left, created_at, "
        f"fair_key) SELECT :queue, 'noop', '{{}}', {NOW[kind]}, 3, {NOW[kind]}, {key} "
        f"FROM ({numbers}) AS numbers"
    )
    params: dict[str, object] = {"queue": queue, "n": rows}
    if keys is not None:
        params["keys"] = keys
    with store.engine.begin() as conn:
        conn.execute(sa.text(sql), params)


def measure(url: str, label: str, args: argparse.Namespace) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp, database(url, tmp, "jobq_bench_fair") as db:
        store = db.store
        kind = "mariadb" if db.kind in ("mysql", "mariadb") else db.kind
        started = time.monotonic()
        # The plain queue's rows first: on SQLite a capture from one queue walks the index
        # of every queue's waiting rows, and would step over a fair (or limited, or paused)
        # queue's backlog loaded before them (the plain capture's own cost is compared).
        load(store, kind, "plain", args.rows, None)
        load(store, kind, "fair", args.rows, args.keys)
        store.fair_queues.make_fair("fair")  # settles: a key row for each of the keys
        analyze(store)
        log(f"{label}: loaded 2 x {args.rows:,} rows in {time.monotonic() - started:.1f} s")
        plain: list[float] = []
        fair: list[float] = []
        keys_seen: set[str | None] = set()
        for n in range(args.warmup + args.rounds):
            for queue, times in (("plain", plain), ("fair", fair)):
                began = time.perf_counter()
                got = store.capture(args.batch, queues=queue, worker_id="bench")
                if n >= args.warmup:
                    times.append(time.perf_counter() - began)
                assert len(got) == args.batch, (queue, len(got))
                if queue == "fair":
                    keys_seen.update(task.fair_key for task in got)
        p, f = statistics.median(plain) * 1e3, statistics.median(fair) * 1e3
        return [
            label, f"{args.rows:,}", f"{args.keys:,}", str(args.batch), f"{p:.2f}", f"{f:.2f}",
            f"{f / p:.2f}", f"{len(keys_seen):,}",
        ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows in each queue")
    parser.add_argument("--keys", type=int, default=10_000, help="fair keys of the fair queue")
    parser.add_argument("--batch", type=int, default=100, help="rows each capture takes")
    parser.add_argument("--rounds", type=int, default=200, help="timed captures of each queue")
    parser.add_argument("--warmup", type=int, default=50, help="untimed captures of each first")
    parser.add_argument("--only", choices=["postgresql", "mariadb", "sqlite"])
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--mysql-url", default=DEFAULT_MYSQL_URL)
    args = parser.parse_args()
    targets = {
        "postgresql": (args.postgres_url, "PostgreSQL"),
        "mariadb": (args.mysql_url, "MariaDB"),
        "sqlite": ("sqlite", "SQLite"),
    }
    rows = [
        measure(url, label, args)
        for name, (url, label) in targets.items()
        if args.only in (None, name)
    ]
    print(f"### fair_capture.py: {git_state()}\n")
    print(
        markdown_table(
            ["database", "rows a queue", "keys", "batch", "plain ms (median)",
             "fair ms (median)", "fair / plain", "keys served"],
            "lrrrrrrr",
            rows,
        )
    )  # fmt: skip
    print("\nTarget (issue 43): a fair capture costs at most 2x a plain one of the same batch.")
    if any(float(row[6]) > 2.0 for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
