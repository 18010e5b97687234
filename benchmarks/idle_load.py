#!/usr/bin/env python
"""What idle workers cost the database: transactions, statements and connections.

``--workers`` (10) idle ``jobq worker`` processes (no tasks; benchmarks/noop_app.py's
app) are started at once, as separate commands or, with ``--processes``, as one ``jobq
worker --processes N`` group. Once every one has registered (N rows in jobq_workers) and,
where the configuration listens, N LISTEN sessions are open, the script lets ``--settle``
(11) s pass and then measures over ``--seconds`` (30). The settling leaves the workers'
start (schema check, registration, the first heartbeat and rescue) out of the window: an
idle session adds its counts to pg_stat_database up to 10 s late (see below), so those
of the start must all be in before the window opens.

- transactions per second a worker: the delta of ``xact_commit + xact_rollback`` of the
  database in pg_stat_database over the window, less the database's rate with no worker
  at all (a first window of the same kind, "background"), divided by N. A session
  flushes its counts to the statistics when it goes idle, at most once a second (else 10 s
  later): at a steady traffic the counts not yet flushed are alike at both ends of the
  window, so the delta is right on average, give or take a few transactions;
- server connections a worker: the database's client sessions in pg_stat_activity,
  sampled every ``--sample-every`` (1) s, divided by N (mean and most), with those whose
  last statement was a LISTEN and those that are PgBouncer's server connections (SHOW
  SERVERS' remote_pid) counted apart; through PgBouncer also its server connections
  (SHOW SERVERS) and the workers' client connections to it (SHOW CLIENTS);
- statements per second a worker, from pg_stat_statements (calls of the database's
  statements) if that extension is created in the ``--database-url`` database and loaded
  (shared_preload_libraries); skipped otherwise (the script installs nothing). Through
  PgBouncer, its count of queries (SHOW STATS' total_query_count) is given as well.

The script reads every figure from a connection to the server's own database of
``--database-url`` and from PgBouncer's admin console, never from the measured database:
none of its reads counts there (the background window shows what does anyway). It reads
jobq_workers on a connection of its own to the measured database only while waiting for
the registrations, and waits until that session is gone before the window opens.

Configurations (``--configs``, default all, run in this order, reversed every other one
of ``--rounds`` (1)):

- ``direct``: the server's own URL; each worker LISTENs on it (and polls as well);
- ``pooled``: through PgBouncer with ``?jobq_pooler=transaction``, no --listen-url: the
  workers poll for tasks;
- ``pooled-listen``: as ``pooled``, with ``--listen-url`` the server's own URL.

PgBouncer (Debian's 1.18, transaction pooling, ``--pool-size`` 20 server connections at
most) is started by tests/pgbouncer_server.py in front of a database of its own, created
on the ``--database-url`` server and dropped at the end. Before each configuration it
drops every connection (KILL, RESUME) and the script waits until the database has no
session left. Workers run at ``--log-level warning``; what they write to stderr is shown.

The report (stdout) is a table a configuration, with ``--label`` in its title; the
targets of the work to come are checked in its last column (under 1 transaction/s and at
most 2 server connections a worker). ``--save FILE`` appends the figures as JSON lines;
``--compare FILE`` prints the runs saved there beside this one's, to compare before and
after. Progress goes to stderr.

    .venv/bin/python benchmarks/idle_load.py --label before --save /tmp/idle.jsonl
    .venv/bin/python benchmarks/idle_load.py --processes --label before-processes
    .venv/bin/python benchmarks/idle_load.py --label after --compare /tmp/idle.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
import sqlalchemy as sa

import jobq
from benchmarks._bouncer import (
    ROOT,
    Console,
    Server,
    code_state,
    pgbouncer_version,
    wait_for,
)
from benchmarks._machine import load, others_busy
from benchmarks.harness import (
    DEFAULT_POSTGRES_URL,
    jobq_worker_cmd,
    log,
    psycopg_conninfo,
    run_commands,
    spread,
    stop,
    tail,
    worker_env,
)
from tests import pgbouncer_server

#: The targets of the work this is the baseline of, a worker.
TARGET_TRANSACTIONS = 1.0  # under this many transactions per second
TARGET_SESSIONS = 2.0  # at most this many server connections


# --- configurations --------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """How the idle workers reach the database."""

    key: str
    label: str
    pooled: bool  # through PgBouncer, with ?jobq_pooler=transaction
    listen_url: bool  # --listen-url the server's own URL

    @property
    def listens(self) -> bool:
        """Whether each worker keeps a LISTEN session (on the server's own URL)."""
        return not self.pooled or self.listen_url

    def url(self, bouncer: pgbouncer_server.Bouncer) -> str:
        return bouncer.pooled_url if self.pooled else bouncer.direct_url


CONFIGS = (
    Config("direct", "direct (LISTEN)", pooled=False, listen_url=False),
    Config("pooled", "PgBouncer, polling", pooled=True, listen_url=False),
    Config("pooled-listen", "PgBouncer + --listen-url", pooled=True, listen_url=True),
)


# --- one window ------------------------------------------------------------------------


@dataclass
class Window:
    """What the database saw over one measuring window of one configuration."""

    key: str
    round: int
    workers: int  # N: worker processes (0: the background window)
    seconds: float  # the window's length as measured
    transactions: int  # pg_stat_database's delta
    statements: int | None  # pg_stat_statements' calls (None: not available)
    bouncer_transactions: int  # SHOW STATS' total_xact_count delta (through PgBouncer)
    bouncer_queries: int  # SHOW STATS' total_query_count delta
    sessions: list[int] = field(default_factory=list)  # samples: the database's sessions
    listening: list[int] = field(default_factory=list)  # of those, LISTEN sessions
    bouncer_sessions: list[int] = field(default_factory=list)  # of those, PgBouncer's
    bouncer_servers: list[int] = field(default_factory=list)  # SHOW SERVERS rows
    bouncer_clients: list[int] = field(default_factory=list)  # SHOW CLIENTS rows
    ready_s: float = 0.0  # spawn to every worker registered (and listening)
    others: float | None = None  # share of the CPU others kept busy before it
    stderr: list[str] = field(default_factory=list)

    def rate(self, count: int | None) -> float | None:
        """``count`` a second of the window (None stays None)."""
        return None if count is None else count / self.seconds


class Statements:
    """pg_stat_statements' calls in the measured database, if the extension is there."""

    def __init__(self, server: Server, database: str) -> None:
        self.server, self.database = server, database
        self.missing = self._why_not()

    def _why_not(self) -> str | None:
        """Why the extension cannot be read (None: it can)."""
        admin = self.server.conn.info.dbname
        if "pg_stat_statements" not in self.server.setting("shared_preload_libraries"):
            return "pg_stat_statements is not in shared_preload_libraries"
        row = self.server.conn.execute(
            "SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'"
        ).fetchone()
        if row is None:
            return f"the extension pg_stat_statements is not created in database {admin}"
        try:
            self.calls()
        except psycopg.Error as error:
            return f"pg_stat_statements cannot be read: {str(error).splitlines()[0]}"
        return None

    def calls(self) -> int:
        """The calls of every statement of the measured database so far (top level)."""
        row = self.server.conn.execute(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = %s)",
            [self.database],
        ).fetchone()
        return int(row[0]) if row else 0

    def now(self) -> int | None:
        return None if self.missing else self.calls()


@dataclass
class Bench:
    """PgBouncer, the readers, the worker environment and the options."""

    bouncer: pgbouncer_server.Bouncer
    server: Server
    console: Console
    statements: Statements
    pycache: str
    args: argparse.Namespace

    def command(self, config: Config) -> list[str]:
        """The argv of one ``jobq worker`` of ``config`` (the URL goes in the environment)."""
        args = self.args
        return jobq_worker_cmd(
            "--log-level", args.log_level,
            *(["--concurrency", str(args.concurrency)] if args.concurrency else []),
            *(["--poll-interval", str(args.poll_interval)] if args.poll_interval else []),
            *(["--listen-url", self.bouncer.direct_url] if config.listen_url else []),
            *args.worker_arg,
        )  # fmt: skip

    def commands(self, config: Config) -> list[list[str]]:
        """The argv of each command to start: N workers, or one --processes N group."""
        if self.args.processes:
            return [[*self.command(config), "--processes", str(self.args.workers)]]
        return [self.command(config) for _ in range(self.args.workers)]

    def clean(self) -> None:
        """No session of the database left: PgBouncer drops its own, then we wait."""
        self.console.drop_connections()
        self.server.wait_until_empty()

    def measure(self, key: str, round_: int, workers: int, seconds: float) -> Window:
        """One window of ``seconds`` over whatever runs now."""
        window = Window(key, round_, workers, 0.0, 0, None, 0, 0)
        tx0, calls0, pgb0 = self.server.transactions(), self.statements.now(), self.console.stats()
        start = time.monotonic()
        end = start + seconds
        while True:
            self.sample(window)
            left = end - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(self.args.sample_every, left))  # the sampling period
        tx1, calls1, pgb1 = self.server.transactions(), self.statements.now(), self.console.stats()
        window.seconds = time.monotonic() - start
        window.transactions = tx1 - tx0
        if calls0 is not None and calls1 is not None:
            window.statements = calls1 - calls0
        window.bouncer_transactions = pgb1.get("total_xact_count", 0) - pgb0.get(
            "total_xact_count", 0
        )
        window.bouncer_queries = pgb1.get("total_query_count", 0) - pgb0.get("total_query_count", 0)
        return window

    def sample(self, window: Window) -> None:
        """Count the database's sessions, and PgBouncer's connections, once."""
        servers = self.console.servers()
        pids = {int(row["remote_pid"]) for row in servers if row.get("remote_pid")}
        backends = self.server.backends()
        window.sessions.append(len(backends))
        window.listening.append(sum(b.listening for b in backends))
        window.bouncer_sessions.append(sum(b.pid in pids for b in backends))
        window.bouncer_servers.append(len(servers))
        window.bouncer_clients.append(len(self.console.clients()))

    def warm_up(self) -> None:
        """One worker start on an empty queue, with --burst: fills the byte-code cache, so
        that the first configuration's start is not the slower one."""
        log("warm-up: one `jobq worker --burst` start on the empty queue")
        command = [*self.command(CONFIGS[0]), "--burst"]
        env = worker_env(self.bouncer.direct_url, self.pycache)
        run_commands([command], env, 120, "warm-up")

    def background(self) -> Window:
        """A window with no worker: what the database does without them."""
        self.clean()
        log(f"background: {self.args.background:g} s with no worker")
        return self.measure("background", 0, 0, self.args.background)

    def idle(self, config: Config, round_: int) -> Window:
        """Start the workers of ``config``, wait until they are all there, measure, stop."""
        what = f"round {round_ + 1}: {config.label}"
        self.clean()
        with contextlib.ExitStack() as files:
            commands = self.commands(config)
            stderrs = [files.enter_context(tempfile.TemporaryFile()) for _ in commands]
            others = others_busy()
            env = worker_env(config.url(self.bouncer), self.pycache)
            procs: list[subprocess.Popen[bytes]] = []
            try:
                spawned = time.monotonic()
                for command, stderr in zip(commands, stderrs, strict=True):
                    procs.append(
                        subprocess.Popen(
                            command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr
                        )
                    )
                self.wait_until_ready(config, procs, stderrs, what)
                ready = time.monotonic() - spawned
                log(f"  {what}: {self.args.workers} workers ready in {ready:.2f} s; settling")
                time.sleep(self.args.settle)  # leaves the first turn out: not a wait for it
                window = self.measure(config.key, round_, self.args.workers, self.args.seconds)
                self.check_alive(procs, stderrs, what)
            finally:
                stop(procs)
            window.ready_s, window.others = ready, others
            for stderr in stderrs:
                stderr.seek(0)
                window.stderr += stderr.read().decode(errors="replace").strip().splitlines()
        if window.stderr:
            log(f"--- {what}: stderr ---\n" + "\n".join(window.stderr))
        log(f"  {what}: {summary(window, None)}")
        return window

    def wait_until_ready(
        self,
        config: Config,
        procs: Sequence[subprocess.Popen[bytes]],
        stderrs: Sequence[IO[bytes]],
        what: str,
    ) -> None:
        """Until N workers registered (jobq_workers, read on a connection of our own that
        is closed and gone afterwards) and, if they listen, N LISTEN sessions are open."""
        n = self.args.workers
        conninfo = psycopg_conninfo(sa.make_url(self.bouncer.direct_url))
        with psycopg.connect(conninfo, autocommit=True) as conn:
            own = int(conn.info.backend_pid)

            def registered() -> bool:
                self.check_alive(procs, stderrs, what)
                row = conn.execute("SELECT count(*) FROM jobq_workers").fetchone()
                return bool(row and row[0] >= n)

            wait_for(registered, f"{what}: {n} workers registered", timeout=120, every=0.1)
        if config.listens:

            def listening() -> bool:
                self.check_alive(procs, stderrs, what)
                return sum(b.listening for b in self.server.backends()) >= n

            wait_for(listening, f"{what}: {n} LISTEN sessions", timeout=60, every=0.1)
        gone = f"{what}: the registration check's session gone"
        wait_for(lambda: all(b.pid != own for b in self.server.backends()), gone, timeout=30)

    def check_alive(
        self, procs: Sequence[subprocess.Popen[bytes]], stderrs: Sequence[IO[bytes]], what: str
    ) -> None:
        """Raise (showing its stderr) if a worker command has exited."""
        for i, proc in enumerate(procs):
            if proc.poll() is not None:
                tail(stderrs[i], f"{what}: command {i} exited {proc.returncode}")
                raise RuntimeError(f"{what}: command {i} exited {proc.returncode}")


# --- the report ------------------------------------------------------------------------


@dataclass
class Figures:
    """One configuration's figures a worker (medians over its rounds), as saved."""

    label: str
    code: str
    when: str
    config: str
    workers: int
    processes: bool
    seconds: float
    transactions: float  # a second, a worker, less the background
    statements: float | None  # a second, a worker (pg_stat_statements)
    bouncer_transactions: float | None  # a second, a worker (SHOW STATS), through PgBouncer
    bouncer_queries: float | None  # the same, queries
    sessions: float  # server sessions a worker, mean of the samples
    sessions_most: float  # server sessions a worker, most at once
    listening: float  # LISTEN sessions a worker, mean
    bouncer_servers: float | None  # PgBouncer's server connections in all, mean
    bouncer_clients: float | None  # client connections to PgBouncer a worker, mean
    ready_s: float

    @property
    def meets(self) -> str:
        """The targets: under 1 transaction/s and at most 2 server connections a worker."""
        tx = self.transactions < TARGET_TRANSACTIONS
        conns = self.sessions_most <= TARGET_SESSIONS
        if tx and conns:
            return "both met"
        missed = [
            *([] if tx else [f"tx/s >= {TARGET_TRANSACTIONS:g}"]),
            *([] if conns else [f"connections > {TARGET_SESSIONS:g}"]),
        ]
        return "missed: " + ", ".join(missed)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def figures(
    windows: Sequence[Window], config: Config, background: Window, args: argparse.Namespace
) -> Figures:
    """``config``'s windows summed up a worker (medians over rounds)."""
    n = args.workers
    base = background.transactions / background.seconds
    mine = [w for w in windows if w.key == config.key]

    def each(value: Any) -> list[float]:
        return [value(w) for w in mine]

    statements = [w.statements / w.seconds / n for w in mine if w.statements is not None]
    return Figures(
        label=args.label, code=code_state(), when=datetime.now(UTC).isoformat(timespec="seconds"),
        config=config.key, workers=n, processes=args.processes,
        seconds=median(each(lambda w: w.seconds)),
        transactions=median(each(lambda w: (w.transactions / w.seconds - base) / n)),
        statements=median(statements) if statements else None,
        bouncer_transactions=(
            median(each(lambda w: w.bouncer_transactions / w.seconds / n)) if config.pooled
            else None
        ),
        bouncer_queries=(
            median(each(lambda w: w.bouncer_queries / w.seconds / n)) if config.pooled else None
        ),
        sessions=median(each(lambda w: statistics.mean(w.sessions) / n)),
        sessions_most=median(each(lambda w: max(w.sessions) / n)),
        listening=median(each(lambda w: statistics.mean(w.listening) / n)),
        bouncer_servers=(
            median(each(lambda w: statistics.mean(w.bouncer_servers))) if config.pooled else None
        ),
        bouncer_clients=(
            median(each(lambda w: statistics.mean(w.bouncer_clients) / n)) if config.pooled
            else None
        ),
        ready_s=median(each(lambda w: w.ready_s)),
    )  # fmt: skip


def summary(window: Window, statements_missing: str | None) -> str:
    """A progress line about one window."""
    n = max(window.workers, 1)
    line = (
        f"{window.transactions} transactions in {window.seconds:.1f} s"
        f" ({window.transactions / window.seconds / n:.2f}/s a worker),"
        f" sessions {min(window.sessions)}-{max(window.sessions)}"
        f" ({max(window.listening)} LISTEN, {max(window.bouncer_sessions)} PgBouncer's)"
    )
    if window.statements is not None:
        line += f", {window.statements} statements"
    if window.bouncer_queries:
        line += (
            f"; PgBouncer: {window.bouncer_queries} queries, {window.bouncer_transactions}"
            f" transactions, {max(window.bouncer_clients)} clients"
        )
    return line


def number(value: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if value is None else fmt.format(value)


HEADER = [
    "| run | configuration | transactions/s a worker | statements/s a worker"
    " (pg_stat_statements) | through PgBouncer: transactions / queries a second a worker"
    " | server connections a"
    " worker, mean (most) | of those, LISTEN | PgBouncer: server connections in all"
    " | PgBouncer: client connections a worker | ready in s | targets (< 1 tx/s, <= 2"
    " connections) |",
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
]


def through(f: Figures) -> str:
    """PgBouncer's transactions / queries a second a worker ('-': not through it)."""
    if f.bouncer_transactions is None or f.bouncer_queries is None:
        return "-"
    return f"{f.bouncer_transactions:.2f} / {f.bouncer_queries:.2f}"


def row(f: Figures) -> str:
    """A line of the table."""
    label = {c.key: c.label for c in CONFIGS}.get(f.config, f.config)
    run = f.label or f.code
    shape = f"{f.workers} x `jobq worker`" if not f.processes else f"`--processes {f.workers}`"
    return (
        f"| {run} | {label}, {shape} | {f.transactions:.2f} | {number(f.statements)}"
        f" | {through(f)} | {f.sessions:.2f} ({f.sessions_most:.2f})"
        f" | {f.listening:.2f} | {number(f.bouncer_servers, '{:.1f}')}"
        f" | {number(f.bouncer_clients)} | {f.ready_s:.1f} | {f.meets} |"
    )


def saved(path: str) -> Iterator[Figures]:
    """The figures ``--save`` appended to ``path``."""
    with open(path) as lines:
        for line in lines:
            if line.strip():
                yield Figures(**json.loads(line))


# --- main ------------------------------------------------------------------------------


def config_keys(text: str) -> list[str]:
    """``direct,pooled`` as a list (argparse type), among the configurations."""
    keys = [x.strip() for x in text.split(",") if x.strip()]
    known = [c.key for c in CONFIGS]
    if not keys or not set(keys) <= set(known):
        raise argparse.ArgumentTypeError(f"among {','.join(known)}: {text!r}")
    return keys


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line's options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=10, help="idle workers (N)")
    parser.add_argument("--processes", action="store_true",
                        help="one `jobq worker --processes N` group, not N commands")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=30.0, help="the measuring window")
    parser.add_argument("--settle", type=float, default=11.0,
                        help="seconds between the workers being ready and the window")  # fmt: skip
    parser.add_argument("--background", type=float, default=10.0,
                        help="the window with no worker (0: none, nothing subtracted)")  # fmt: skip
    parser.add_argument("--sample-every", type=float, default=1.0,
                        help="seconds between counts of the connections")  # fmt: skip
    parser.add_argument("--configs", type=config_keys, default=[c.key for c in CONFIGS],
                        help="direct,pooled,pooled-listen (default all)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1, help="windows of each configuration")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="slots a worker (default: jobq's own)")  # fmt: skip
    parser.add_argument("--poll-interval", type=float, default=None,
                        help="the workers' --poll-interval (default: jobq's own)")  # fmt: skip
    parser.add_argument("--log-level", default="warning", help="the workers' --log-level")
    parser.add_argument("--worker-arg", action="append", default=[], metavar="ARG",
                        help="one more argument for each worker command (repeatable;"
                        " --worker-arg=--max-poll-interval --worker-arg=4, say)")  # fmt: skip
    parser.add_argument("--pool-size", type=int, default=20, help="PgBouncer's pool size")
    parser.add_argument("--label", default="", help="this run's name in the table")
    parser.add_argument("--save", metavar="FILE", help="append the figures to FILE (JSON lines)")
    parser.add_argument("--compare", metavar="FILE", action="append", default=[],
                        help="also list the runs saved in FILE (repeatable)")  # fmt: skip
    parser.add_argument("--database-url", default=DEFAULT_POSTGRES_URL,
                        help="the PostgreSQL server (its database is used only to create and"
                        " drop the run's own, and to read statistics)")  # fmt: skip
    args = parser.parse_args(argv)
    for name in ("workers", "rounds", "pool_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.seconds <= 0 or args.sample_every <= 0 or args.settle < 0 or args.background < 0:
        parser.error("--seconds and --sample-every must be positive, --settle not negative")
    if sa.make_url(args.database_url).get_backend_name() != "postgresql":
        parser.error("--database-url: PgBouncer stands in front of PostgreSQL only")
    return args


def main(argv: list[str] | None = None) -> int:
    """Measure each configuration, print the table; 0 (a failed check raises)."""
    args = parse(argv)
    began, load_before = time.monotonic(), load()
    configs = [c for c in CONFIGS if c.key in args.configs]
    windows: list[Window] = []
    with (
        tempfile.TemporaryDirectory(prefix="jobq-idle-") as tmp,
        pgbouncer_server.running(args.database_url, pool_size=args.pool_size) as bouncer,
    ):
        log(f"PgBouncer on port {bouncer.port} in front of database {bouncer.database}")
        store = jobq.Store(bouncer.direct_url)
        store.migrate()
        store.dispose()
        server = Server(args.database_url, bouncer.database)
        user = sa.make_url(bouncer.direct_url).username or "postgres"
        console = Console(bouncer.port, user, bouncer.database)
        try:
            version = server.version()
            statements = Statements(server, bouncer.database)
            if statements.missing:
                log(f"statements a second: skipped ({statements.missing})")
            bench = Bench(bouncer, server, console, statements, os.path.join(tmp, "pycache"), args)
            bench.warm_up()
            if args.background > 0:
                background = bench.background()
                log(f"  background: {summary(background, statements.missing)}")
            else:
                background = Window("background", 0, 0, 1.0, 0, None, 0, 0, sessions=[0])
            for round_ in range(args.rounds):
                order = configs if round_ % 2 == 0 else list(reversed(configs))
                log(f"round {round_ + 1} of {args.rounds} (load {load()})")
                for config in order:
                    windows.append(bench.idle(config, round_))
        finally:
            console.close()
            server.close()
    results = [figures(windows, config, background, args) for config in configs]
    earlier = [f for path in args.compare for f in saved(path)]  # before this run's --save
    if args.save:
        with open(args.save, "a") as out_file:
            for result in results:
                out_file.write(json.dumps(asdict(result)) + "\n")
    shape = f"`jobq worker --processes {args.workers}`" if args.processes else (
        f"{args.workers} x `jobq worker`"
    )  # fmt: skip
    shares = [w.others * 100 for w in windows if w.others is not None]
    background_tx = background.transactions / background.seconds
    out = [
        f"## idle_load.py{f': {args.label}' if args.label else ''}",
        "",
        f"At {code_state()}; {version}; {pgbouncer_version()} (transaction pooling,"
        f" default_pool_size {args.pool_size}); {os.cpu_count()} cores;"
        f" Python {platform.python_version()}. {shape}, idle (no task), workers at"
        f" --log-level {args.log_level}"
        f"{f', --concurrency {args.concurrency}' if args.concurrency else ''}"
        f"{f', --poll-interval {args.poll_interval:g}' if args.poll_interval else ''};"
        f" a window of {args.seconds:g} s after {args.settle:g} s of settling, sessions"
        f" counted every {args.sample_every:g} s; {args.rounds} round(s).",
        (
            f"Background (no worker, {background.seconds:.0f} s): {background_tx:.2f}"
            f" transactions/s in the database, {max(background.sessions)} session(s):"
            " subtracted."
            if args.background > 0
            else "No background window (--background 0): nothing subtracted."
        )
        + " Statements a second: "
        + (f"skipped ({statements.missing})." if statements.missing else "pg_stat_statements."),
        f"Load average (1/5/15 min): {load_before} at the start, {load()} at the end; other work"
        f" kept {spread(shares, '{:.0f}')} % of the CPU busy before the windows;"
        f" {time.monotonic() - began:.0f} s in all.",
        "",
        *HEADER,
        *(row(f) for f in earlier),
        *(row(f) for f in results),
        "",
        "Worker stderr:",
        "",
    ]
    notes = [
        f"- {w.key}, round {w.round + 1}: " + " / ".join(w.stderr[:5]) for w in windows if w.stderr
    ]
    out += notes or ["- none"]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
