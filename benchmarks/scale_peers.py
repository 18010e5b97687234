#!/usr/bin/env python
"""Scale on one machine: jobq and PGQueuer each drained by 1 to 16 worker processes.

scale_out.py asks whether jobq's throughput falls as worker processes are added; on a
2-core machine that shares its cores with the database, it does past 4-8. This
asks whether that is jobq's or the machine's: the strongest peer, PGQueuer (asyncpg, its
recommended driver; its performance guide's autovacuum settings; ``batch_size`` =
``--concurrency``), is measured the same way in the same run.

A run, for each queue and each process count N (``--processes``, 1,2,4,8,16), on the
PostgreSQL of ``--url`` (default $JOBQ_BENCH_POSTGRES_URL, else the test server), in a
schema of its own:

1. N worker processes are started and the run waits until all N listen (their sessions
   carry an application_name of the run's own; see ready()): jobq as N ``jobq worker
   --concurrency C`` commands running benchmarks/noop_app.py, PGQueuer as N
   ``peer_worker.py pgqueuer serve --concurrency C`` (its continuous mode), C =
   ``--concurrency`` (32);
2. ``--tasks`` (100,000) no-op jobs are enqueued in one transaction (jobq: enqueue_many
   with ``connection=``; PGQueuer: one ``Queries.enqueue`` call, in a process of the
   peers' virtualenv), and the workers hear of them at its commit;
   PGQueuer's queue table is then ANALYZEd, inside the timed span (``--no-analyze-peer``
   leaves that out: with the statistics of an empty table its dequeue drained 100,000
   jobs at 1,700 jobs/s rather than 8,600, one process);
3. the clock runs from the end of the enqueue (for PGQueuer that is the enqueue
   process's exit, a little after its commit: this flatters PGQueuer, not jobq) until a
   poll every 20 ms finds no job left (jobq: none not ``done``; PGQueuer: its queue table
   empty, for it deletes a job when it logs its end); jobs/s = tasks / that time;
4. the workers get SIGTERM; every job must have run once (jobq: all ``done`` at attempt
   1; PGQueuer: its workers' own counts add up to the tasks with the queue empty).

The points run ``--rounds`` (3) times, the queues' order reversed every other round;
the report gives medians (minimum-maximum), each queue's ratio at N against the best
of fewer processes, and the machine's CPU busy time during the drains (/proc/stat),
also as CPU microseconds a job (busy time over the cores, per job drained).

    bash benchmarks/peers.sh && .venv/bin/python benchmarks/scale_peers.py
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jobq
from benchmarks._bouncer import wait_for
from benchmarks._drains import PEER_SCRIPT, peer
from benchmarks._machine import cpu_ticks
from benchmarks.harness import (
    BENCH_POSTGRES_URL,
    PEERS_PYTHON,
    ROOT,
    SYNC_TASK,
    connect_postgres,
    drop_schema,
    git_state,
    in_schema,
    jobq_worker_cmd,
    log,
    psycopg_conninfo,
    spread,
    worker_env,
)
from jobq.db.urls import parse_url

HERE = Path(__file__).resolve().parent
QUEUES = ("jobq", "pgqueuer")
PGQ_PREFIX = "bench_"  # peer() gives PGQueuer tables of this prefix
CPUS = os.cpu_count() or 1
#: Seconds between looks at the queue while it drains.
POLL = 0.02


def with_app_name(url: str, name: str) -> str:
    """``url`` with its sessions named ``name`` in pg_stat_activity."""
    named = parse_url(url).update_query_dict({"application_name": name})
    return named.render_as_string(hide_password=False)


def drain(args: argparse.Namespace, queue: str, n: int, tag: str) -> dict[str, Any]:
    """One point: ``n`` processes of ``queue`` drain the backlog; its measurements."""
    url = with_app_name(in_schema(args.url, tag), tag)
    monitor = connect_postgres(args.url, autocommit=True)

    def ready() -> bool:
        """jobq: ``n`` LISTEN sessions. PGQueuer listens on the connection it works on, so
        its sessions show their last query, not the LISTEN: ``n`` sessions, connected for
        a second and idle now (it listens before its first dequeue, so one that is not
        listening yet finds the jobs then)."""
        if queue == "jobq":
            where = "query ILIKE 'LISTEN%%'"
        else:
            where = "state = 'idle' AND backend_start < now() - interval '1 s'"
        sessions, settled = monitor.execute(
            f"SELECT count(*), count(*) FILTER (WHERE {where}) FROM pg_stat_activity"
            " WHERE application_name = %s", (tag,),
        ).fetchone()  # fmt: skip
        return settled >= n if queue == "jobq" else sessions == settled == n

    def left() -> int:
        table = "jobq_tasks WHERE status <> 'done'" if queue == "jobq" else f"{PGQ_PREFIX}pgqueuer"
        return monitor.execute(f"SELECT count(*) FROM {tag}.{table}").fetchone()[0]

    store = jobq.Store(url)
    workers: list[subprocess.Popen[str]] = []
    try:
        if queue == "jobq":
            store.migrate()
            cmd = jobq_worker_cmd("--concurrency", str(args.concurrency), "--log-level", "warning")
            env = worker_env(url)
        else:
            dsn = psycopg_conninfo(url)
            peer("pgqueuer", "setup", dsn, args.timeout)
            cmd = [str(PEERS_PYTHON), str(PEER_SCRIPT), "pgqueuer", "serve", "--dsn", dsn,
                   "--concurrency", str(args.concurrency)]  # fmt: skip
            env = dict(os.environ, PGQUEUER_PREFIX=PGQ_PREFIX)
        for _ in range(n):
            workers.append(
                subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
            )
        wait_for(ready, f"{n} {queue} workers to LISTEN", args.timeout)
        if queue == "jobq":
            with store.engine.begin() as conn:
                store.enqueue_many(
                    SYNC_TASK, [{"n": i} for i in range(args.tasks)], connection=conn
                )
        else:
            peer("pgqueuer", "enqueue", dsn, args.timeout, tasks=args.tasks, batch=args.tasks)
        before = cpu_ticks()
        start = time.monotonic()
        if queue == "pgqueuer" and args.analyze_peer:
            # jobq brings the statistics up to date in its bulk enqueue's transaction;
            # PGQueuer leaves that to autovacuum, which may come too late for a drain.
            monitor.execute(f"ANALYZE {tag}.{PGQ_PREFIX}pgqueuer")
        wait_for(lambda: left() == 0, f"{queue} x {n} to drain", args.timeout, every=POLL)
        seconds = time.monotonic() - start
        after = cpu_ticks()
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        outputs = [worker.communicate(timeout=args.timeout)[0] for worker in workers]
        check(queue, monitor, tag, args.tasks, outputs)
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        store.dispose()
        monitor.close()
        drop_schema(args.url, tag)
    return {
        "queue": queue, "processes": n, "tasks": args.tasks, "seconds": seconds,
        "jobs_per_s": args.tasks / seconds, "cpu_busy": busy_share(before, after),
    }  # fmt: skip


def busy_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float:
    """The machine's busy share of its CPU time between two cpu_ticks() (nan: unknown)."""
    if before is None or after is None or after[1] == before[1]:
        return math.nan
    return (after[0] - before[0]) / (after[1] - before[1])


def check(queue: str, monitor: Any, schema: str, tasks: int, outputs: list[str]) -> None:
    """Raise unless every job ran once."""
    if queue == "jobq":
        ran = monitor.execute(
            f"SELECT count(*) FROM {schema}.jobq_tasks WHERE status = 'done' AND attempt = 1"
        ).fetchone()[0]
    else:
        ran = sum(json.loads(out.strip().splitlines()[-1])["ran"] for out in outputs)
    if ran != tasks:
        raise RuntimeError(f"{queue}: {ran} runs of {tasks} jobs")


def report(runs: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """The markdown report of ``runs``."""
    lines = [
        "## scale_peers.py", "",
        f"{git_state()}; {args.tasks:,} no-op jobs enqueued in one transaction to N idle,"
        f" listening worker processes of concurrency / batch {args.concurrency};"
        f" {args.rounds} round(s); medians (minimum-maximum).", "",
        "| queue | processes | jobs/s | against the best of fewer | machine CPU busy"
        " | machine CPU µs a job |",
        "|---|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for queue in QUEUES:
        best = 0.0
        for n in args.processes:
            point = [r for r in runs if r["queue"] == queue and r["processes"] == n]
            if not point:
                continue
            rates = [r["jobs_per_s"] for r in point]
            median = statistics.median(rates)
            ratio = f"{median / best:.2f}x" if best else "-"
            busy = statistics.median(r["cpu_busy"] for r in point)
            # All the machine's work a job: the workers', the server's and the rest.
            per_job = statistics.median(r["cpu_busy"] * CPUS * 1e6 / r["jobs_per_s"] for r in point)
            label = "jobq" if queue == "jobq" else "PGQueuer (asyncpg)"
            lines.append(
                f"| {label} | {n} | {spread(rates, '{:,.0f}')}"
                f" | {ratio} | {busy:.0%} | {per_job:.0f} |"
            )
            best = max(best, median)
    return "\n".join(lines) + "\n"


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default=BENCH_POSTGRES_URL)
    p.add_argument("--processes", type=lambda t: [int(x) for x in t.split(",")],
                   default=[1, 2, 4, 8, 16])  # fmt: skip
    p.add_argument("--queues", type=lambda t: t.split(","), default=list(QUEUES))
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--analyze-peer", action=argparse.BooleanOptionalAction, default=True,
                   help="ANALYZE PGQueuer's queue table as its drain starts (timed)")  # fmt: skip
    p.add_argument("--timeout", type=float, default=300.0, help="seconds a step may take")
    p.add_argument("--json", default=str(HERE / "scale_peers.json"), help="results file")
    args = p.parse_args(argv)
    if not set(args.queues) <= set(QUEUES):
        p.error(f"--queues: of {','.join(QUEUES)}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if "pgqueuer" in args.queues and not PEERS_PYTHON.exists():
        sys.exit("no peers' virtualenv: run `bash benchmarks/peers.sh` first")
    runs = []
    for round_ in range(args.rounds):
        for n in args.processes:
            order = args.queues if round_ % 2 == 0 else args.queues[::-1]
            for queue in order:
                tag = f"jobqscale_{os.getpid()}_{len(runs)}"
                runs.append(drain(args, queue, n, tag))
                log(f"round {round_ + 1}: {queue} x {n}: {runs[-1]['jobs_per_s']:,.0f} jobs/s")
    text = report(runs, args)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
