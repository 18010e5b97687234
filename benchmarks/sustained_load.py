#!/usr/bin/env python
"""Sustained load: a producer at a fixed offered rate against one jobq worker, stepped.

Issue 42. For each ``--database`` and each ``--slots`` value, a series (see
_sustained_run.py) on a database of its own: a real ``jobq worker --app
benchmarks.noop_app:app --concurrency SLOTS`` process running tasks of 1 ms
(``bench.sleep``, ``time.sleep(0.001)`` on a thread; ``--task async``:
``bench.sleep_async``, ``asyncio.sleep(0.001)`` on the worker's loop), and a producer
process (_producer.py) enqueueing with ``Store.enqueue_many`` in batches of 128 at a fixed
offered rate, paced on the monotonic clock. The steps: each ``--rates`` rate for
``--step-seconds``; then, from the best ramp step that kept up (the sustainable rate), a
step at 50% of it (claim latency) and ``--overload-seconds`` at ``--overload`` (2.5) times
it, in steps.

The report, one Markdown table per (database, slots): each step's offered rate, what the
producer managed to offer, completed/s (rows finished in the step's window), the lowest
completed/s of the samples taken within it (every ``--sample-seconds``), the p50 / p95 /
p99 claim latency of the rows it enqueued (started_at - created_at, the database's
clock; "-" where rows not yet started could be in that percentile: their count is
shown), the depth (waiting rows) at its end, and on PostgreSQL the dead tuples of
jobq_tasks (pg_stat_user_tables) and the size of the capture index. Then the verdicts,
judged on PostgreSQL:

- no fall under overload: with ``--overload`` >= 2.5 for >= 180 s, the completed/s of
  every overload step is at least 95% of the sustainable rate;
- latency at load: the p99 claim latency of the 50% step is at most 20 ms;
- slots are used: the sustainable rate is at least 8,000/s at 16 slots, 10,000/s at 64,
  or a ramp step offered that rate and completed 99% of it within its window, ending
  with at most a second's arrivals waiting (judged only if the ramp offered that much).

PostgreSQL runs on a private server of the run's own (_servers.private_postgres:
``autovacuum=on`` as in production, ``fsync=on``, ``shared_buffers`` 512MB), since the
shared server runs without autovacuum, and dead tuples are half of what is measured here;
``--postgres-url`` runs on that server instead (a schema of its own). MariaDB and SQLite
are the usual: a database of the run's own on ``--mysql-url``, a temporary file.
Progress goes to stderr; exits 1 if a judged target is missed.

    .venv/bin/python benchmarks/sustained_load.py --quick
    .venv/bin/python benchmarks/sustained_load.py --slots 16,64 --database postgresql,mysql,sqlite
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._machine import machine_load
from benchmarks._sustained_peers import PEERS, peer_queue, peers_ready
from benchmarks._sustained_run import Plan, Series, Step, jobq_queue, run_series
from benchmarks.harness import (
    DEFAULT_MYSQL_URL,
    csv_ints,
    database,
    drop_schema,
    git_state,
    in_schema,
    log,
    markdown_table,
    psycopg_conninfo,
)

TASKS = {"sync": "bench.sleep", "async": "bench.sleep_async"}
DATABASES = ("postgresql", "mysql", "sqlite")
SCHEMA = "bench_sustained"
# Issue 42's targets, judged on PostgreSQL.
FLOOR = 0.95  # overload completed/s over the sustainable rate
OVERLOAD_AT_LEAST = 2.5  # times the sustainable rate ...
OVERLOAD_FOR = 180.0  # ... for this many seconds
P99_TARGET = 0.020  # s, at 50% of the sustainable rate
RATE_TARGETS = {16: 8_000, 64: 10_000}
HELD = 0.99  # of a rate target: a ramp step offered it, completed this much, left <= 1 s waiting


# --- where ------------------------------------------------------------------------------


@contextlib.contextmanager
def postgres_server(given: str | None, shared_buffers: str) -> Iterator[str]:
    """The URL of a PostgreSQL database for the run: ``given``, else a new database on a
    private server (stopped and deleted at the end)."""
    if given:
        yield given
        return
    from benchmarks._servers import private_postgres

    with private_postgres(shared_buffers) as server:
        log(f"private PostgreSQL {server.version()} (autovacuum on) in {server.directory}")
        url = server.create_database("sustained")
        try:
            yield url
        finally:
            server.drop_database("sustained")


def run_all(args: argparse.Namespace, plan: Plan) -> list[Series]:
    found: list[Series] = []
    task = TASKS[args.task]
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.database:
            with contextlib.ExitStack() as stack:
                if kind == "postgresql":
                    url = stack.enter_context(
                        postgres_server(args.postgres_url, args.shared_buffers)
                    )
                else:
                    url = args.mysql_url if kind == "mysql" else "sqlite"
                for slots in args.slots:
                    with database(url, tmp, SCHEMA) as db:
                        label = "PostgreSQL" if db.kind == "postgresql" else db.label
                        log(f"== jobq, {label}, {slots} slots ({task}); {machine_load()}")
                        db.store.dispose()
                        queue = jobq_queue(db.url, slots, task, plan)
                        found.append(run_series(queue, label, slots, task, plan))
                    if kind == "postgresql" and args.peers:
                        found += run_peers(url, slots, plan)
    return found


def run_peers(url: str, slots: int, plan: Plan) -> list[Series]:
    """PGQueuer's and Procrastinate's series at ``slots``, each in a schema of its own."""
    found = []
    for name in PEERS:
        schema = f"{SCHEMA}_{name}"
        drop_schema(url, schema)
        try:
            dsn = psycopg_conninfo(in_schema(url, schema))
            log(f"== {name}, PostgreSQL, {slots} slots (async, 1 ms); {machine_load()}")
            found.append(run_series(peer_queue(name, dsn, slots, plan), "PostgreSQL", slots,
                                    "async sleep", plan))  # fmt: skip
        finally:
            drop_schema(url, schema)
    return found


# --- report -------------------------------------------------------------------------------


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:,.1f}"


def step_row(s: Step) -> list[str]:
    return [
        s.phase,
        f"{s.rate:,.0f}",
        f"{s.offered_rate:,.0f}" + (f" ({s.unoffered:,} not offered)" if s.unoffered else ""),
        f"{s.completed_rate:,.0f}",
        "-" if s.min_sampled is None else f"{s.min_sampled:,.0f}",
        ms(s.latency(50)),
        ms(s.latency(95)),
        ms(s.latency(99)),
        f"{s.not_started:,}",
        f"{s.depth:,}",
        "-" if s.dead is None else f"{s.dead:,}",
        "-" if s.capture_index is None else f"{s.capture_index / 1024:,.0f} kB",
    ]


HEADER = [
    "phase", "offered/s", "offered/s (done)", "completed/s", "lowest sample/s",
    "p50 ms", "p95 ms", "p99 ms", "not started", "depth at end", "dead tuples",
    "capture index",
]  # fmt: skip


def print_series(s: Series, plan: Plan) -> None:
    print(f"\n#### {s.queue}, {s.database}, {s.slots} slots, {s.task} (1 ms)\n")
    print(markdown_table(HEADER, "lrrrrrrrrrrr", [step_row(x) for x in s.steps]))
    sustainable = "none" if s.sustainable is None else f"{s.sustainable:,.0f}/s"
    print(
        f"\nSustainable rate (best ramp step that kept up): {sustainable}; "
        + (
            f"backlog drained in {s.drain_seconds:.1f} s before the latency step."
            if s.drained
            else f"the backlog did NOT drain in {s.drain_seconds:.1f} s: the latency step "
            "waited behind it."
        )
    )
    errors = [line for line in s.worker_stderr if "Error" in line or "Traceback" in line]
    if errors:
        print(f"\nThe worker's stderr has {len(errors)} error lines; the first: `{errors[0]}`")


def judge(s: Series, plan: Plan) -> list[tuple[str, bool | None, str]]:
    """(target, met / missed / None for not measured, detail) for one series."""
    out: list[tuple[str, bool | None, str]] = []
    over = [x for x in s.steps if x.phase == "overload"]
    text = (
        f"completed/s under {OVERLOAD_AT_LEAST:g}x overload for {OVERLOAD_FOR:g} s never "
        f"below {FLOOR:.0%} of the sustainable rate"
    )
    if s.sustainable is None or not over:
        out.append((text, False if s.sustainable is None else None, "no sustainable rate"))
    else:
        low = min(x.completed_rate for x in over)
        seconds = sum(x.end - x.start for x in over)
        detail = (
            f"lowest {low:,.0f}/s = {low / s.sustainable:.0%} of {s.sustainable:,.0f}/s over "
            f"{seconds:.0f} s at {plan.overload:g}x"
        )
        if plan.overload < OVERLOAD_AT_LEAST or seconds < OVERLOAD_FOR:
            out.append((text, None, detail + "; too short or too light to judge"))
        else:
            out.append((text, low >= FLOOR * s.sustainable, detail))
    lat = next((x for x in s.steps if x.phase == "latency"), None)
    text = f"p99 claim latency at 50% of the sustainable rate at most {P99_TARGET * 1000:g} ms"
    if lat is None:
        out.append((text, None, "no latency step"))
    elif not s.drained:
        out.append((text, None, "the backlog had not drained before the latency step"))
    else:
        p99 = lat.latency(99)
        detail = f"p99 {ms(p99)} ms at {lat.rate:,.0f}/s"
        out.append((text, p99 is not None and p99 <= P99_TARGET, detail))
    target = RATE_TARGETS.get(s.slots)
    if target:
        text = f"sustain at least {target:,} jobs/s at {s.slots} slots"
        best = s.sustainable or 0.0
        ramp = [x for x in s.steps if x.phase == "ramp"]
        ramp_max = max((x.rate for x in ramp), default=0)
        detail = f"sustained {best:,.0f}/s; the ramp offered up to {ramp_max:,.0f}/s"
        # A step offered the target that ended with no backlog completed slightly less
        # within its window (the rows of its last milliseconds end after it): 99% is met.
        held = [x for x in ramp if x.kept_up and x.rate >= target]
        held = [x for x in held if x.completed_rate >= HELD * target and x.depth <= x.rate]
        if best >= target or held:
            out.append((text, True, detail))
        elif ramp_max < target and (not ramp or ramp[-1].kept_up):  # never asked for it
            out.append((text, None, detail))
        else:
            out.append((text, False, detail))
    return out


def report(found: list[Series], args: argparse.Namespace, plan: Plan) -> bool:
    print(f"\n### sustained_load.py (issue 42): {args.task} tasks of 1 ms\n")
    print(
        f"jobq at {git_state()}; Python {platform.python_version()}; {machine_load()} at the "
        f"end; rates {', '.join(f'{r:,}' for r in plan.rates)}/s for {plan.step_seconds:g} s "
        f"each, batches of {plan.batch}, samples every {plan.sample_seconds:g} s, worker "
        + ("with task logs (INFO)" if plan.task_logs else "at --log-level warning")
    )
    ok = True
    for s in found:
        print_series(s, plan)
    print("\nTargets (judged for jobq on PostgreSQL; the others are shown):\n")
    for s in found:
        for text, met, detail in judge(s, plan):
            judged = s.database == "PostgreSQL" and s.queue == "jobq"
            verdict = "not measured" if met is None else ("met" if met else "NOT met")
            if not judged:
                verdict = f"shown: {verdict}"
            ok = ok and (met is not False or not judged)
            print(f"- {s.queue}, {s.database}, {s.slots} slots: {text}: **{verdict}** ({detail})")
    return ok


# --- main ---------------------------------------------------------------------------------


def parse_args() -> tuple[argparse.Namespace, Plan]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rates", type=csv_ints, default=None,
                        help="the ramp's offered rates, per second (default "
                        "1000,2000,4000,6000,8000,10000,12000; --quick 500,1000,2000)")  # fmt: skip
    parser.add_argument("--step-seconds", type=float, default=None, help="default 30, quick 10")
    parser.add_argument("--slots", type=csv_ints, default=None, help="default 16,64; quick 16")
    parser.add_argument("--database", default=None,
                        help="comma-separated of postgresql,mysql,sqlite (default all three; "
                        "quick postgresql)")  # fmt: skip
    parser.add_argument("--overload", type=float, default=OVERLOAD_AT_LEAST)
    parser.add_argument("--overload-seconds", type=float, default=None,
                        help="default 180, quick 20")  # fmt: skip
    parser.add_argument("--sample-seconds", type=float, default=None, help="default 5, quick 2")
    parser.add_argument("--batch", type=int, default=128, help="rows per enqueue_many call")
    parser.add_argument("--task", choices=sorted(TASKS), default="sync")
    parser.add_argument("--task-logs", action="store_true", help="keep the worker's INFO logs")
    parser.add_argument("--postgres-url", default=None,
                        help="run on this server instead of a private one")  # fmt: skip
    parser.add_argument("--mysql-url", default=DEFAULT_MYSQL_URL)
    parser.add_argument("--shared-buffers", default="512MB", help="the private server's")
    parser.add_argument("--peers", action="store_true",
                        help="also PGQueuer and Procrastinate, same steps")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="a smoke run of about a minute")
    args = parser.parse_args()
    q = args.quick
    args.rates = args.rates or (
        [500, 1000, 2000] if q else [1000, 2000, 4000, 6000, 8000, 10000, 12000]
    )
    args.slots = args.slots or ([16] if q else [16, 64])
    args.database = (args.database or ("postgresql" if q else ",".join(DATABASES))).split(",")
    unknown = set(args.database) - set(DATABASES)
    if unknown:
        parser.error(f"--database: unknown {sorted(unknown)}")
    plan = Plan(
        rates=args.rates,
        step_seconds=args.step_seconds or (10.0 if q else 30.0),
        overload=args.overload,
        overload_seconds=args.overload_seconds or (20.0 if q else OVERLOAD_FOR),
        sample_seconds=args.sample_seconds or (2.0 if q else 5.0),
        batch=args.batch,
        drain_timeout=15.0 if q else 600.0,
        task_logs=args.task_logs,
    )
    return args, plan


def main() -> int:
    args, plan = parse_args()
    if args.peers and not peers_ready():
        log("benchmarks/.venv-peers is missing: run `bash benchmarks/peers.sh`; no peers")
        args.peers = False
    found = run_all(args, plan)
    return 0 if report(found, args, plan) else 1


if __name__ == "__main__":
    sys.exit(main())
