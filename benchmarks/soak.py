"""Soak: the chaos scenario of tests/chaos, run for as long as you choose.

Six `jobq worker` processes (tests/apps/chaos.py) on a private PostgreSQL server (made
with the machine's initdb, as in the tests) work through a stream of tasks, each writing
one side-effect row. Every --kill-every seconds one worker, never the first, is killed
with kill -9 and replaced; every --restart-every seconds PostgreSQL itself restarts;
with --proxy the workers' connections go through a proxy that cuts them at random.
The feed keeps about --backlog tasks queued until --minutes have passed; then the
workers drain what is left and stop with SIGTERM, and the database is checked.

It prints: tasks, kills, restarts, proxy cuts, duplicates (and how many a kill
explains), lost (must be 0), stuck, leases and limiter slots held, and the memory of
the first worker (never killed) over time, which must not grow.

    .venv/bin/python benchmarks/soak.py [--minutes 30] [--workers 6] [--proxy]
                                        [--kill-every 2] [--restart-every 300]
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

import jobq
from tests import postgres_server
from tests.chaos import scenario


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--kill-every", type=float, default=2.0)
    parser.add_argument("--restart-every", type=float, default=300.0)
    parser.add_argument("--backlog", type=int, default=2000)
    parser.add_argument("--proxy", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()

    programs = postgres_server.bindir()
    if programs is None:
        sys.exit("soak: no PostgreSQL server programs (initdb, pg_ctl) on this machine")
    ends = time.monotonic() + options.minutes * 60
    faults = scenario.Faults(
        kill_every=options.kill_every, restart_db_at=(), restart_db_every=options.restart_every,
        proxy=options.proxy, spare_slots=1,
    )  # fmt: skip

    def feed(store: jobq.Store) -> int | None:
        """Top the backlog up to --backlog queued tasks until the time is up."""
        if time.monotonic() >= ends:
            return None
        try:
            queued = sum(n for (_, s), n in store.counts().items() if s is jobq.Status.QUEUED)
            missing = max(options.backlog - queued, 0)
            scenario.enqueue(store, missing, first=feed.sent)  # type: ignore[attr-defined]
        except jobq.DatabaseUnavailable:
            return 0  # restarting: try again on the next turn
        feed.sent += missing  # type: ignore[attr-defined]
        return missing

    feed.sent = 0  # type: ignore[attr-defined]
    with postgres_server.running(programs) as server:
        log_dir = Path(tempfile.mkdtemp(prefix="jobq-soak-"))
        report = scenario.run(
            server, log_dir, tasks_count=0, faults=faults, workers=options.workers,
            deadline=options.minutes * 60 + 300, seed=options.seed, feed=feed,
        )  # fmt: skip
    print(report.summary())
    print(f"worker logs: {log_dir}")
    print_memory(report.memory)
    if report.lost or report.unexplained > report.stale_or_lost or report.worker_errors:
        sys.exit("soak: FAILED (see above)")


def print_memory(samples: list[tuple[float, int]]) -> None:
    """The first worker's resident memory per tenth of the run, and the growth."""
    if not samples:
        return
    tenth = max(len(samples) // 10, 1)
    print("worker 0 resident memory (KiB), median per tenth of the run:")
    medians = []
    for start in range(0, len(samples), tenth):
        chunk = samples[start : start + tenth]
        medians.append(statistics.median(kib for _, kib in chunk))
        print(f"  {chunk[0][0]:8.0f} s  {medians[-1]:10.0f}")
    # The first tenth warms up (imports, pools, caches); growth is measured after it.
    base = medians[1] if len(medians) > 2 else medians[0]
    print(f"growth after warm-up: {medians[-1] - base:+.0f} KiB")


if __name__ == "__main__":
    main()
