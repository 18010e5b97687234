"""scale_out.py's pieces for one run: worker groups in namespaces, what is sampled while
they work, and what their rows say afterwards.

The benchmark's own sessions of the measured database (enqueues, polls for the end of a
phase, the registration count) carry ``application_name=jobqbench`` and are left out of
every count of server connections. The counts are read from the server's own ``postgres``
database (benchmarks/_bouncer.py's Server), never from the measured one.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import sqlalchemy as sa

from benchmarks._bouncer import Console, Server, wait_for
from benchmarks._machine import Poller
from benchmarks._netns import Namespace
from benchmarks.harness import (
    ROOT,
    jobq_worker_cmd,
    psycopg_conninfo,
    stop,
    tail,
    worker_env,
)

APPLICATION = "jobqbench"  # application_name of the benchmark's own sessions


def own_url(url: str) -> str:
    """``url`` with the benchmark's application_name (left out of the counts)."""
    u = sa.make_url(url).update_query_dict({"application_name": APPLICATION})
    return u.render_as_string(hide_password=False)


# --- worker groups -----------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """One ``jobq worker --processes N`` command in one namespace."""

    namespace: Namespace
    processes: int
    url: str  # JOBQ_DATABASE_URL, at the namespace's host end
    listen_url: str | None = None  # --listen-url (through PgBouncer)
    queue: str | None = None  # --queues (None: every queue)
    concurrency: int | None = None  # --concurrency (None: jobq's default)

    def argv(self) -> list[str]:
        """The command, run inside the namespace."""
        return self.namespace.exec(jobq_worker_cmd(
            "--log-level", "warning", "--processes", str(self.processes),
            *(["--concurrency", str(self.concurrency)] if self.concurrency else []),
            *(["--queues", self.queue] if self.queue else []),
            *(["--listen-url", self.listen_url] if self.listen_url else []),
        ))  # fmt: skip


class Fleet:
    """Worker groups started together; ``stop`` ends them (SIGTERM, which a supervisor
    passes on, then SIGKILL after 40 s: processes.stop). Each group's stderr goes to a
    temporary file, read and deleted by ``stop``."""

    def __init__(self, groups: Sequence[Group], pycache: str, what: str) -> None:
        self.groups, self.what = list(groups), what
        self.procs: list[subprocess.Popen[bytes]] = []
        self.stderrs: list[str] = []  # paths
        try:
            for group in self.groups:
                fd, path = tempfile.mkstemp(prefix="jobq-scale-stderr-")
                self.stderrs.append(path)
                env = worker_env(group.url, pycache)
                try:
                    self.procs.append(
                        subprocess.Popen(
                            group.argv(), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=fd
                        )
                    )
                finally:
                    os.close(fd)  # the child has its own
        except BaseException:
            self.stop()
            raise

    @property
    def processes(self) -> int:
        return sum(g.processes for g in self.groups)

    def check_alive(self) -> None:
        """Raise (showing its stderr) if a group's command has exited."""
        for i, proc in enumerate(self.procs):
            if proc.poll() is not None:
                with open(self.stderrs[i], "rb") as stderr:
                    tail(stderr, f"{self.what}: group {i} exited {proc.returncode}")
                raise RuntimeError(f"{self.what}: group {i} exited {proc.returncode}")

    def stop(self) -> list[str]:
        """Stop every group; what they wrote to stderr (at --log-level warning)."""
        stop(self.procs)
        lines = []
        for path in self.stderrs:
            lines += Path(path).read_bytes().decode(errors="replace").strip().splitlines()
            os.unlink(path)
        self.stderrs = []
        return lines


# --- the benchmark's own session -----------------------------------------------------------


@dataclass
class Phase:
    """What the rows, and the CPU readings around it, say of one phase of a run."""

    queue: str
    tasks: int  # enqueued
    seconds: float  # the wall-clock window the CPU figures are over
    span: float = 0.0  # first capture to last end, by the rows (database clock)
    p50: float = 0.0  # latency, seconds: enqueue to ``latency_to``
    p99: float = 0.0
    worst: float = 0.0
    server_cpu: float = 0.0  # seconds of the PostgreSQL tree over the window
    bouncer_cpu: float = 0.0  # seconds of PgBouncer over the window
    workers_cpu: float = 0.0  # seconds of the worker commands' trees over the window
    own_cpu: float = 0.0  # seconds of the benchmark's own process (enqueues, samples)
    machine_cpu: float = 0.0  # seconds all cores were busy over the window
    machine_busy: float = 0.0  # share of all cores busy over the window
    #: Seconds the cores were busy with other work than the benchmark's (another user's
    #: tests, say): the machine's less all of the above.
    others_cpu: float = 0.0
    enqueue_rate: float = 0.0  # tasks a second the enqueues kept up (steady phases)
    reltuples: float = -1.0  # the planner's rows of jobq_tasks as the workers began (backlog)
    #: Capture statements that took tasks: distinct started_at (a capture stamps its
    #: tasks with its transaction's now()).
    captures: int = 0
    problems: list[str] = field(default_factory=list)  # tasks lost or run twice

    @property
    def rate(self) -> float:
        """Jobs a second over the busy span."""
        return self.tasks / self.span if self.span > 0 else float("nan")


class Watch:
    """The benchmark's own connection to the measured database (``application_name``
    jobqbench): registrations, the end of a phase, and the audit of its rows."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(psycopg_conninfo(own_url(url)), autocommit=True)

    def one(self, sql: str, params: Sequence[object] = ()) -> tuple[object, ...]:
        row = self.conn.execute(sql, params).fetchone()  # type: ignore[arg-type]
        assert row is not None
        return tuple(row)

    def registered(self) -> int:
        """Workers in jobq_workers now."""
        return int(self.one("SELECT count(*) FROM jobq_workers")[0])  # type: ignore[call-overload]

    def reltuples(self) -> float:
        """The planner's row count of jobq_tasks now (-1: never analysed since emptied)."""
        sql = "SELECT reltuples FROM pg_class WHERE oid = 'jobq_tasks'::regclass"
        return float(self.one(sql)[0])  # type: ignore[arg-type]

    def pending(self, queue: str) -> bool:
        """Whether a task of ``queue`` is not done yet."""
        sql = "SELECT EXISTS (SELECT 1 FROM jobq_tasks WHERE queue_id = %s AND status <> 'done')"
        return bool(self.one(sql, [queue])[0])

    def audit(self, phase: Phase, latency_to: str) -> None:
        """Fill ``phase`` from its rows: span and latency (``created_at`` to ``latency_to``,
        started_at or finished_at); note a task lost (missing, or not done) or run more
        than once (attempt above 1)."""
        col = {"started_at": "started_at", "finished_at": "finished_at"}[latency_to]
        n, undone, again, never, span, p50, p99, worst, captures = self.one(
            "SELECT count(*), count(*) FILTER (WHERE status <> 'done'),"
            " count(*) FILTER (WHERE attempt > 1), count(*) FILTER (WHERE attempt < 1),"
            " extract(epoch FROM max(finished_at) - min(started_at)),"
            f" percentile_cont(0.5) WITHIN GROUP (ORDER BY {col} - created_at),"
            f" percentile_cont(0.99) WITHIN GROUP (ORDER BY {col} - created_at),"
            f" max({col} - created_at), count(DISTINCT started_at)"
            " FROM jobq_tasks WHERE queue_id = %s",
            [phase.queue],
        )
        if n != phase.tasks:
            phase.problems.append(f"{phase.queue}: {n} rows for {phase.tasks} tasks enqueued")
        if undone:
            phase.problems.append(f"{phase.queue}: {undone} tasks not done")
        if again:
            phase.problems.append(f"{phase.queue}: {again} tasks ran more than once")
        if never:
            phase.problems.append(f"{phase.queue}: {never} tasks never captured")
        phase.span = float(span or 0)  # type: ignore[arg-type]
        phase.captures = int(captures or 0)  # type: ignore[call-overload]
        phase.p50, phase.p99, phase.worst = (
            v.total_seconds() if v is not None else float("nan")  # type: ignore[union-attr]
            for v in (p50, p99, worst)
        )

    def wait_registered(self, n: int, fleets: Sequence[Fleet], timeout: float) -> float:
        """Until ``n`` workers registered: the seconds (raises if a group died)."""

        def ready() -> bool:
            for fleet in fleets:
                fleet.check_alive()
            return self.registered() >= n

        return wait_for(ready, f"{n} workers registered", timeout=timeout, every=0.2)

    def wait_done(self, queue: str, timeout: float) -> bool:
        """Until every task of ``queue`` is done, looking every 0.1 s: False past
        ``timeout`` (the audit then counts what is missing)."""
        deadline = time.monotonic() + timeout
        while self.pending(queue):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)  # the poll's period
        return True

    def close(self) -> None:
        self.conn.close()


# --- sampling ------------------------------------------------------------------------------


@dataclass
class Peaks:
    """The most of each count seen at a sample."""

    sessions: int = 0  # server sessions of the measured database, ours left out
    listening: int = 0  # of those, whose last statement was a LISTEN
    addresses: int = 0  # distinct client addresses among them
    bouncer_clients: int = 0  # SHOW CLIENTS (through PgBouncer)
    bouncer_servers: int = 0  # SHOW SERVERS
    samples: int = 0


# The measured database's client sessions, ours left out: all, LISTENing, addresses.
_SESSIONS = (
    "SELECT count(*), count(*) FILTER (WHERE query ILIKE 'listen%%'),"
    " count(DISTINCT client_addr) FROM pg_stat_activity"
    " WHERE datname = %s AND backend_type = 'client backend'"
    " AND application_name <> %s AND pid <> pg_backend_pid()"
)


class Sampler(Poller):
    """Every ``every`` s from a thread, while the block runs: the counts of ``Peaks``."""

    def __init__(self, server: Server, console: Console, every: float = 0.2) -> None:
        super().__init__(every, join_timeout=30)
        self.server, self.console = server, console
        self.peaks = Peaks()

    def __enter__(self) -> Peaks:
        super().__enter__()
        return self.peaks

    def look(self) -> None:
        """The counts now, kept where they are the most so far."""
        p = self.peaks
        row = self.server.conn.execute(_SESSIONS, [self.server.database, APPLICATION]).fetchone()
        sessions, listening, addresses = (int(x) for x in row or (0, 0, 0))
        p.sessions, p.listening = max(p.sessions, sessions), max(p.listening, listening)
        p.addresses = max(p.addresses, addresses)
        p.bouncer_clients = max(p.bouncer_clients, len(self.console.clients()))
        p.bouncer_servers = max(p.bouncer_servers, len(self.console.servers()))
        p.samples += 1


# --- what a run is, and what it found ---------------------------------------------------


@dataclass(frozen=True)
class Point:
    """One run's workers: ``processes`` busy ones reaching the database by ``mode``, and
    ``idle`` idle ones through PgBouncer (with --listen-url if ``idle_listen``)."""

    mode: str  # direct | pooled
    processes: int
    section: str = "scale"  # or "idle": the busy ones alone, or beside idle ones
    idle: int = 0
    idle_listen: bool = False

    @property
    def label(self) -> str:
        label = f"{self.mode}, {self.processes} process(es)"
        if self.idle:
            label += f" + {self.idle} idle ({'--listen-url' if self.idle_listen else 'polling'})"
        return label


@dataclass
class IdleWindow:
    """The idle workers alone, over a window after they settled."""

    workers: int
    seconds: float
    ready_s: float  # spawn to all registered
    transactions: int  # pg_stat_database's delta for the measured database
    bouncer_transactions: int  # SHOW STATS' total_xact_count delta
    bouncer_queries: int
    server_cpu: float  # seconds
    bouncer_cpu: float
    peaks: Peaks


@dataclass
class Run:
    """One run of one point."""

    point: Point
    round: int
    shape: str  # namespaces x --processes
    ready_s: float  # spawn to every busy worker registered (and listening)
    backlog: Phase
    steady: Phase | None
    peaks: Peaks
    idle: IdleWindow | None = None
    others: float | None = None  # share of the CPU others kept busy just before
    stderr_lines: int = 0  # what the workers wrote to stderr at --log-level warning
    stderr: list[str] = field(default_factory=list)  # the first of those lines (a few)
