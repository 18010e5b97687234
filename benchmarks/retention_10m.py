#!/usr/bin/env python
"""Capture and `jobq status` with 10M finished rows, before and after retention.

On a PostgreSQL server of its own (benchmarks/_servers.py: autovacuum on, as in
production), one database migrated to head (so with migration 0013's table settings),
filled by dashboard_pages.py's builder: ``--finished`` finished rows (90% done, 5% failed
for good, 5% cancelled) whose finished_at spread evenly over the last ``--span-days``
(70: nine in ten are older than 7 days) and ``--waiting`` queued ones over ten queues,
then VACUUM ANALYZE, a few workers, two schedules and a lock. Then:

1. before: ``--samples`` timed ``Store.capture(--limit)`` (each batch ended done,
   untimed), ``--status-repeat`` runs of `jobq status` as a subprocess (wall time, spawn
   to exit) and in-process ``Store.counts()``, its one scan of the table;
2. retention: ``Store.prune(--retain-days)`` timed, each batch's transaction timed from
   SQLAlchemy's begin to its commit (events on a Store of its own, so that no cursor
   listener changes how the other Store runs), and pg_stat_activity sampled every 10 ms
   for the pruning sessions' open transactions; meanwhile a worker-like thread captures
   ``--limit`` tasks every 20 ms (timed) and ends them, as production would;
3. after the prune (autovacuum may be at work): the same measurements;
4. VACUUM (ANALYZE) jobq_tasks, timed; the same measurements again.

Table and index sizes, dead rows, autovacuum runs and the heap's free space (the
pg_freespacemap extension, created in the benchmark's database) at each step.

    .venv/bin/python benchmarks/retention_10m.py       # 10M rows: ~15 min
    .venv/bin/python benchmarks/retention_10m.py --finished 1000000

It never asserts timings. The server and its directory are removed at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import event

import jobq
from benchmarks._machine import machine_load
from benchmarks._servers import private_postgres
from benchmarks._table_stats import TableStats, mb, read_table
from benchmarks.dashboard_pages import fill
from benchmarks.harness import ROOT, connect_postgres, git_state, log, percentile
from jobq.db.tasks import Completion, Status

DAY = 86400
WORKER = "bench-retention:1"
DATABASE = "jobq_retention"
#: How often the sampler reads pg_stat_activity, and the worker-like thread captures.
SAMPLE_EVERY = 0.01
CAPTURE_EVERY = 0.02


@dataclass
class Point:
    """The measurements at one step: capture, `jobq status`, the table."""

    step: str
    captures: list[float]
    status: list[float]
    counts: list[float]
    stats: TableStats
    free: int | None


@dataclass
class Pruning:
    """What the prune did and how long its transactions were open."""

    deleted: int = 0
    seconds: float = 0.0
    transactions: list[float] = field(default_factory=list)  # begin to commit, seconds
    longest_seen: float = 0.0  # the oldest open transaction pg_stat_activity showed
    captures: list[float] = field(default_factory=list)  # the worker-like thread's


def capture_times(store: jobq.Store, limit: int, samples: int) -> list[float]:
    """Seconds each of ``samples`` captures of ``limit`` took; each batch is ended done."""
    times = []
    for _ in range(samples):
        begun = time.perf_counter()
        captured = store.capture(limit, worker_id=WORKER)
        times.append(time.perf_counter() - begun)
        store.set_statuses([Completion(t.id, t.attempt, Status.DONE) for t in captured])
    return times


def status_times(url: str, repeat: int) -> list[float]:
    """Wall seconds of ``repeat`` `jobq status` runs, each a process of its own."""
    env = dict(os.environ, JOBQ_DATABASE_URL=url)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    times = []
    for _ in range(repeat):
        begun = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "jobq.cli", "status"], cwd=ROOT, env=env, check=True,
            stdout=subprocess.DEVNULL, timeout=600,
        )  # fmt: skip
        times.append(time.perf_counter() - begun)
    return times


def free_space(url: str) -> int | None:
    """Bytes the free space map says jobq_tasks's heap pages have free (None: unknown)."""
    try:
        with connect_postgres(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_freespacemap")
            row = conn.execute("SELECT sum(avail) FROM pg_freespace('jobq_tasks')").fetchone()
    except Exception as error:  # a server without the contrib modules: say so, go on
        log(f"free space unknown: {error}")
        return None
    return int(row[0] or 0) if row else None


def measure(step: str, store: jobq.Store, url: str, args: argparse.Namespace) -> Point:
    """Capture, `jobq status` and Store.counts() timed now, and the table's statistics."""
    log(f"{step}: measuring; {machine_load()}")
    store.capture(1, worker_id=WORKER)  # warm: the pool, prepared statements
    captures = capture_times(store, args.limit, args.samples)
    status = status_times(url, args.status_repeat)
    counts = []
    for _ in range(args.status_repeat):
        begun = time.perf_counter()
        store.counts()
        counts.append(time.perf_counter() - begun)
    point = Point(step, captures, status, counts, read_table(url), free_space(url))
    log(
        f"  capture median {statistics.median(captures) * 1000:.2f} ms, status median "
        f"{statistics.median(status):.2f} s, heap {mb(point.stats.heap)}, dead "
        f"{point.stats.dead:,}, autovacuums {point.stats.autovacuums}"
    )
    return point


def watch_transactions(url: str, pids: set[int], stop: threading.Event, out: Pruning) -> None:
    """Until ``stop``: the age of the oldest open transaction of the sessions ``pids``."""
    with connect_postgres(url, autocommit=True) as conn:
        while not stop.wait(SAMPLE_EVERY):
            row = conn.execute(
                "SELECT extract(epoch FROM max(clock_timestamp() - xact_start))"
                " FROM pg_stat_activity WHERE pid = ANY(%s) AND xact_start IS NOT NULL",
                (list(pids),),
            ).fetchone()
            if row and row[0] is not None:
                out.longest_seen = max(out.longest_seen, float(row[0]))


def keep_capturing(store: jobq.Store, limit: int, stop: threading.Event, out: Pruning) -> None:
    """Until ``stop``: a capture of ``limit`` every CAPTURE_EVERY seconds, timed, ended done."""
    while not stop.wait(CAPTURE_EVERY):
        out.captures += capture_times(store, limit, 1)


def prune(url: str, store: jobq.Store, args: argparse.Namespace) -> Pruning:
    """Store.prune(--retain-days) on a Store of its own, its transactions timed, while a
    thread captures through ``store``."""
    out = Pruning()
    pruner = jobq.Store(url)
    pids: set[int] = set()
    opened: list[float] = []
    event.listen(pruner.engine, "connect", lambda dbapi, _: pids.add(dbapi.info.backend_pid))
    event.listen(pruner.engine, "begin", lambda _: opened.append(time.perf_counter()))
    event.listen(
        pruner.engine, "commit", lambda _: out.transactions.append(time.perf_counter() - opened[-1])
    )
    pruner.engine.connect().close()  # the first session, so that the watcher knows its pid
    stop = threading.Event()
    threads = [
        threading.Thread(target=watch_transactions, args=(url, pids, stop, out)),
        threading.Thread(target=keep_capturing, args=(store, args.limit, stop, out)),
    ]
    for thread in threads:
        thread.start()
    try:
        begun = time.perf_counter()
        out.deleted = pruner.prune(args.retain_days * DAY, batch_size=args.batch_size)
        out.seconds = time.perf_counter() - begun
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        pruner.dispose()
    return out


def vacuum(url: str) -> float:
    """VACUUM (ANALYZE) jobq_tasks; the seconds it took."""
    with connect_postgres(url, autocommit=True) as conn:
        begun = time.perf_counter()
        conn.execute("VACUUM (ANALYZE) jobq_tasks")
        return time.perf_counter() - begun


def report(
    points: list[Point], pruning: Pruning, vacuumed: float, args: argparse.Namespace
) -> None:
    """Markdown tables on stdout."""
    print(f"\njobq {git_state()}; {machine_load()}")
    print(f"{args.finished:,} finished rows over {args.span_days:g} days, {args.waiting:,} waiting")
    print("\n| | " + " | ".join(p.step for p in points) + " |")
    print("|---|" + "---:|" * len(points))

    def row(label: str, cells: list[str]) -> None:
        print(f"| {label} | " + " | ".join(cells) + " |")

    medians = [statistics.median(p.captures) * 1000 for p in points]
    row(f"capture({args.limit}) median", [f"{m:.2f} ms" for m in medians])
    p99s = [percentile(p.captures, 99) * 1000 for p in points]
    row(f"capture({args.limit}) p99", [f"{m:.2f} ms" for m in p99s])
    row("`jobq status` median", [f"{statistics.median(p.status):.2f} s" for p in points])
    row("`jobq status` min", [f"{min(p.status):.2f} s" for p in points])
    row("`Store.counts()` median", [f"{statistics.median(p.counts):.2f} s" for p in points])
    row("live rows", [f"{p.stats.live:,}" for p in points])
    row("dead rows", [f"{p.stats.dead:,}" for p in points])
    row("heap", [mb(p.stats.heap) for p in points])
    row("heap free (FSM)", ["?" if p.free is None else mb(p.free) for p in points])
    row("indexes", [mb(p.stats.indexes) for p in points])
    row("autovacuums so far", [str(p.stats.autovacuums) for p in points])
    for index in sorted(points[0].stats.index_sizes):
        row(f"`{index}`", [mb(p.stats.index_sizes.get(index, 0)) for p in points])
    tx = pruning.transactions or [0.0]
    print(f"\nprune({args.retain_days:g} days, batch_size={args.batch_size:,}):")
    print(f"- deleted {pruning.deleted:,} rows in {pruning.seconds:.1f} s")
    print(f"- {pruning.deleted / max(pruning.seconds, 1e-9):,.0f} rows/s")
    print(
        f"- {len(pruning.transactions):,} transactions, begin to commit: median "
        f"{statistics.median(tx) * 1000:.1f} ms, p99 {percentile(tx, 99) * 1000:.1f} ms, "
        f"max {max(tx) * 1000:.1f} ms"
    )
    if len(tx) >= 200:
        first, last = statistics.median(tx[:100]), statistics.median(tx[-100:])
        print(f"- median of the first 100: {first * 1000:.1f} ms; last 100: {last * 1000:.1f} ms")
    print(
        f"- oldest open transaction pg_stat_activity showed: {pruning.longest_seen * 1000:.0f} ms"
    )
    if pruning.captures:
        c = pruning.captures
        print(
            f"- {len(c):,} captures meanwhile: median {statistics.median(c) * 1000:.2f} ms, "
            f"p99 {percentile(c, 99) * 1000:.2f} ms, max {max(c) * 1000:.2f} ms"
        )
    print(f"\nVACUUM (ANALYZE) jobq_tasks: {vacuumed:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finished", type=int, default=10_000_000)
    parser.add_argument("--waiting", type=int, default=100_000)
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--span-days", type=float, default=70.0)
    parser.add_argument("--retain-days", type=float, default=7.0)
    parser.add_argument("--batch-size", type=int, default=1_000, help="Store.prune's")
    parser.add_argument("--limit", type=int, default=10, help="tasks a timed capture takes")
    parser.add_argument("--samples", type=int, default=500, help="captures timed a step")
    parser.add_argument("--status-repeat", type=int, default=5)
    parser.add_argument("--shared-buffers", default="512MB")
    args = parser.parse_args()
    with private_postgres(args.shared_buffers) as server:
        log(f"PostgreSQL {server.version()} in {server.directory}")
        url = server.create_database(DATABASE)
        store = jobq.Store(url)
        try:
            store.migrate()
            log(f"loading {args.finished:,} finished and {args.waiting:,} waiting rows")
            loaded = fill(store, args.finished, args.waiting, args.queues, args.span_days * DAY)
            log(f"loaded in {loaded:.0f} s")
            points = [measure("before", store, url, args)]
            log(f"pruning; {machine_load()}")
            pruning = prune(url, store, args)
            log(f"pruned {pruning.deleted:,} rows in {pruning.seconds:.0f} s")
            points.append(measure("after prune", store, url, args))
            log("VACUUM (ANALYZE)")
            vacuumed = vacuum(url)
            points.append(measure("after VACUUM", store, url, args))
        finally:
            store.dispose()
            server.drop_database(DATABASE)
    report(points, pruning, vacuumed, args)


if __name__ == "__main__":
    main()
