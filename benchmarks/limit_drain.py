"""What a concurrency limit costs: drain one queue limited to 50, per limiter, beside unlimited.

Enqueues --tasks tasks on one queue, starts --workers `jobq worker --burst` processes at
--concurrency each (more slots in all than the limit, so the limit binds), and times the
drain until every worker has exited, for: no limit, the sql limiter, and the tigerbeetle
limiter (a single-replica development server started here, from --tigerbeetle-bin or
$JOBQ_TEST_TIGERBEETLE_BIN or `tigerbeetle` on PATH; skipped without one). Each task
sleeps --sleep-ms (0: the limiter's bookkeeping alone; 20: a limit of 50 caps the drain
at 50 / 0.02 s = 2,500 tasks/s). Prints tasks/s and the cost against no limit.

    .venv/bin/python benchmarks/limit_drain.py [--tasks 5000] [--workers 4] [--concurrency 32]
        [--limit 50] [--sleep-ms 0] [--only sqlite|postgresql] [--tigerbeetle-bin PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jobq
from benchmarks.harness import (
    DEFAULT_POSTGRES_URL,
    ROOT,
    drop_schema,
    in_schema,
    jobq_worker_cmd,
    sqlite_url,
    worker_env,
)
from tests import tigerbeetle_server

QUEUE = "limited"


def drain(url: str, args: argparse.Namespace, limiter: str | None, address: str | None) -> float:
    """Seconds for the workers to drain --tasks tasks with ``limiter`` (None: no limit)."""
    store = jobq.Store(url)
    store.migrate()
    store.enqueue_many("bench.sleep", [{"ms": args.sleep_ms}] * args.tasks, queue=QUEUE)
    if limiter is not None:
        store.set_limit(QUEUE, concurrency=args.limit)
    command = jobq_worker_cmd(
        "--queues", QUEUE, "--burst", "--concurrency", str(args.concurrency),
        "--poll-interval", "0.05", "--log-level", "warning",
    )  # fmt: skip
    if limiter == "tigerbeetle":
        command += ["--limiter", "tigerbeetle", "--tigerbeetle-addresses", str(address)]
    env = worker_env(url)
    started = time.perf_counter()
    workers = [subprocess.Popen(command, env=env, cwd=ROOT) for _ in range(args.workers)]
    for worker in workers:
        if worker.wait(timeout=600) != 0:
            raise SystemExit("a worker failed")
    elapsed = time.perf_counter() - started
    done = len(store.list_tasks(status="done", limit=args.tasks + 1))
    store.dispose()
    if done != args.tasks:
        raise SystemExit(f"only {done} of {args.tasks} tasks are done")
    return elapsed


def run_database(name: str, url_for: object, args: argparse.Namespace) -> dict[str, float]:
    results: dict[str, float] = {}
    binary = args.tigerbeetle_bin or tigerbeetle_server.binary()
    for limiter in (None, "sql", "tigerbeetle"):
        if limiter == "tigerbeetle" and binary is None:
            print(f"  {name}: no tigerbeetle binary; skipping that limiter")
            continue
        with tempfile.TemporaryDirectory() as directory:
            url, cleanup = url_for(directory)  # type: ignore[operator]
            try:
                if limiter == "tigerbeetle":
                    with tigerbeetle_server.running(binary, Path(directory)) as server:
                        results[limiter] = drain(url, args, limiter, server.address)
                else:
                    results[limiter or "none"] = drain(url, args, limiter, None)
            finally:
                cleanup()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--sleep-ms", type=float, default=0.0)
    parser.add_argument("--only", choices=["sqlite", "postgresql"])
    parser.add_argument("--tigerbeetle-bin", default=None)
    args = parser.parse_args()
    if args.tigerbeetle_bin and not shutil.which(args.tigerbeetle_bin):
        raise SystemExit(f"no tigerbeetle binary at {args.tigerbeetle_bin}")

    def sqlite(directory: str) -> tuple[str, object]:
        return sqlite_url(str(Path(directory) / "drain.db")), lambda: None

    def postgres(directory: str) -> tuple[str, object]:
        schema = f"jobq_drain_{os.getpid()}_{int(time.time() * 1000) % 100000}"
        return in_schema(args.postgres_url, schema), lambda: drop_schema(args.postgres_url, schema)

    print(
        f"{args.tasks} tasks of {args.sleep_ms:g} ms on one queue, {args.workers} workers x "
        f"{args.concurrency} slots, limit {args.limit}"
    )
    for name, url_for in (("SQLite", sqlite), ("PostgreSQL", postgres)):
        if args.only and args.only != name.lower():
            continue
        results = run_database(name, url_for, args)
        base = results.get("none")
        for limiter, seconds in results.items():
            rate = args.tasks / seconds
            cost = "" if base is None or limiter == "none" else f", {seconds / base:.2f}x the time"
            print(f"  {name:<10} limiter {limiter:<11} {seconds:6.2f} s  {rate:8.0f} tasks/s{cost}")


if __name__ == "__main__":
    main()
