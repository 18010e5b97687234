#!/usr/bin/env python
"""One worker process draining no-op tasks: jobq versus PGQueuer, Procrastinate and bare SQL.

On the same PostgreSQL, in one run, it measures:

1. Drain throughput of ONE worker process on N no-op tasks enqueued beforehand in bulk
   (untimed), once per ``--concurrency`` value (default 10 and 100), each process timed
   from spawn to exit:
   - jobq (``python -m jobq.cli worker --app benchmarks.noop_app:app --burst
     --concurrency C --log-level warning``) on PostgreSQL with the sync no-op
     ``bench.noop`` and with the async no-op ``bench.noop_async`` (the like-for-like row:
     the peers run async no-ops), and on a SQLite file with the sync one;
   - jobq on PostgreSQL with the async no-op and the default INFO logging (one line per
     task start and end), its stderr going to a temporary file: the cost of task logs;
   - PGQueuer (``PgQueuer.run(mode=drain, batch_size=C)``) and Procrastinate
     (``run_worker_async(concurrency=C, wait=False)``) on PostgreSQL, each run with
     benchmarks/.venv-peers/bin/python (see peers.sh and peer_worker.py).
2. A bare-SQL capture-and-complete loop at batch 100 on PostgreSQL, in a child process
   (this script with ``--bare-child URL``) timed from spawn to exit like the workers: one
   psycopg connection runs the exact capture statement jobq's Store sends and another the
   Store's set_statuses statement once per batch (both captured with a
   ``before_cursor_execute`` listener, see _sql.py), each with the transaction handling
   the Store gives it. The child also reports its loop's own seconds.
3. Enqueue->start latency through LISTEN/NOTIFY: an idle jobq worker (concurrency 10,
   poll interval 10 s, so wake-ups come from NOTIFY) while tasks are enqueued one at a
   time ~20 ms apart; latency is started_at - created_at of each row (both the database's
   clock). The same for PGQueuer: its log's 'picked' row minus its 'queued' row.

The targets are judged at concurrency 100 (else the largest run) with the better of
jobq's sync and async PostgreSQL rows, against PGQueuer at the same concurrency and the
bare loop. Every queue works in a PostgreSQL schema of its own (created here, dropped at
the end); tables named jobq_* in the public schema are never touched. Every subprocess
has a timeout. The result is a Markdown table on stdout; progress goes to stderr. Exits 1
if a target is missed.

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
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402

import jobq  # noqa: E402
from benchmarks._sql import (  # noqa: E402
    DEFAULT_MYSQL_URL,
    DEFAULT_POSTGRES_URL,
    Statement,
    analyze,
    capture_statement,
    connect_postgres,
    drop_mysql_database,
    drop_schema,
    git_state,
    in_schema,
    mysql_database,
    mysql_server,
    psycopg_conninfo,
    reset,
    sqlite_url,
    status_counts,
)
from jobq.run_end import encode_completions  # noqa: E402
from jobq.tasks import Completion, Status  # noqa: E402

SYNC_TASK = "bench.noop"  # benchmarks/noop_app.py
ASYNC_TASK = "bench.noop_async"
SYNC_ROW = "jobq (sync no-op)"
ASYNC_ROW = "jobq (async no-op)"
LOGS_ROW = "jobq (async no-op, task logs on)"
BARE_ROW = "bare SQL (psycopg)"
APP_PATH = "benchmarks.noop_app:app"
PEERS_PYTHON = ROOT / "benchmarks" / ".venv-peers" / "bin" / "python"
PEER_SCRIPT = ROOT / "benchmarks" / "peer_worker.py"
SCHEMAS = {
    "jobq": "bench_worker_jobq",
    "bare": "bench_worker_bare",
    "pgqueuer": "bench_worker_pgqueuer",
    "procrastinate": "bench_worker_procrastinate",
}
MYSQL_DATABASE = "bench_worker_jobq"
PROBE_ID = 987_654_321_987
PROBE_ATTEMPT = 7_654_321
# The targets speak of batch 100: judge there when it was run.
JUDGED_CONCURRENCY = 100
TARGET_PEER = 3.0
TARGET_BARE = 0.60
TARGET_P50 = 0.005
# Lines of a failed worker's stderr to show.
STDERR_TAIL = 200


def log(message: str) -> None:
    """Write a progress line to stderr (stdout is kept for the report)."""
    print(message, file=sys.stderr, flush=True)


@dataclass
class Drain:
    """One timed drain: ``tasks`` run by one process of ``queue`` in ``seconds``."""

    queue: str
    database: str
    concurrency: int
    tasks: int
    seconds: float
    note: str = ""

    @property
    def rate(self) -> float:
        """Jobs per second, spawn to exit."""
        return self.tasks / self.seconds


@dataclass
class Latency:
    """Enqueue->start latencies, in seconds, of one queue."""

    queue: str
    samples: list[float]
    note: str = ""

    def pct(self, p: float) -> float:
        """The nearest-rank ``p``th percentile of the samples."""
        xs = sorted(self.samples)
        return xs[min(len(xs) - 1, max(0, round(p / 100 * len(xs)) - 1))]


@dataclass
class WorkerRun:
    """A jobq worker process that exited 0: its wall time and what it wrote to stderr."""

    seconds: float
    stderr_lines: int
    stderr_bytes: int


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


def judged_concurrency(concurrencies: list[int]) -> int:
    """The concurrency the targets are judged at: 100 if it was run, else the largest."""
    return JUDGED_CONCURRENCY if JUDGED_CONCURRENCY in concurrencies else max(concurrencies)


# --- jobq ------------------------------------------------------------------------------


def worker_env(url: str) -> dict[str, str]:
    """Our environment, with jobq's database at ``url`` and the checkout importable."""
    env = dict(os.environ)
    env["JOBQ_DATABASE_URL"] = url
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def jobq_worker_cmd(*options: str) -> list[str]:
    """The command line of a jobq worker running benchmarks/noop_app.py."""
    return [sys.executable, "-m", "jobq.cli", "worker", "--app", APP_PATH, *options]


def fill(store: jobq.Store, task: str, n: int) -> None:
    """Empty the tasks table, then enqueue ``n`` runs of ``task`` and ANALYZE."""
    reset(store)
    store.enqueue_many(task, [{"n": i} for i in range(n)])
    analyze(store)


def show_tail(stderr: IO[bytes], what: str) -> None:
    """Print the last lines written to the file ``stderr`` to our stderr."""
    stderr.seek(0)
    lines = stderr.read().decode(errors="replace").splitlines()
    log(f"--- {what}: last {min(len(lines), STDERR_TAIL)} of {len(lines)} stderr lines ---")
    for line in lines[-STDERR_TAIL:]:
        log(line)


def run_worker(url: str, options: list[str], timeout: float, *, forward: bool) -> WorkerRun:
    """Run one jobq worker to its exit, timed from spawn to exit.

    Its stderr goes to a temporary file; afterwards it is copied to ours if ``forward``
    (runs at --log-level warning write only what needs attention). If the worker fails
    or times out, its last stderr lines are printed and RuntimeError is raised.
    """
    cmd = jobq_worker_cmd(*options)
    with tempfile.TemporaryFile() as stderr:
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                cmd, cwd=ROOT, env=worker_env(url), stderr=stderr, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            show_tail(stderr, "jobq worker timed out")
            raise RuntimeError(f"jobq worker timed out after {timeout} s: {cmd}") from None
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            show_tail(stderr, f"jobq worker exited {proc.returncode}")
            raise RuntimeError(f"jobq worker exited {proc.returncode}: {cmd}")
        size = os.fstat(stderr.fileno()).st_size
        stderr.seek(0)
        text = stderr.read().decode(errors="replace")
    if forward and text:
        log(text.rstrip("\n"))
    return WorkerRun(seconds, text.count("\n"), size)


def jobq_drain(
    url: str,
    database: str,
    queue: str,
    task: str,
    n: int,
    concurrency: int,
    timeout: float,
    *,
    task_logs: bool = False,
) -> Drain:
    """Time one jobq worker draining ``n`` runs of ``task``; check every row ended done.

    With ``task_logs`` the worker keeps its default INFO logging (one line per task start
    and end), else it runs at --log-level warning.
    """
    store = jobq.Store(url)
    try:
        store.migrate()
        options = ["--burst", "--concurrency", str(concurrency)]
        if not task_logs:
            options += ["--log-level", "warning"]
        # Start-up and exit on an empty queue: imports, connecting, registering.
        reset(store)
        empty = run_worker(url, options, timeout, forward=not task_logs).seconds
        fill(store, task, n)
        log(f"{queue}/{database}: draining {n} tasks at concurrency {concurrency}")
        run = run_worker(url, options, timeout, forward=not task_logs)
        counts = status_counts(store)
        if counts != {"done": n}:
            raise RuntimeError(f"{queue}/{database}: after the drain the table holds {counts}")
        with store.engine.connect() as conn:
            span = conn.exec_driver_sql(
                "SELECT min(started_at), max(finished_at) FROM jobq_tasks"
            ).one()
        span_s = (span[1] - span[0]).total_seconds() if database != "SQLite" else None
        # MySQL has no LISTEN / NOTIFY: its workers poll.
        note = "polling; " if database in ("MariaDB", "MySQL") else ""
        note += f"empty-queue start+exit {empty:.2f} s"
        if span_s:
            note += f"; first start to last finish {span_s:.2f} s ({n / span_s:,.0f}/s)"
        if task_logs:
            note += (
                f"; stderr to a file: {run.stderr_lines:,} lines, {run.stderr_bytes / 1e6:.1f} MB"
            )
        return Drain(queue, database, concurrency, n, run.seconds, note)
    finally:
        store.dispose()


def log_cost(logged: Drain, quiet: Drain) -> str:
    """A note comparing a drain with task logs on to the same drain without them."""
    change = 100 * (logged.rate / quiet.rate - 1)
    return f"; {change:+.0f}% jobs/s against {quiet.queue} at --log-level warning"


def jobq_latency(url: str, samples: int, spacing: float, timeout: float) -> Latency:
    """Enqueue->start latency of an idle jobq worker woken by LISTEN/NOTIFY."""
    store = jobq.Store(url)
    store.migrate()
    reset(store)
    cmd = jobq_worker_cmd("--concurrency", "10", "--poll-interval", "10", "--log-level", "warning")
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=worker_env(url), stderr=stderr)
        try:
            time.sleep(3.0)  # imported, registered, LISTENing, found nothing: now idle
            for i in range(samples):
                store.enqueue(SYNC_TASK, {"n": i})
                time.sleep(spacing)
            deadline = time.monotonic() + timeout
            while status_counts(store).get("done", 0) < samples:
                if time.monotonic() > deadline or proc.poll() is not None:
                    show_tail(stderr, "jobq latency worker")
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
            if proc.returncode not in (0, None, -signal.SIGTERM, -signal.SIGKILL):
                show_tail(stderr, f"jobq latency worker exited {proc.returncode}")
            store.dispose()


# --- bare SQL --------------------------------------------------------------------------


def capture_mode(stmt: Statement) -> str:
    """How the Store runs ``stmt``: in a transaction or on its own in autocommit."""
    return "in a transaction" if stmt.transactional else "autocommit"


def bare_loop(url: str, batch: int) -> dict[str, Any]:
    """The --bare-child side: drain the queued rows at ``url`` with the Store's own SQL.

    Captures up to ``batch`` rows with the Store's capture statement, then marks them
    done with one execute of its set_statuses statement, until a capture comes back
    empty. Returns the loop's own seconds, the rows captured and the transaction modes.
    """
    store = jobq.Store(url)
    try:
        capture = capture_statement(store, lambda: store.capture(batch, worker_id="bench"))
        probe = [Completion(PROBE_ID, PROBE_ATTEMPT, Status.DONE)]
        record = capture_statement(store, lambda: store.set_statuses(probe))
        bind = record.binder(record.slot_of(encode_completions(probe, store.backoff)))
    finally:
        store.dispose()
    cap_conn = connect_postgres(url, autocommit=not capture.transactional)
    rec_conn = connect_postgres(url, autocommit=not record.transactional)
    try:
        cap_cur, rec_cur = cap_conn.cursor(), rec_conn.cursor()
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
            ends = [
                {"id": row[i], "attempt": row[a], "status": "done", "result": None,
                 "error": None, "delay": 0.0}
                for row in rows
            ]  # fmt: skip
            rec_cur.execute(record.sql, bind(json.dumps(ends)))
            if record.transactional:
                rec_conn.commit()
            done += len(rows)
        seconds = time.perf_counter() - start
    finally:
        cap_conn.close()
        rec_conn.close()
    return {
        "seconds": seconds,
        "captured": done,
        "capture": capture_mode(capture),
        "record": capture_mode(record),
    }


def bare_drain(url: str, n: int, batch: int, timeout: float) -> Drain:
    """Time the bare loop as a child process from spawn to exit; check every row is done."""
    store = jobq.Store(url)
    try:
        store.migrate()
        fill(store, SYNC_TASK, n)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--bare-child", url]
        cmd += ["--batch", str(batch)]
        log(f"bare SQL: draining {n} tasks, capture {batch}")
        start = time.perf_counter()
        out = subprocess.run(
            cmd, cwd=ROOT, env=worker_env(url), check=True, timeout=timeout,
            stdout=subprocess.PIPE, text=True,
        ).stdout  # fmt: skip
        seconds = time.perf_counter() - start
        result = json.loads(out.strip().splitlines()[-1])
        counts = status_counts(store)
        if result["captured"] != n or counts != {"done": n}:
            raise RuntimeError(f"bare drain: {result['captured']} captured, table holds {counts}")
        loop_s = result["seconds"]
        note = (
            f"capture {batch} ({result['capture']}) + one set-based completion "
            f"({result['record']}); loop alone {loop_s:.2f} s ({n / loop_s:,.0f}/s)"
        )
        return Drain(BARE_ROW, "PostgreSQL", batch, n, seconds, note)
    finally:
        store.dispose()


# --- peers -----------------------------------------------------------------------------


def peer(queue: str, action: str, dsn: str, timeout: float, **options: Any) -> dict[str, Any]:
    """Run one peer_worker.py action in the peers' virtualenv; its JSON result."""
    cmd = [str(PEERS_PYTHON), str(PEER_SCRIPT), queue, action, "--dsn", dsn]
    for key, value in options.items():
        cmd += [f"--{key}", str(value)]
    env = dict(os.environ, PGQUEUER_PREFIX="bench_")  # its own tables and NOTIFY channel
    out = subprocess.run(
        cmd, cwd=ROOT, env=env, check=True, timeout=timeout, stdout=subprocess.PIPE, text=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def peer_drain(queue: str, dsn: str, n: int, concurrency: int, timeout: float) -> Drain:
    """Time one peer worker process draining ``n`` no-op jobs; check it ran them all."""
    peer(queue, "setup", dsn, timeout)
    peer(queue, "enqueue", dsn, timeout, tasks=n)
    log(f"{queue}: draining {n} tasks at concurrency {concurrency}")
    start = time.perf_counter()
    result = peer(queue, "drain", dsn, timeout, concurrency=concurrency)
    seconds = time.perf_counter() - start
    if result["ran"] != n:
        raise RuntimeError(f"{queue}: ran {result['ran']} of {n}")
    note = f"worker call alone {result['seconds']:.2f} s ({n / result['seconds']:,.0f}/s)"
    return Drain(queue, "PostgreSQL", concurrency, n, seconds, note)


def pgqueuer_latency(dsn: str, samples: int, spacing: float, timeout: float) -> Latency:
    """Enqueue->start latency of an idle PGQueuer worker woken by LISTEN/NOTIFY."""
    peer("pgqueuer", "setup", dsn, timeout)
    result = peer("pgqueuer", "latency", dsn, timeout, samples=samples, spacing=spacing)
    if result["ran"] != samples or len(result["latencies"]) != samples:
        raise RuntimeError(f"pgqueuer latency: ran {result['ran']} of {samples}")
    return Latency("pgqueuer", result["latencies"])


# --- report ----------------------------------------------------------------------------


def report(
    drains: list[Drain], bare: Drain | None, latencies: list[Latency], args: argparse.Namespace
) -> bool:
    """Print the Markdown report; whether no target measured was missed."""
    judged = judged_concurrency(args.concurrency)
    pgq = {d.concurrency: d for d in drains if d.queue == "pgqueuer"}
    candidates = [
        d for d in drains
        if d.queue in (SYNC_ROW, ASYNC_ROW) and d.database == "PostgreSQL"
        and d.concurrency == judged
    ]  # fmt: skip
    best = max(candidates, key=lambda d: d.rate, default=None)
    levels = ", ".join(str(c) for c in args.concurrency)
    print(f"\n### bench_worker.py ({args.tasks:,} no-op tasks, concurrency {levels})\n")
    print(f"jobq at {git_state()}; Python {platform.python_version()}, {os.cpu_count()} cores\n")
    print(
        "| queue | database | concurrency | tasks | seconds | jobs/s | ratio to PGQueuer | notes |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---|")
    # Stable sort: each concurrency's rows stay in run order; the bare loop comes last.
    for d in [*sorted(drains, key=lambda d: d.concurrency), *([bare] if bare else [])]:
        peer_row = pgq.get(d.concurrency)
        ratio = f"{d.rate / peer_row.rate:.2f}" if peer_row else "n/a"
        print(
            f"| {d.queue} | {d.database} | {d.concurrency} | {d.tasks:,} | {d.seconds:.2f} "
            f"| {d.rate:,.0f} | {ratio} | {d.note} |"
        )
    if bare and best:
        print(
            f"| jobq / bare SQL | PostgreSQL | {judged} | | | | | {best.queue} = "
            f"{100 * best.rate / bare.rate:.0f}% of the bare loop at batch {bare.concurrency} |"
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
    row = f", with jobq's better PostgreSQL row there: {best.queue}" if best else ""
    print(f"\nTargets, judged at concurrency {judged}{row}:\n")
    ok = True

    def target(text: str, met: bool | None, detail: str) -> None:
        nonlocal ok
        verdict = "not measured" if met is None else ("met" if met else "NOT met")
        ok = ok and met is not False
        print(f"- {text}: **{verdict}** ({detail})")

    peer_row = pgq.get(judged)
    if best and peer_row:
        r = best.rate / peer_row.rate
        target("drain at least 3x PGQueuer's jobs/s", r >= TARGET_PEER, f"{r:.2f}x")
    else:
        target("drain at least 3x PGQueuer's jobs/s", None, "needs jobq and pgqueuer")
    if best and bare:
        r = best.rate / bare.rate
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


def run_jobq(url: str, args: argparse.Namespace) -> list[Drain]:
    """jobq's drains at each concurrency: PostgreSQL sync, async, async + logs; SQLite
    sync; MariaDB / MySQL sync and async (unless --no-mysql)."""
    jurl = in_schema(url, SCHEMAS["jobq"])
    n, timeout = args.tasks, args.timeout
    murl = None if args.no_mysql else mysql_database(args.mysql_url, MYSQL_DATABASE)
    mysql_name = mysql_server(murl) if murl else ""
    drains: list[Drain] = []
    try:
        for conc in args.concurrency:
            sync = jobq_drain(jurl, "PostgreSQL", SYNC_ROW, SYNC_TASK, n, conc, timeout)
            quiet = jobq_drain(jurl, "PostgreSQL", ASYNC_ROW, ASYNC_TASK, n, conc, timeout)
            logged = jobq_drain(
                jurl, "PostgreSQL", LOGS_ROW, ASYNC_TASK, n, conc, timeout, task_logs=True
            )
            logged.note += log_cost(logged, quiet)
            with tempfile.TemporaryDirectory() as tmp:
                lite_url = sqlite_url(os.path.join(tmp, "bench.db"))
                lite = jobq_drain(lite_url, "SQLite", SYNC_ROW, SYNC_TASK, n, conc, timeout)
            drains += [sync, quiet, logged, lite]
            if murl:
                drains += [
                    jobq_drain(murl, mysql_name, SYNC_ROW, SYNC_TASK, n, conc, timeout),
                    jobq_drain(murl, mysql_name, ASYNC_ROW, ASYNC_TASK, n, conc, timeout),
                ]
    finally:
        if murl:
            drop_mysql_database(args.mysql_url, MYSQL_DATABASE)
    return drains


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--mysql-url", default=DEFAULT_MYSQL_URL)
    parser.add_argument("--no-mysql", action="store_true", help="skip the MariaDB / MySQL drains")
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--only", choices=["jobq", "pgqueuer", "procrastinate"])
    parser.add_argument("--latency-samples", type=int, default=200)
    parser.add_argument("--spacing", type=float, default=0.02, help="seconds between enqueues")
    parser.add_argument(
        "--concurrency", type=concurrency_list, default=[10, 100],
        help="comma-separated; every drain runs once per value (default 10,100)",
    )  # fmt: skip
    parser.add_argument("--batch", type=int, default=100, help="the bare loop's capture limit")
    parser.add_argument("--timeout", type=float, default=600, help="per subprocess, seconds")
    # The bare loop's child process: drain the tasks at URL, print JSON on stdout.
    parser.add_argument("--bare-child", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_child:
        print(json.dumps(bare_loop(args.bare_child, args.batch)), flush=True)
        return 0
    url = args.postgres_url
    for option, value in (("--postgres-url", url), ("--mysql-url", args.mysql_url)):
        if sa.make_url(value).host not in ("127.0.0.1", "localhost", "::1"):
            parser.error(f"loopback only: {option} must point at 127.0.0.1")
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
            drains += run_jobq(url, args)
            burl = in_schema(url, SCHEMAS["bare"])
            bare = bare_drain(burl, args.tasks, args.batch, args.timeout)
            log("jobq: latency")
            jurl = in_schema(url, SCHEMAS["jobq"])
            latencies.append(jobq_latency(jurl, args.latency_samples, args.spacing, args.timeout))
        for queue in ("pgqueuer", "procrastinate"):
            if queue not in wanted:
                continue
            for conc in args.concurrency:
                drop_schema(url, SCHEMAS[queue])  # fresh tables for every drain
                dsn = psycopg_conninfo(in_schema(url, SCHEMAS[queue]))
                drains.append(peer_drain(queue, dsn, args.tasks, conc, args.timeout))
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
