"""bench_worker.py's measurements of worker processes: jobq's and the peers' drains and latency.

Every worker is a process of its own, timed from spawn to exit: jobq as ``python -m
jobq.cli worker --app benchmarks.noop_app:app --burst``, the peers through
``peer_worker.py`` in benchmarks/.venv-peers (see peers.sh).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jobq
from benchmarks._backend_cpu import BackendCpu, children_cpu, named
from benchmarks.harness import (
    PEERS_PYTHON,
    ROOT,
    SYNC_TASK,
    analyze,
    jobq_worker_cmd,
    log,
    reset,
    run_commands,
    status_counts,
    stop,
    tail,
    worker_env,
)

PEER_SCRIPT = ROOT / "benchmarks" / "peer_worker.py"
# Lines of a failed worker's stderr to show.
STDERR_TAIL = 200
# Jobs per enqueue call when filling a peer's queue before a drain (untimed).
PEER_FILL_BATCH = 5000


@dataclass
class Drain:
    """One timed drain: ``tasks`` run by one process of ``queue`` in ``seconds``."""

    queue: str
    database: str
    concurrency: int
    tasks: int
    seconds: float
    note: str = ""
    #: Which kind of row this is, for the targets: "jobq", "jobq-quiet", "pgqueuer-asyncpg",
    #: "pgqueuer-psycopg", "procrastinate", "bare".
    kind: str = ""
    #: CPU seconds of the worker process (spawn to exit) and of the PostgreSQL backends
    #: serving it (see _backend_cpu.py); None where not measured.
    worker_cpu: float | None = None
    server_cpu: float | None = None

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
    worker_cpu: float = 0.0
    server_cpu: float | None = None


# --- jobq ------------------------------------------------------------------------------


def fill(store: jobq.Store, task: str, n: int) -> None:
    """Empty the tasks table, then enqueue ``n`` runs of ``task`` and ANALYZE."""
    reset(store)
    store.enqueue_many(task, [{"n": i} for i in range(n)])
    analyze(store)


def run_jobq(
    url: str, cmd: list[str], timeout: float, *, forward: bool, server: bool = False
) -> WorkerRun:
    """Run one jobq command to its exit, timed from spawn to exit, with its CPU time (and
    with ``server``, on PostgreSQL, its backends').

    Its stderr goes to a temporary file; afterwards it is copied to ours if ``forward``
    (runs at --log-level warning write only what needs attention). If the command fails
    or times out, its last stderr lines are printed and RuntimeError is raised.
    """
    postgres = server and url.startswith("postgresql")
    env = worker_env(named(url) if postgres else url)
    before = children_cpu()
    with BackendCpu(url) if postgres else contextlib.nullcontext() as backends:
        seconds, text = run_commands([cmd], env, timeout, "jobq", STDERR_TAIL)
    if forward and text:
        log(text.rstrip("\n"))
    cpu = children_cpu() - before
    server_cpu = backends.seconds if backends is not None else None
    return WorkerRun(seconds, text.count("\n"), len(text.encode()), cpu, server_cpu)


def jobq_drain(
    url: str,
    database: str,
    queue: str,
    task: str,
    n: int,
    concurrency: int,
    timeout: float,
    *,
    task_logs: bool,
    options: Sequence[str] = (),
) -> Drain:
    """Time one jobq worker draining ``n`` runs of ``task``; check every row ended done.

    With ``task_logs`` the worker keeps its default INFO logging (one line per task start
    and end, its stderr going to a temporary file), else it runs at --log-level warning.
    ``options`` go to the worker's command line after the others.
    """
    store = jobq.Store(url)
    try:
        store.migrate()
        given = ["--burst", "--concurrency", str(concurrency)]
        if not task_logs:
            given += ["--log-level", "warning"]
        cmd = jobq_worker_cmd(*given, *options)
        # Start-up and exit on an empty queue: imports, connecting, registering.
        reset(store)
        empty_run = run_jobq(url, cmd, timeout, forward=not task_logs)
        empty = empty_run.seconds
        fill(store, task, n)
        log(f"{queue}/{database}: draining {n} tasks at concurrency {concurrency}")
        run = run_jobq(url, cmd, timeout, forward=not task_logs, server=True)
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
        note += f"empty-queue start+exit {empty:.2f} s ({empty_run.worker_cpu:.2f} s CPU)"
        if span_s:
            note += f"; first start to last finish {span_s:.2f} s ({n / span_s:,.0f}/s)"
        if task_logs:
            note += (
                f"; stderr to a file: {run.stderr_lines:,} lines, {run.stderr_bytes / 1e6:.1f} MB"
            )
        kind = "jobq" if task_logs else "jobq-quiet"
        return Drain(
            queue, database, concurrency, n, run.seconds, note, kind, run.worker_cpu,
            run.server_cpu,
        )  # fmt: skip
    finally:
        store.dispose()


def jobq_latency(url: str, samples: int, spacing: float, timeout: float) -> Latency:
    """Enqueue->start latency of an idle jobq worker woken by LISTEN/NOTIFY, logs on."""
    store = jobq.Store(url)
    store.migrate()
    reset(store)
    cmd = jobq_worker_cmd("--concurrency", "10", "--poll-interval", "10")
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
                    tail(stderr, "jobq latency worker", STDERR_TAIL)
                    raise RuntimeError(f"jobq latency: only {status_counts(store)} after waiting")
                time.sleep(0.05)
            with store.engine.connect() as conn:
                rows = conn.exec_driver_sql(
                    "SELECT extract(epoch FROM started_at - created_at) FROM jobq_tasks"
                ).all()
            return Latency("jobq (logs on)", [float(r[0]) for r in rows])
        finally:
            stop([proc], grace=30)
            if proc.returncode not in (0, -signal.SIGTERM, -signal.SIGKILL):
                tail(stderr, f"jobq latency worker exited {proc.returncode}", STDERR_TAIL)
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


def peer_label(queue: str, driver: str | None) -> str:
    """The row label of a peer: PGQueuer names its driver."""
    return f"{queue} ({driver})" if driver else queue


def peer_drain(
    queue: str, driver: str | None, dsn: str, n: int, concurrency: int, timeout: float
) -> tuple[Drain, dict[str, Any]]:
    """Time one peer worker process draining ``n`` no-op jobs; check it ran them all.

    Also returns the versions the peer's setup reported. ``driver`` is PGQueuer's
    (asyncpg or psycopg); None for Procrastinate.
    """
    extra = {"driver": driver} if driver else {}
    versions = peer(queue, "setup", dsn, timeout, **extra)
    peer(queue, "enqueue", dsn, timeout, tasks=n, batch=PEER_FILL_BATCH, **extra)
    label = peer_label(queue, driver)
    log(f"{label}: draining {n} tasks at concurrency {concurrency}")
    start = time.perf_counter()
    before = children_cpu()
    with BackendCpu(dsn) as backends:
        result = peer(queue, "drain", named(dsn), timeout, concurrency=concurrency, **extra)
    seconds = time.perf_counter() - start
    worker_cpu = children_cpu() - before
    if result["ran"] != n:
        raise RuntimeError(f"{label}: ran {result['ran']} of {n}")
    note = f"worker call alone {result['seconds']:.2f} s ({n / result['seconds']:,.0f}/s)"
    if queue == "pgqueuer":
        note = f"batch_size={concurrency}; " + note
    else:
        note = f"concurrency={concurrency}; " + note
    kind = f"{queue}-{driver}" if driver else queue
    drain = Drain(
        label, "PostgreSQL", concurrency, n, seconds, note, kind, worker_cpu, backends.seconds
    )
    return drain, versions


def pgqueuer_latency(
    driver: str, dsn: str, samples: int, spacing: float, timeout: float
) -> Latency:
    """Enqueue->start latency of an idle PGQueuer worker woken by LISTEN/NOTIFY."""
    peer("pgqueuer", "setup", dsn, timeout, driver=driver)
    result = peer(
        "pgqueuer", "latency", dsn, timeout, samples=samples, spacing=spacing, driver=driver
    )
    if result["ran"] != samples or len(result["latencies"]) != samples:
        raise RuntimeError(f"pgqueuer latency: ran {result['ran']} of {samples}")
    return Latency(peer_label("pgqueuer", driver), result["latencies"])
