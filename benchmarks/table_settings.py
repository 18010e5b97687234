#!/usr/bin/env python
"""Capture with and without migration 0013's table settings, after 1M task runs each.

On a PostgreSQL server of its own (benchmarks/_servers.py: autovacuum on, as in
production; the shared server runs with it off), one database per variant, one after
the other:

- ``with``: migrated to head, so jobq's tables carry
  ``jobq.dialects.postgresql_storage.TABLE_SETTINGS`` (fillfactor, autovacuum thresholds);
- ``without``: migrated to head, then ``ALTER TABLE t RESET (those parameters)`` on each
  of those tables (jobq's own reset_table_settings, what the downgrade runs): PostgreSQL's
  defaults.

In each, after ``--history`` finished rows loaded with exporter_counts.py's builder and
VACUUM ANALYZE (0 by default: the table starts empty; a table kept for days holds
millions, and autovacuum's 20% of it then takes far longer to reach), it pushes ``--runs``
task runs through the Store as a worker does: a standing
backlog of ``--backlog`` queued tasks, topped up ``--batch`` at a time with
``Store.enqueue_many``, taken ``--capture-limit`` at a time with
``Store.complete_and_capture`` (the previous batch's ends recorded and the next batch
captured in one statement, as jobq's worker loop does), at most ``--rate`` runs a second:
a steady stream over several minutes, so that autovacuum (which looks at each database
once a minute) gets its chances, as it would in production. Finished rows stay (no
pruning), so the table grows and churns: every run inserts one row version and updates
it twice. Every 100,000 runs it prints the table's size, dead rows and autovacuum count,
and the median and p99 of the complete_and_capture calls since the last reading.

Then, on that table, at once (autovacuum may be at work, or not):

1. capture latency: ``--samples`` timed ``Store.capture(--latency-limit)`` over the
   standing backlog (each batch ended done, untimed; the backlog topped up, untimed);
2. a drain: the queue topped up to ``--drain`` tasks and emptied with
   complete_and_capture(100), timed;
3. the table's statistics (pg_stat_user_tables, index sizes; autovacuum runs counted by
   the statistics and by the server's log).

    .venv/bin/python benchmarks/table_settings.py      # 1M runs a variant at 2,000/s: ~20 min
    .venv/bin/python benchmarks/table_settings.py --history 5000000  # + ~1 min a variant
    .venv/bin/python benchmarks/table_settings.py --runs 100000 --rate 0 --variants without

It never asserts timings. The server and its directory are removed at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jobq
from benchmarks._machine import machine_load
from benchmarks._servers import BenchPostgres, private_postgres
from benchmarks._table_stats import TableStats, mb, read_table
from benchmarks.exporter_counts import fill
from benchmarks.harness import git_state, log, percentile
from jobq.db.tasks import Completion, Status

TASK = "bench.noop"
WORKER = "bench-settings:1"
#: Runs between two progress readings of the table's statistics.
REPORT_EVERY = 100_000


@dataclass
class Progress:
    """The table after ``runs`` runs, ``seconds`` into the churn, and the seconds each
    complete_and_capture call took since the reading before."""

    runs: int
    seconds: float
    stats: TableStats
    steps: list[float]


@dataclass
class Variant:
    """What one database measured: its churn, capture latencies, drain and statistics."""

    name: str
    runs: int = 0
    churn_seconds: float = 0.0
    captures: list[float] = field(default_factory=list)
    drained: int = 0
    drain_seconds: float = 0.0
    stats: TableStats | None = None
    autovacuum_log: tuple[int, int] = (0, 0)  # (vacuums, analyzes) the server logged
    progress: list[Progress] = field(default_factory=list)


def table_settings() -> dict[str, dict[str, str]]:
    """jobq's storage parameters per table, as migration 0013 sets them."""
    from jobq.dialects.postgresql_storage import TABLE_SETTINGS

    return TABLE_SETTINGS


def reset_settings(store: jobq.Store) -> None:
    """``ALTER TABLE t RESET (its parameters)`` for each table of TABLE_SETTINGS, by jobq's
    own function (what the migration's downgrade runs): PostgreSQL's defaults again."""
    from jobq.dialects.postgresql_storage import reset_table_settings

    with store.engine.begin() as conn:
        reset_table_settings(conn)


def ended(tasks: list[jobq.Task]) -> list[Completion]:
    return [Completion(t.id, t.attempt, Status.DONE) for t in tasks]


def enqueue(store: jobq.Store, n: int, first: int) -> None:
    store.enqueue_many(TASK, [{"n": i} for i in range(first, first + n)])


def take(
    store: jobq.Store, n: int, limit: int, ends: list[Completion], steps: list[float]
) -> list[Completion]:
    """Capture ``n`` tasks ``limit`` at a time, each capture recording the ends before it
    (as the worker loop does), appending each call's seconds to ``steps``; the ends of the
    last batch, not yet recorded."""
    taken = 0
    while taken < n:
        begun = time.perf_counter()
        _, captured = store.complete_and_capture(ends, min(limit, n - taken), worker_id=WORKER)
        steps.append(time.perf_counter() - begun)
        if not captured:
            raise RuntimeError(f"the queue ran dry after {taken} of {n} captures")
        taken += len(captured)
        ends = ended(captured)
    return ends


def churn(store: jobq.Store, url: str, variant: Variant, args: argparse.Namespace) -> None:
    """Push up to ``args.runs`` runs through ``store`` over a standing backlog, at most
    ``args.rate`` a second, stopping early when ``args.max_minutes`` are up; the backlog
    is left queued."""
    enqueue(store, args.backlog, 0)
    sent, ends, steps = args.backlog, [], []
    started = time.perf_counter()
    deadline = started + args.max_minutes * 60
    while variant.runs < args.runs and time.perf_counter() < deadline:
        step = min(args.batch, args.runs - variant.runs)
        enqueue(store, step, sent)
        sent += step
        ends = take(store, step, args.capture_limit, ends, steps)
        variant.runs += step
        if variant.runs % REPORT_EVERY < step:
            elapsed = time.perf_counter() - started
            stats = read_table(url)
            variant.progress.append(Progress(variant.runs, elapsed, stats, steps))
            steps = []
            log(
                f"  {variant.name}: {variant.runs:,} runs in {elapsed:.0f} s: heap "
                f"{mb(stats.heap)}, indexes {mb(stats.indexes)}, dead {stats.dead:,}, "
                f"autovacuums {stats.autovacuums}; {machine_load()}"
            )
        if args.rate:  # a steady stream, so that autovacuum's naptime is not all it sees
            ahead = variant.runs / args.rate - (time.perf_counter() - started)
            time.sleep(max(ahead, 0.0))
    store.set_statuses(ends)
    variant.churn_seconds = time.perf_counter() - started


def capture_latency(store: jobq.Store, args: argparse.Namespace) -> list[float]:
    """Seconds each of ``args.samples`` captures took over the standing backlog."""
    for _ in range(10):  # warm-up: prepared statements, the pool
        store.set_statuses(ended(store.capture(args.latency_limit, worker_id=WORKER)))
    enqueue(store, 10 * args.latency_limit, 0)
    times, taken = [], 0
    for _ in range(args.samples):
        begun = time.perf_counter()
        captured = store.capture(args.latency_limit, worker_id=WORKER)
        times.append(time.perf_counter() - begun)
        store.set_statuses(ended(captured))
        taken += len(captured)
        if taken >= args.batch:  # keep the backlog where it stood
            enqueue(store, taken, 0)
            taken = 0
    return times


def drain(store: jobq.Store, args: argparse.Namespace) -> tuple[int, float]:
    """Top the queue up to ``args.drain`` tasks and empty it; (tasks, seconds)."""
    queued = sum(n for (_, status), n in store.counts().items() if status is Status.QUEUED)
    if queued < args.drain:
        enqueue(store, args.drain - queued, 0)
    drained, ends = 0, []
    begun = time.perf_counter()
    while True:
        _, captured = store.complete_and_capture(ends, 100, worker_id=WORKER)
        if not captured:
            break
        drained += len(captured)
        ends = ended(captured)
    store.set_statuses(ends)
    return drained, time.perf_counter() - begun


def run_variant(server: BenchPostgres, name: str, args: argparse.Namespace) -> Variant:
    """Create the variant's database, churn it, measure it, drop it."""
    database = f"jobq_settings_{name}"
    url = server.create_database(database)
    variant = Variant(name)
    try:
        store = jobq.Store(url)
        try:
            store.migrate()
            if name == "without":
                reset_settings(store)
            log(f"{name}: jobq_tasks reloptions {read_table(url).reloptions}")
            if args.history:  # a table that has been in use for a while, vacuumed
                log(f"{name}: loading {args.history:,} finished rows first")
                fill(store, args.history, 0, 1)
            variant.progress.append(Progress(0, 0.0, read_table(url), []))
            churn(store, url, variant, args)
            log(f"{name}: {variant.runs:,} runs in {variant.churn_seconds:.0f} s; measuring")
            variant.captures = capture_latency(store, args)
            variant.drained, variant.drain_seconds = drain(store, args)
        finally:
            store.dispose()  # its backends exit, flushing their statistics
        time.sleep(1.0)
        variant.stats = read_table(url)
        logged = [kind for db, kind in server.autovacuum_lines() if db == database]
        variant.autovacuum_log = (logged.count("vacuum"), logged.count("analyze"))
    finally:
        server.drop_database(database)
    return variant


def report(variants: list[Variant], args: argparse.Namespace, version: str) -> None:
    """Markdown tables on stdout: the measurements side by side, then each progress."""
    print(f"\nPostgreSQL {version}; jobq {git_state()}; {machine_load()}")
    print(
        f"{args.history:,} finished rows first; churn at most {args.rate:g} runs/s (0: no cap), "
        f"backlog {args.backlog:,}; "
        f"capture({args.latency_limit}) x {args.samples}; drain of {args.drain:,}\n"
    )
    print("| | " + " | ".join(v.name for v in variants) + " |")
    print("|---|" + "---:|" * len(variants))

    def row(label: str, cell: Callable[[Variant], str]) -> None:
        print(f"| {label} | " + " | ".join(cell(v) for v in variants) + " |")

    def stat(v: Variant) -> TableStats:
        assert v.stats is not None
        return v.stats

    row("runs", lambda v: f"{v.runs:,} in {v.churn_seconds:.0f} s")
    row("runs/s", lambda v: f"{v.runs / v.churn_seconds:,.0f}")
    row("capture median", lambda v: f"{statistics.median(v.captures) * 1000:.2f} ms")
    row("capture p99", lambda v: f"{percentile(v.captures, 99) * 1000:.2f} ms")
    row("capture max", lambda v: f"{max(v.captures) * 1000:.2f} ms")
    row("drain", lambda v: f"{v.drained:,} in {v.drain_seconds:.2f} s")
    row("drain tasks/s", lambda v: f"{v.drained / v.drain_seconds:,.0f}")
    row("heap", lambda v: mb(stat(v).heap))
    row("indexes", lambda v: mb(stat(v).indexes))
    row("live rows", lambda v: f"{stat(v).live:,}")
    row("dead rows", lambda v: f"{stat(v).dead:,}")
    row("HOT updates", lambda v: f"{stat(v).hot_share:.1%}")
    row("autovacuums (stats)", lambda v: str(stat(v).autovacuums))
    row("autovacuums / analyzes (log)", lambda v: "{} / {}".format(*v.autovacuum_log))
    names = sorted({n for v in variants for n in stat(v).index_sizes})
    for index in names:
        row(f"`{index}`", lambda v, i=index: mb(stat(v).index_sizes.get(i, 0)))
    for v in variants:
        print(f"\n{v.name} (reloptions {stat(v).reloptions}): every {REPORT_EVERY:,} runs")
        print("| runs | s | heap | indexes | dead rows | autovacuums | step median | p99 |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for p in v.progress:
            s = p.stats
            steps = "| - | - |"
            if p.steps:
                median, p99 = statistics.median(p.steps), percentile(p.steps, 99)
                steps = f"| {median * 1000:.2f} ms | {p99 * 1000:.2f} ms |"
            print(
                f"| {p.runs:,} | {p.seconds:.0f} | {mb(s.heap)} | {mb(s.indexes)} | {s.dead:,} "
                f"| {s.autovacuums} {steps}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="with,without", help="in this order")
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument(
        "--history", type=int, default=0, help="finished rows loaded (and vacuumed) first"
    )
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=1_000, help="tasks per enqueue_many")
    parser.add_argument("--capture-limit", type=int, default=100, help="during the churn")
    parser.add_argument("--latency-limit", type=int, default=10, help="captures timed")
    parser.add_argument("--samples", type=int, default=2_000)
    parser.add_argument("--drain", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=2_000, help="runs/s at most; 0: no cap")
    parser.add_argument("--max-minutes", type=float, default=10.0, help="churn, per variant")
    parser.add_argument("--shared-buffers", default="512MB")
    args = parser.parse_args()
    names = [n.strip() for n in args.variants.split(",")]
    if not set(names) <= {"with", "without"}:
        parser.error("--variants: with, without")
    log(f"settings of migration 0013: {table_settings()}")
    with private_postgres(args.shared_buffers) as server:
        version = server.version()
        variants = [run_variant(server, name, args) for name in names]
    report(variants, args, version)


if __name__ == "__main__":
    main()
