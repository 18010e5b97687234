#!/usr/bin/env python
"""One worker process draining no-op tasks: jobq versus PGQueuer, Procrastinate and bare SQL.

On the same PostgreSQL, in one run, it measures:

1. Drain throughput of ONE worker process on N no-op tasks enqueued beforehand in bulk
   (untimed): jobq (``python -m jobq.cli worker --app benchmarks.noop_app:app --burst
   --concurrency 10`` as a subprocess, timed from spawn to exit) on PostgreSQL and on a
   SQLite file; PGQueuer (``PgQueuer.run(mode=drain, batch_size=10)``) and Procrastinate
   (``run_worker_async(concurrency=10, wait=False)``) on PostgreSQL, each run as a
   subprocess of benchmarks/.venv-peers/bin/python (see peers.sh) and timed the same way.
2. A bare-SQL capture-and-complete loop at batch 100 on PostgreSQL: one psycopg
   connection running the exact capture statement jobq's Store sends (captured with a
   ``before_cursor_execute`` listener, see _sql.py) and then one executemany of the
   Store's set_status statement per batch, in one transaction, as Worker/set_statuses do.
3. Enqueue->start latency through LISTEN/NOTIFY: an idle jobq worker (poll interval
   10 s, so wake-ups come from NOTIFY) while tasks are enqueued one at a time ~20 ms
   apart; latency is started_at - created_at of each row (both the database's clock).
   The same for PGQueuer: its log's 'picked' row minus its 'queued' row.

Every queue works in a PostgreSQL schema of its own (created here, dropped at the end);
tables named jobq_* in the public schema are never touched. Every subprocess has a
timeout. The result is a Markdown table on stdout; progress goes to stderr.

    bash benchmarks/peers.sh                  # once: the peers' own virtualenv
    .venv/bin/python benchmarks/bench_worker.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402

import jobq  # noqa: E402
from benchmarks._sql import (  # noqa: E402
    DEFAULT_POSTGRES_URL,
    analyze,
    capture_statement,
    connect_postgres,
    drop_schema,
    git_state,
    in_schema,
    psycopg_conninfo,
    reset,
    sqlite_url,
    status_counts,
)

TASK_NAME = "bench.noop"  # benchmarks/noop_app.py
APP_PATH = "benchmarks.noop_app:app"
PEERS_PYTHON = ROOT / "benchmarks" / ".venv-peers" / "bin" / "python"
PEER_SCRIPT = ROOT / "benchmarks" / "peer_worker.py"
SCHEMAS = {
    "jobq": "bench_worker_jobq",
    "bare": "bench_worker_bare",
    "pgqueuer": "bench_worker_pgqueuer",
    "procrastinate": "bench_worker_procrastinate",
}
PROBE_ID = 987_654_321_987
PROBE_ATTEMPT = 7_654_321
TARGET_PEER = 3.0
TARGET_BARE = 0.60
TARGET_P50 = 0.005


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class Drain:
    queue: str
    database: str
    tasks: int
    seconds: float
    note: str = ""

    @property
    def rate(self) -> float:
        return self.tasks / self.seconds


@dataclass
class Latency:
    queue: str
    samples: list[float]
    note: str = ""

    def pct(self, p: float) -> float:
        xs = sorted(self.samples)
        return xs[min(len(xs) - 1, max(0, round(p / 100 * len(xs)) - 1))]


# --- jobq ------------------------------------------------------------------------------


def worker_env(url: str) -> dict[str, str]:
    env = dict(os.environ)
    env["JOBQ_DATABASE_URL"] = url
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def jobq_worker_cmd(*options: str) -> list[str]:
    return [sys.executable, "-m", "jobq.cli", "worker", "--app", APP_PATH, *options]


def fill(store: jobq.Store, n: int) -> None:
    reset(store)
    store.enqueue_many(TASK_NAME, [{"n": i} for i in range(n)])
    analyze(store)


def jobq_drain(url: str, database: str, n: int, concurrency: int, timeout: float) -> Drain:
    store = jobq.Store(url)
    try:
        store.migrate()
        cmd = jobq_worker_cmd("--burst", "--concurrency", str(concurrency))
        # Start-up and exit on an empty queue: imports, connecting, registering.
        reset(store)
        start = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, env=worker_env(url), check=True, timeout=timeout)
        empty = time.perf_counter() - start
        fill(store, n)
        log(f"jobq/{database}: draining {n} tasks")
        start = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, env=worker_env(url), check=True, timeout=timeout)
        seconds = time.perf_counter() - start
        counts = status_counts(store)
        if counts != {"done": n}:
            raise RuntimeError(f"jobq/{database}: after the drain the table holds {counts}")
        with store.engine.connect() as conn:
            span = conn.exec_driver_sql(
                "SELECT min(started_at), max(finished_at) FROM jobq_tasks"
            ).one()
        span_s = (span[1] - span[0]).total_seconds() if database != "SQLite" else None
        note = f"empty-queue start+exit {empty:.2f} s"
        if span_s:
            note += f"; first start to last finish {span_s:.2f} s ({n / span_s:,.0f}/s)"
        return Drain("jobq", database, n, seconds, note)
    finally:
        store.dispose()


def jobq_latency(url: str, samples: int, spacing: float, timeout: float) -> Latency:
    store = jobq.Store(url)
    store.migrate()
    reset(store)
    cmd = jobq_worker_cmd("--concurrency", "10", "--poll-interval", "10")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=worker_env(url))
    try:
        time.sleep(3.0)  # imported, registered, LISTENing, found nothing: now idle
        for i in range(samples):
            store.enqueue(TASK_NAME, {"n": i})
            time.sleep(spacing)
        deadline = time.monotonic() + timeout
        while status_counts(store).get("done", 0) < samples:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"jobq latency: only {status_counts(store)} after waiting")
            time.sleep(0.05)
        with store.engine.connect() as conn:
            rows = conn.exec_driver_sql(
                "SELECT extract(epoch FROM started_at - created_at) FROM jobq_tasks"
            ).all()
        return Latency("jobq", [float(r[0]) for r in rows])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        store.dispose()


# --- bare SQL --------------------------------------------------------------------------


def bare_drain(url: str, n: int, batch: int) -> Drain:
    store = jobq.Store(url)
    try:
        store.migrate()
        capture = capture_statement(store, lambda: store.capture(batch, worker_id="bench"))
        update = capture_statement(store, lambda: store.set_status(PROBE_ID, PROBE_ATTEMPT, "done"))
        bind = update.binder(update.slot_of(PROBE_ID), update.slot_of(PROBE_ATTEMPT))
        fill(store, n)
        cap_conn = connect_postgres(url, autocommit=not capture.transactional)
        upd_conn = connect_postgres(url, autocommit=False)  # set_statuses: one transaction
        try:
            cap_cur, upd_cur = cap_conn.cursor(), upd_conn.cursor()
            log(f"bare SQL: draining {n} tasks, capture {batch} ({capture_mode(capture)})")
            done = 0
            start = time.perf_counter()
            while True:
                cap_cur.execute(capture.sql, capture.params)
                rows = cap_cur.fetchall()
                if capture.transactional:
                    cap_conn.commit()
                if not rows:
                    break
                names = [d.name for d in cap_cur.description]
                i, a = names.index("id"), names.index("attempt")
                upd_cur.executemany(update.sql, [bind(row[i], row[a]) for row in rows])
                upd_conn.commit()
                done += len(rows)
            seconds = time.perf_counter() - start
        finally:
            cap_conn.close()
            upd_conn.close()
        counts = status_counts(store)
        if done != n or counts != {"done": n}:
            raise RuntimeError(f"bare drain: {done} captured, table holds {counts}")
        note = f"capture {batch} + executemany"
        return Drain("bare SQL (psycopg)", "PostgreSQL", n, seconds, note)
    finally:
        store.dispose()


def capture_mode(stmt: Any) -> str:
    return "in a transaction" if stmt.transactional else "autocommit"


# --- peers -----------------------------------------------------------------------------


def peer(queue: str, action: str, dsn: str, timeout: float, **options: Any) -> dict[str, Any]:
    cmd = [str(PEERS_PYTHON), str(PEER_SCRIPT), queue, action, "--dsn", dsn]
    for key, value in options.items():
        cmd += [f"--{key}", str(value)]
    env = dict(os.environ, PGQUEUER_PREFIX="bench_")  # its own tables and NOTIFY channel
    out = subprocess.run(
        cmd, cwd=ROOT, env=env, check=True, timeout=timeout, stdout=subprocess.PIPE, text=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def peer_drain(queue: str, dsn: str, n: int, concurrency: int, timeout: float) -> Drain:
    peer(queue, "setup", dsn, timeout)
    peer(queue, "enqueue", dsn, timeout, tasks=n)
    log(f"{queue}: draining {n} tasks")
    start = time.perf_counter()
    result = peer(queue, "drain", dsn, timeout, concurrency=concurrency)
    seconds = time.perf_counter() - start
    if result["ran"] != n:
        raise RuntimeError(f"{queue}: ran {result['ran']} of {n}")
    note = f"worker call alone {result['seconds']:.2f} s ({n / result['seconds']:,.0f}/s)"
    return Drain(queue, "PostgreSQL", n, seconds, note)


def pgqueuer_latency(dsn: str, samples: int, spacing: float, timeout: float) -> Latency:
    peer("pgqueuer", "setup", dsn, timeout)
    result = peer("pgqueuer", "latency", dsn, timeout, samples=samples, spacing=spacing)
    if result["ran"] != samples or len(result["latencies"]) != samples:
        raise RuntimeError(f"pgqueuer latency: ran {result['ran']} of {samples}")
    return Latency("pgqueuer", result["latencies"])


# --- report ----------------------------------------------------------------------------


def report(
    drains: list[Drain], bare: Drain | None, latencies: list[Latency], args: argparse.Namespace
) -> bool:
    pgq = next((d for d in drains if d.queue == "pgqueuer"), None)
    jobq_pg = next((d for d in drains if d.queue == "jobq" and d.database == "PostgreSQL"), None)
    print(f"\n### bench_worker.py ({args.tasks:,} no-op tasks, concurrency {args.concurrency})\n")
    print(f"jobq at {git_state()}; Python {platform.python_version()}, {os.cpu_count()} cores\n")
    print("| queue | database | tasks | seconds | jobs/s | ratio to PGQueuer | notes |")
    print("|---|---|---:|---:|---:|---:|---|")
    for d in [*drains, *([bare] if bare else [])]:
        ratio = f"{d.rate / pgq.rate:.2f}" if pgq else "n/a"
        print(
            f"| {d.queue} | {d.database} | {d.tasks:,} | {d.seconds:.2f} | {d.rate:,.0f} "
            f"| {ratio} | {d.note} |"
        )
    if bare and jobq_pg:
        print(
            f"| jobq / bare SQL | PostgreSQL | | | | | jobq drain = "
            f"{100 * jobq_pg.rate / bare.rate:.0f}% of the bare loop |"
        )
    if latencies:
        print("\n| queue | enqueue->start latency | samples | p50 ms | p99 ms | max ms |")
        print("|---|---|---:|---:|---:|---:|")
        for lat in latencies:
            print(
                f"| {lat.queue} | LISTEN/NOTIFY, {args.spacing * 1000:.0f} ms apart "
                f"| {len(lat.samples)} | {lat.pct(50) * 1000:.2f} | {lat.pct(99) * 1000:.2f} "
                f"| {max(lat.samples) * 1000:.2f} |"
            )
    print("\nTargets:\n")
    ok = True

    def target(text: str, met: bool | None, detail: str) -> None:
        nonlocal ok
        verdict = "not measured" if met is None else ("met" if met else "NOT met")
        ok = ok and met is not False
        print(f"- {text}: **{verdict}** ({detail})")

    if jobq_pg and pgq:
        r = jobq_pg.rate / pgq.rate
        target("drain at least 3x PGQueuer's jobs/s", r >= TARGET_PEER, f"{r:.2f}x")
    else:
        target("drain at least 3x PGQueuer's jobs/s", None, "needs jobq and pgqueuer")
    if jobq_pg and bare:
        r = jobq_pg.rate / bare.rate
        target(
            "at least 60% of a bare-SQL capture-and-complete loop at batch 100",
            r >= TARGET_BARE, f"{100 * r:.0f}%",
        )  # fmt: skip
    else:
        target("at least 60% of a bare-SQL loop", None, "needs jobq")
    jl = next((lat for lat in latencies if lat.queue == "jobq"), None)
    if jl:
        target("p50 latency at most 5 ms", jl.pct(50) <= TARGET_P50, f"{jl.pct(50) * 1000:.2f} ms")
    else:
        target("p50 latency at most 5 ms", None, "needs jobq")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--only", choices=["jobq", "pgqueuer", "procrastinate"])
    parser.add_argument("--latency-samples", type=int, default=200)
    parser.add_argument("--spacing", type=float, default=0.02, help="seconds between enqueues")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--batch", type=int, default=100, help="the bare loop's capture limit")
    parser.add_argument("--timeout", type=float, default=600, help="per subprocess, seconds")
    args = parser.parse_args()
    url = args.postgres_url
    if sa.make_url(url).host not in ("127.0.0.1", "localhost", "::1"):
        parser.error("loopback only: --postgres-url must point at 127.0.0.1")
    wanted = [args.only] if args.only else ["jobq", "pgqueuer", "procrastinate"]
    peers = [q for q in wanted if q != "jobq"]
    if peers and not PEERS_PYTHON.exists():
        log(f"{PEERS_PYTHON} is missing: run `bash benchmarks/peers.sh` first; skipping {peers}")
        wanted = [q for q in wanted if q == "jobq"]
    drains: list[Drain] = []
    latencies: list[Latency] = []
    bare: Drain | None = None
    try:
        if "jobq" in wanted:
            jurl = in_schema(url, SCHEMAS["jobq"])
            conc, timeout = args.concurrency, args.timeout
            drains.append(jobq_drain(jurl, "PostgreSQL", args.tasks, conc, timeout))
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "bench.db")
                drains.append(jobq_drain(sqlite_url(path), "SQLite", args.tasks, conc, timeout))
            bare = bare_drain(in_schema(url, SCHEMAS["bare"]), args.tasks, args.batch)
            log("jobq: latency")
            latencies.append(jobq_latency(jurl, args.latency_samples, args.spacing, args.timeout))
        for queue in ("pgqueuer", "procrastinate"):
            if queue not in wanted:
                continue
            drop_schema(url, SCHEMAS[queue])
            dsn = psycopg_conninfo(in_schema(url, SCHEMAS[queue]))
            drains.append(peer_drain(queue, dsn, args.tasks, args.concurrency, args.timeout))
            if queue == "pgqueuer":
                log("pgqueuer: latency")
                drop_schema(url, SCHEMAS[queue])  # a fresh log table
                dsn = psycopg_conninfo(in_schema(url, SCHEMAS[queue]))
                latencies.append(
                    pgqueuer_latency(dsn, args.latency_samples, args.spacing, args.timeout)
                )
    finally:
        for schema in SCHEMAS.values():
            drop_schema(url, schema)
    return 0 if report(drains, bare, latencies, args) else 1


if __name__ == "__main__":
    sys.exit(main())
