#!/usr/bin/env python
"""One worker process draining no-op tasks: jobq versus PGQueuer (asyncpg), bare SQL and more.

On the same PostgreSQL (and SQLite), in one run, it measures:

1. Drain throughput of ONE worker process on N no-op tasks enqueued beforehand in bulk
   (untimed), once per ``--tasks`` size (default 20,000 and 50,000) and per
   ``--concurrency`` value (default 16 and 100), each process timed from spawn to exit,
   with its CPU time (user + system, spawn to exit, start-up included: rusage of the
   reaped child) and, on PostgreSQL, its backends' CPU time (read from /proc while it
   runs, by their application_name: _backend_cpu.py), both per 1,000 jobs:
   - jobq (``python -m jobq.cli worker --app benchmarks.noop_app:app --burst
     --concurrency C``) with its default INFO logging (one line per task start and end,
     stderr to a file): on PostgreSQL with the sync no-op ``bench.noop`` and the async
     no-op ``bench.noop_async``, and on a SQLite file with the sync one; on MariaDB /
     MySQL too unless ``--no-mysql``;
   - jobq on PostgreSQL with the sync no-op at ``--log-level warning`` (secondary: what
     the task logs cost);
   - PGQueuer (``PgQueuer.run(mode=drain, batch_size=C)``) with its recommended driver,
     asyncpg, and again with its psycopg driver; Procrastinate
     (``run_worker_async(concurrency=C, wait=False)``) only with ``--with-procrastinate``
     (it is slow); each run with benchmarks/.venv-peers/bin/python (see peers.sh and
     peer_worker.py).
2. Bare-SQL capture-and-complete loops at batch 100 (``--batch``), on PostgreSQL
   (psycopg) and SQLite (sqlite3, WAL), replaying the statements jobq's Store sends, in a
   child process timed from spawn to exit like the workers (see _bare_loop.py).
3. Bulk enqueue of N tasks (the largest ``--tasks`` size): jobq's ``Store.enqueue_many``
   (``--enqueue-per-call`` per call, default 1,000, and one call of all N), ``jobq enqueue
   --file`` of an N-line JSON-lines file (spawn to exit), on PostgreSQL and SQLite, against
   PGQueuer's bulk ``Queries.enqueue`` (1,000 per call) on asyncpg and psycopg (see
   _enqueue_bench.py).
4. Enqueue->start latency through LISTEN/NOTIFY: an idle jobq worker (concurrency 10,
   poll interval 10 s, logs on) while tasks are enqueued one at a time ~20 ms apart;
   latency is started_at - created_at of each row (the database's clock). The same for
   PGQueuer on asyncpg: its log's 'picked' row minus its 'queued' row.

Targets (issue 19), judged with task logs on: jobq's better PostgreSQL row (sync or async)
drains at least 2x PGQueuer-asyncpg's jobs/s at every size and concurrency run (by default
20,000 and 50,000 tasks at 16 and 100; a table sets the two side by side: jobs/s, worker
and server CPU per 1,000 jobs, and jobq's ratios to PGQueuer, issue 42); jobq on SQLite
drains at least 40,000 jobs/s at concurrency 100, largest size (else the largest run);
each of jobq's bulk enqueues on PostgreSQL (enqueue_many and --file) is at least 2x
PGQueuer-asyncpg's bulk enqueue; p50 latency at most 5 ms on PostgreSQL. Every queue
works in a PostgreSQL schema of its own (created here, dropped at the end); tables named
jobq_* in the public schema are never touched. Every subprocess has a timeout. The result
is a Markdown report on stdout; progress goes to stderr. Exits 1 if a target is missed.

    bash benchmarks/peers.sh                  # once: the peers' own virtualenv
    .venv/bin/python benchmarks/bench_worker.py
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import sys
import tempfile
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sqlalchemy as sa

from benchmarks._bare_loop import bare_drain
from benchmarks._drains import (
    Drain,
    Latency,
    jobq_drain,
    jobq_latency,
    peer_drain,
    pgqueuer_latency,
)
from benchmarks._enqueue_bench import (
    Enqueue,
    file_enqueue,
    pgqueuer_enqueue,
    store_enqueue,
)
from benchmarks._worker_report import (
    best_jobq,
    pgqueuer_rows,
    print_drains,
    print_enqueues,
    print_latencies,
    print_side_by_side,
)
from benchmarks.harness import (
    ASYNC_TASK,
    DEFAULT_MYSQL_URL,
    DEFAULT_POSTGRES_URL,
    PEERS_PYTHON,
    SYNC_TASK,
    csv_ints,
    drop_mysql_database,
    drop_schema,
    git_state,
    in_schema,
    log,
    mysql_database,
    mysql_server,
    psycopg_conninfo,
    sqlite_url,
)

SYNC_LOGS = "jobq (sync no-op, logs on)"
ASYNC_LOGS = "jobq (async no-op, logs on)"
SYNC_QUIET = "jobq (sync no-op, --log-level warning)"
PGQ_DRIVERS = ("asyncpg", "psycopg")  # the first is PGQueuer's recommended one, judged
SCHEMAS = {
    "jobq": "bench_worker_jobq",
    "bare": "bench_worker_bare",
    "pgqueuer": "bench_worker_pgqueuer",
    "procrastinate": "bench_worker_procrastinate",
}
MYSQL_DATABASE = "bench_worker_jobq"
# Issue 19's targets.
TARGET_PEER = 2.0  # jobq's drain over PGQueuer-asyncpg's, at every concurrency run
TARGET_SQLITE = 40_000  # jobs/s on SQLite ...
SQLITE_JUDGED = 100  # ... at this concurrency (else the largest run)
TARGET_ENQUEUE = 2.0  # jobq's bulk enqueues over PGQueuer-asyncpg's
TARGET_P50 = 0.005  # seconds, enqueue->start on PostgreSQL


def concurrency_list(text: str) -> list[int]:
    """The positive integers of a comma-separated list, in order, without repeats."""
    values: list[int] = []
    for part in text.split(","):
        try:
            value = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {part!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"concurrency must be at least 1: {value}")
        if value not in values:
            values.append(value)
    return values


# --- runs --------------------------------------------------------------------------------


def run_jobq_drains(url: str, args: argparse.Namespace) -> list[Drain]:
    """jobq's drains at each concurrency: PostgreSQL sync and async (logs on), sync at
    --log-level warning; SQLite sync (logs on); MariaDB / MySQL sync and async (logs on)."""
    jurl = in_schema(url, SCHEMAS["jobq"])
    timeout = args.timeout
    murl = None if args.no_mysql else mysql_database(args.mysql_url, MYSQL_DATABASE)
    mysql_name = mysql_server(murl) if murl else ""
    drains: list[Drain] = []

    def drain(
        url: str, database: str, label: str, task: str, run: tuple[int, int], logs: bool = True
    ) -> Drain:
        conc, n = run
        return jobq_drain(url, database, label, task, n, conc, timeout, task_logs=logs)

    try:
        for conc in [(c, n) for c in args.concurrency for n in args.sizes]:
            sync = drain(jurl, "PostgreSQL", SYNC_LOGS, SYNC_TASK, conc)
            drains += [sync, drain(jurl, "PostgreSQL", ASYNC_LOGS, ASYNC_TASK, conc)]
            quiet = drain(jurl, "PostgreSQL", SYNC_QUIET, SYNC_TASK, conc, logs=False)
            change = 100 * (quiet.rate / sync.rate - 1)
            quiet.note += f"; {change:+.0f}% jobs/s against {SYNC_LOGS}"
            drains.append(quiet)
            with tempfile.TemporaryDirectory() as tmp:
                lite_url = sqlite_url(os.path.join(tmp, "bench.db"))
                drains.append(drain(lite_url, "SQLite", SYNC_LOGS, SYNC_TASK, conc))
            if murl:
                drains += [
                    drain(murl, mysql_name, SYNC_LOGS, SYNC_TASK, conc),
                    drain(murl, mysql_name, ASYNC_LOGS, ASYNC_TASK, conc),
                ]
    finally:
        if murl:
            drop_mysql_database(args.mysql_url, MYSQL_DATABASE)
    return drains


def run_bare(url: str, args: argparse.Namespace) -> list[Drain]:
    """The bare capture-and-complete loops on PostgreSQL and SQLite."""
    n, batch, timeout = args.tasks, args.batch, args.timeout
    burl = in_schema(url, SCHEMAS["bare"])
    bares = [bare_drain(burl, "PostgreSQL", "psycopg", n, batch, timeout)]
    with tempfile.TemporaryDirectory() as tmp:
        lite_url = sqlite_url(os.path.join(tmp, "bare.db"))
        bares.append(bare_drain(lite_url, "SQLite", "sqlite3", n, batch, timeout))
    return bares


def run_jobq_enqueues(url: str, args: argparse.Namespace) -> list[Enqueue]:
    """jobq's bulk enqueues on PostgreSQL, then on SQLite."""
    n, per_call, repeat = args.tasks, args.enqueue_per_call, args.enqueue_repeat
    out: list[Enqueue] = []
    with tempfile.TemporaryDirectory() as tmp:
        targets = [
            (in_schema(url, SCHEMAS["jobq"]), "PostgreSQL"),
            (sqlite_url(os.path.join(tmp, "enqueue.db")), "SQLite"),
        ]
        for db_url, database in targets:
            out.append(store_enqueue(db_url, database, n, per_call, repeat))
            out.append(store_enqueue(db_url, database, n, n, repeat))
            out.append(file_enqueue(db_url, database, n, repeat, args.timeout))
    return out


def fresh_dsn(url: str, queue: str) -> str:
    """A libpq URI on a schema of ``queue``'s own, dropped first: fresh tables."""
    drop_schema(url, SCHEMAS[queue])
    return psycopg_conninfo(in_schema(url, SCHEMAS[queue]))


@dataclass
class Results:
    """Everything one run measured."""

    drains: list[Drain] = field(default_factory=list)
    bares: list[Drain] = field(default_factory=list)
    enqueues: list[Enqueue] = field(default_factory=list)
    latencies: list[Latency] = field(default_factory=list)
    #: Each peer's version ("pgqueuer 1.6.0") -> the drivers it ran on.
    peers: dict[str, set[str]] = field(default_factory=dict)


def run_jobq(results: Results, url: str, args: argparse.Namespace) -> None:
    """jobq's drains, the bare loops, jobq's bulk enqueues and jobq's latency."""
    log("== jobq drains")
    results.drains += run_jobq_drains(url, args)
    log("== bare loops")
    results.bares += run_bare(url, args)
    log("== jobq bulk enqueue")
    results.enqueues += run_jobq_enqueues(url, args)
    if args.latency_samples:
        log("== jobq latency")
        jurl = in_schema(url, SCHEMAS["jobq"])
        latency = jobq_latency(jurl, args.latency_samples, args.spacing, args.timeout)
        results.latencies.append(latency)


def run_peer_drains(
    results: Results, url: str, args: argparse.Namespace, queue: str, driver: str | None
) -> None:
    """A peer's drains at each concurrency, each on fresh tables."""
    log(f"== {queue} drains" + (f" on {driver}" if driver else ""))
    for conc, n in [(c, n) for c in args.concurrency for n in args.sizes]:
        dsn = fresh_dsn(url, queue)
        drain, seen = peer_drain(queue, driver, dsn, n, conc, args.timeout)
        results.drains.append(drain)
        results.peers.setdefault(seen["queue"], set()).add(seen["driver"])


def run_pgqueuer(results: Results, url: str, args: argparse.Namespace) -> None:
    """PGQueuer's drains and bulk enqueues on each driver, and its latency on asyncpg."""
    for driver in PGQ_DRIVERS:
        run_peer_drains(results, url, args, "pgqueuer", driver)
    for driver in PGQ_DRIVERS:
        log(f"== pgqueuer bulk enqueue on {driver}")
        results.enqueues.append(
            pgqueuer_enqueue(
                driver, fresh_dsn(url, "pgqueuer"), args.tasks, args.enqueue_per_call,
                args.enqueue_repeat, args.timeout,
            )
        )  # fmt: skip
    if args.latency_samples:
        log("== pgqueuer latency on asyncpg")
        dsn = fresh_dsn(url, "pgqueuer")
        results.latencies.append(
            pgqueuer_latency("asyncpg", dsn, args.latency_samples, args.spacing, args.timeout)
        )


# --- report ------------------------------------------------------------------------------


def versions_line(url: str, peers: dict[str, set[str]]) -> str:
    """What ran: jobq's drivers and the servers, and the peers' versions."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            server = conn.exec_driver_sql("SHOW server_version").scalar()
    finally:
        engine.dispose()
    line = (
        f"jobq at {git_state()}; Python {platform.python_version()}, {os.cpu_count()} cores; "
        f"PostgreSQL {server}, SQLite {sqlite3.sqlite_version}; jobq on psycopg "
        f"{version('psycopg')}, SQLAlchemy {sa.__version__}"
    )
    if peers:
        line += "; peers: " + ", ".join(
            f"{name} on {' and '.join(sorted(drivers))}" for name, drivers in sorted(peers.items())
        )
    return line


def judge(
    drains: list[Drain],
    bares: list[Drain],
    enqueues: list[Enqueue],
    latencies: list[Latency],
    concurrencies: list[int],
    sizes: list[int],
) -> bool:
    """Print every target's verdict and a few comparisons; whether none was missed."""
    ok = True

    def target(text: str, met: bool | None, detail: str) -> None:
        nonlocal ok
        verdict = "not measured" if met is None else ("met" if met else "NOT met")
        ok = ok and met is not False
        print(f"- {text}: **{verdict}** ({detail})")

    print("\nTargets (issue 19; jobq with task logs on):\n")
    pgq = pgqueuer_rows(drains)
    for conc, n in [(c, n) for c in concurrencies for n in sizes]:
        text = (
            f"drain at least {TARGET_PEER:g}x PGQueuer-asyncpg's jobs/s at concurrency {conc}, "
            f"{n:,} tasks"
        )
        best, peer_row = best_jobq(drains, "PostgreSQL", conc, n), pgq.get((conc, n))
        if best and peer_row:
            r = best.rate / peer_row.rate
            detail = f"{r:.2f}x with {best.queue}: {best.rate:,.0f} vs {peer_row.rate:,.0f}/s"
            target(text, r >= TARGET_PEER, detail)
        else:
            target(text, None, "needs jobq and pgqueuer")
    lite_conc = SQLITE_JUDGED if SQLITE_JUDGED in concurrencies else max(concurrencies)
    lite = best_jobq(drains, "SQLite", lite_conc, max(sizes))
    text = f"SQLite drain at least {TARGET_SQLITE:,} jobs/s at concurrency {lite_conc}"
    if lite:
        target(text, lite.rate >= TARGET_SQLITE, f"{lite.rate:,.0f} jobs/s")
    else:
        target(text, None, "needs jobq")
    pgq_enqueue = next((e for e in enqueues if e.kind == "pgqueuer-asyncpg"), None)
    ours = [e for e in enqueues if e.kind.startswith("jobq") and e.database == "PostgreSQL"]
    for e in ours:
        text = f"{e.who} at least {TARGET_ENQUEUE:g}x PGQueuer-asyncpg's bulk enqueue"
        if pgq_enqueue:
            r = e.rate / pgq_enqueue.rate
            detail = f"{r:.2f}x: {e.rate:,.0f} vs {pgq_enqueue.rate:,.0f} jobs/s"
            target(text, r >= TARGET_ENQUEUE, detail)
        else:
            target(text, None, "needs pgqueuer")
    if not ours:
        target("bulk enqueue at least 2x PGQueuer-asyncpg's", None, "needs jobq")
    jl = next((lat for lat in latencies if lat.queue.startswith("jobq")), None)
    text = f"p50 enqueue->start latency at most {TARGET_P50 * 1000:g} ms on PostgreSQL"
    if jl:
        target(text, jl.pct(50) <= TARGET_P50, f"{jl.pct(50) * 1000:.2f} ms")
    else:
        target(text, None, "needs jobq")
    comparisons = []
    for bare in bares:
        best = best_jobq(drains, bare.database, bare.concurrency)
        if best:
            comparisons.append(
                f"- {best.queue} on {bare.database} at concurrency {bare.concurrency}: "
                f"{100 * best.rate / bare.rate:.0f}% of the bare loop ({bare.queue}, "
                f"batch {bare.concurrency})"
            )
    if comparisons:
        print("\nFor comparison (not targets):\n")
        print("\n".join(comparisons))
    return ok


def report(results: Results, args: argparse.Namespace) -> bool:
    """Print the Markdown report; whether no target measured was missed."""
    levels = ", ".join(str(c) for c in args.concurrency)
    sizes = " and ".join(f"{n:,}" for n in args.sizes)
    print(f"\n### bench_worker.py ({sizes} no-op tasks, concurrency {levels})\n")
    print(versions_line(args.postgres_url, results.peers) + "\n")
    if results.drains or results.bares:
        print_drains(results.drains, results.bares)
        print_side_by_side(results.drains)
    if results.enqueues:
        print_enqueues(results.enqueues, args.enqueue_repeat)
    if results.latencies:
        print_latencies(results.latencies, args.spacing)
    return judge(
        results.drains, results.bares, results.enqueues, results.latencies, args.concurrency,
        args.sizes,
    )  # fmt: skip


# --- main --------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--mysql-url", default=DEFAULT_MYSQL_URL)
    parser.add_argument("--no-mysql", action="store_true", help="skip the MariaDB / MySQL drains")
    parser.add_argument(
        "--tasks", type=csv_ints, default=[20_000, 50_000],
        help="comma-separated sizes: every drain runs once per size (default 20000,50000); "
        "the bulk enqueues, bare loops and latency use the largest",
    )  # fmt: skip
    parser.add_argument(
        "--only", choices=["jobq", "pgqueuer", "procrastinate"],
        help="run one queue only (jobq includes the bare loops)",
    )  # fmt: skip
    parser.add_argument(
        "--with-procrastinate", action="store_true",
        help="also drain with Procrastinate (slow: about 150 jobs/s)",
    )  # fmt: skip
    parser.add_argument(
        "--latency-samples", type=int, default=200, help="enqueue->start samples; 0: none"
    )
    parser.add_argument("--spacing", type=float, default=0.02, help="seconds between enqueues")
    parser.add_argument(
        "--concurrency", type=concurrency_list, default=[16, 100],
        help="comma-separated; every drain runs once per value (default 16,100); PGQueuer's "
        "batch_size is the concurrency",
    )  # fmt: skip
    parser.add_argument("--batch", type=int, default=100, help="the bare loops' capture limit")
    parser.add_argument(
        "--enqueue-per-call", type=int, default=1000,
        help="tasks per enqueue_many and per PGQueuer enqueue call (default 1000)",
    )  # fmt: skip
    parser.add_argument(
        "--enqueue-repeat", type=int, default=3,
        help="runs of each bulk enqueue; the best counts (default 3)",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=600, help="per subprocess, seconds")
    args = parser.parse_args()
    args.sizes = sorted(set(args.tasks))
    args.tasks = max(args.sizes)
    for option, value in (("--postgres-url", args.postgres_url), ("--mysql-url", args.mysql_url)):
        if sa.make_url(value).host not in ("127.0.0.1", "localhost", "::1"):
            parser.error(f"loopback only: {option} must point at 127.0.0.1")
    return args


def main() -> int:
    args = parse_args()
    url = args.postgres_url
    if args.only:
        wanted = [args.only]
    else:
        wanted = ["jobq", "pgqueuer", *(["procrastinate"] if args.with_procrastinate else [])]
    peers_wanted = [q for q in wanted if q != "jobq"]
    if peers_wanted and not PEERS_PYTHON.exists():
        log(f"{PEERS_PYTHON} is missing: run `bash benchmarks/peers.sh` first; skipping "
            f"{peers_wanted}")  # fmt: skip
        wanted = [q for q in wanted if q == "jobq"]
    results = Results()
    try:
        if "jobq" in wanted:
            run_jobq(results, url, args)
        if "pgqueuer" in wanted:
            run_pgqueuer(results, url, args)
        if "procrastinate" in wanted:
            run_peer_drains(results, url, args, "procrastinate", None)
    finally:
        for schema in SCHEMAS.values():
            drop_schema(url, schema)
    return 0 if report(results, args) else 1


if __name__ == "__main__":
    sys.exit(main())
