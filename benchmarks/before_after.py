#!/usr/bin/env python
"""One worker's drain, two checkouts of jobq, interleaved: did a change cost throughput?

For each round, each database (PostgreSQL in a schema of its own, a SQLite file) and each
``--concurrency``, the same ``--tasks`` no-op tasks are enqueued (untimed, then ANALYZEd)
and drained by one ``jobq worker --burst`` of each checkout in turn, with its own
virtualenv's Python and its own code (``<checkout>/.venv/bin/python -m jobq.cli``, run in
the checkout), timed from spawn to exit. Which checkout goes first alternates by round, so
a machine getting busier or quieter does not favour one. The tasks table must be the
same in both (no migration between them). The report gives each run's jobs/s and the
median of each side, and their ratio.

    .venv/bin/python benchmarks/before_after.py --before ../old-checkout --after .
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jobq
from benchmarks._drains import fill
from benchmarks.harness import (
    DEFAULT_POSTGRES_URL,
    SYNC_TASK,
    csv_ints,
    drop_schema,
    git_state,
    in_schema,
    log,
    markdown_table,
    sqlite_url,
    status_counts,
)

SCHEMA = "jobq_before_after"


def drain(checkout: Path, url: str, concurrency: int, timeout: float) -> float:
    """Seconds from spawn to exit of ``checkout``'s worker draining what is queued."""
    python = checkout / ".venv" / "bin" / "python"
    cmd = [str(python), "-m", "jobq.cli", "worker", "--app", "benchmarks.noop_app:app",
           "--burst", "--concurrency", str(concurrency)]  # fmt: skip
    env = dict(os.environ, JOBQ_DATABASE_URL=url, PYTHONPATH=str(checkout))
    with tempfile.TemporaryFile() as stderr:  # its INFO lines, one per start and end
        began = time.monotonic()
        done = subprocess.run(cmd, cwd=checkout, env=env, stderr=stderr, timeout=timeout)
        seconds = time.monotonic() - began
        if done.returncode != 0:
            stderr.seek(0)
            raise RuntimeError(f"{checkout}: worker exited {done.returncode}: "
                               f"{stderr.read()[-2000:].decode(errors='replace')}")  # fmt: skip
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="a checkout with a .venv")
    parser.add_argument("--after", type=Path, required=True, help="a checkout with a .venv")
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--tasks", type=int, default=50_000)
    parser.add_argument("--concurrency", type=csv_ints, default=[16, 100])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    sides = {"before": args.before.resolve(), "after": args.after.resolve()}
    rates: dict[tuple[str, int, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        urls = {"PostgreSQL": in_schema(args.postgres_url, SCHEMA),
                "SQLite": sqlite_url(os.path.join(tmp, "bench.db"))}  # fmt: skip
        try:
            for database, url in urls.items():
                store = jobq.Store(url)
                store.migrate()
                try:
                    for rnd in range(args.rounds):
                        order = list(sides) if rnd % 2 == 0 else list(reversed(sides))
                        for conc in args.concurrency:
                            for side in order:
                                fill(store, SYNC_TASK, args.tasks)
                                seconds = drain(sides[side], url, conc, args.timeout)
                                if status_counts(store) != {"done": args.tasks}:
                                    raise RuntimeError(f"{side}: not every task ended done")
                                rate = args.tasks / seconds
                                log(f"round {rnd} {database} c={conc} {side}: {rate:,.0f}/s")
                                rates.setdefault((database, conc, side), []).append(rate)
                finally:
                    store.dispose()
        finally:
            drop_schema(args.postgres_url, SCHEMA)
    rows = []
    for database in urls:
        for conc in args.concurrency:
            before = rates[(database, conc, "before")]
            after = rates[(database, conc, "after")]
            ratio = statistics.median(after) / statistics.median(before)
            rows.append([
                database, conc,
                ", ".join(f"{r:,.0f}" for r in before), f"{statistics.median(before):,.0f}",
                ", ".join(f"{r:,.0f}" for r in after), f"{statistics.median(after):,.0f}",
                f"{ratio:.3f}",
            ])  # fmt: skip
    print(f"before: {git_state(sides['before'])}; after: {git_state(sides['after'])}; "
          f"{args.tasks:,} no-op tasks, one worker, logs on, spawn to exit\n")  # fmt: skip
    print(markdown_table(
        ["database", "concurrency", "before (jobs/s)", "median", "after (jobs/s)", "median",
         "after / before"], "lrrrrrr", rows,
    ))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
