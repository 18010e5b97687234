#!/usr/bin/env python
"""Workflows against plain tasks, with real `jobq worker` processes (SQLite, PostgreSQL, MariaDB).

Four parts (``--parts``, default all), each run ``--rounds`` times per database with the
sides interleaved round by round (their order alternating), reported as medians with
the spread:

1. ``fanout``: ``jobq.chord(jobq.group(noop.s(i=i) for i in range(N)), callback.s())``
   (N = ``--fanout``, 10,000) against N + 1 plain tasks (``noop.enqueue_many`` of N, then
   one ``noop.enqueue``). The callback reads ``jobq.parent_results()`` (one query) and
   returns how many it got, which is checked. Measured: the enqueue (building the
   signatures included, as enqueue_many checks its arguments), and the wall time from
   the enqueue's start (the database's clock, read just before) to the callback's end
   (resp. the last plain task's end: its ``finished_at``). Target: chord <= 1.5x plain.
   A third side, ``chord+ANALYZE``, runs ``ANALYZE`` of jobq_tasks and jobq_task_edges
   right after the chord's enqueue (timed with it): jobq refreshes PostgreSQL's
   statistics itself after 10,000 tasks of ``enqueue_many``, not after a workflow's.
2. ``chain``: ``jobq.chain(*(noop.s(i=i) for i in range(M)))`` (M = ``--chain``, 1,000)
   against the same M steps done by hand: ``step(k, n)`` enqueues ``step(k + 1, n)`` from
   inside its run, as users chain tasks without workflows. For context, M independent
   plain tasks drained in parallel. Same measures. Target: chain <= 1.5x by hand.
3. ``contention``: the chord and the plain tasks of part 1 again, while a thread samples
   which worker sessions wait on a lock, every ``--sample-ms`` (10): on PostgreSQL
   ``pg_stat_activity`` joined with the ungranted ``pg_locks`` (worker sessions are named
   by ``application_name``; a lock wait is ``wait_event_type = 'Lock'``); on MariaDB
   ``information_schema.INNODB_TRX`` in ``LOCK WAIT`` joined with ``INNODB_LOCKS`` (the
   sessions of the benchmark's database), every 150 ms at least, since InnoDB refreshes
   that table only after it has gone unread for 0.1 s; there also the server's
   ``Innodb_row_lock_waits``, ``Innodb_row_lock_time`` and ``Innodb_deadlocks`` before
   and after (server-wide). Reported: samples, samples in which a worker waited on a
   lock, session-samples waiting, and what they waited in. Not on SQLite (one writer at
   a time, by design).
4. ``baseline``: the drain of ``--drain`` (20,000) plain no-op tasks by one
   ``jobq worker --burst --concurrency --drain-concurrency`` process (bench_worker.py's
   drain, spawn to exit; also first start to last finish, from the rows), with this
   checkout against ``--base`` (afcbfe5, the commit before workflows) checked out with
   ``git worktree add`` in a temporary directory and run with PYTHONPATH (and the working
   directory) pointing at it. Each tree migrates a schema (PostgreSQL), database (MariaDB)
   or SQLite file of its own with its own code (revision 0011 changes jobq_tasks) and
   fills it with its own enqueue_many, then ANALYZE; the rounds interleave the two trees.

Every run of every part starts from a schema, database or SQLite file made again and
migrated (so no run inherits statistics from an earlier one). Parts 1-3 start
``--workers`` (4) `jobq worker --concurrency` (32) processes on benchmarks/workflow_app.py
for each run, wait until every one has registered, and stop them (SIGTERM) after it.
Workers log at --log-level warning unless ``--task-logs``; they poll every
--poll-interval (jobq's default, 0.5 s, unless given), and on PostgreSQL are also woken
by each INSERT. The schemas (PostgreSQL: ``bench_workflows_PID`` and
``bench_workflows_base_PID``, named by the script's pid), databases (MariaDB, the same
names) and SQLite files are dropped at the end, and the worktree removed. Every wait is
bounded (``--timeout`` a run). Exits 1 if a target is missed.

    .venv/bin/python benchmarks/workflows.py                       # all parts, all databases
    .venv/bin/python benchmarks/workflows.py --only postgresql --rounds 5
    .venv/bin/python benchmarks/workflows.py --only mysql --fanout 2000 --chain 300 --drain 5000
    .venv/bin/python benchmarks/workflows.py --parts fanout,contention --json results.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sqlalchemy as sa

import jobq
from benchmarks import workflow_app
from benchmarks.harness import (
    DEFAULT_MYSQL_URL,
    DEFAULT_POSTGRES_URL,
    connect_postgres,
    drop_mysql_database,
    drop_schema,
    git_state,
    in_schema,
    jobq_worker_cmd,
    log,
    mysql_database,
    spread,
    sqlite_url,
    stop,
    tail,
    utc,
)

ROOT = Path(__file__).resolve().parent.parent
APP_PATH = "benchmarks.workflow_app:app"
BASE_APP_PATH = "benchmarks.noop_app:app"  # part 4: in both trees
BASE_TASK = "bench.noop"
BASE_COMMIT = "afcbfe5"
# PostgreSQL schema / MariaDB database of parts 1-3 and of "this" in part 4, and of the base
# tree in part 4; named by our pid, so that two runs at once never drop each other's.
NAME = f"bench_workflows_{os.getpid()}"
BASE_NAME = f"bench_workflows_base_{os.getpid()}"
WORKER_APPLICATION = "jobq_wf_bench_worker"  # application_name of workers on PostgreSQL
TARGET = 1.5
PARTS = ("fanout", "chain", "contention", "baseline")
DATABASES = {"sqlite": "SQLite", "postgresql": "PostgreSQL", "mysql": "MariaDB"}
POLL = 0.05  # seconds between looks at the rows while a run goes on

# Part 4 fills each tree's tables with that tree's own code (its own schema).
FILL_SCRIPT = """
import sys
import jobq
store = jobq.Store(sys.argv[1])
store.migrate()
store.enqueue_many(sys.argv[3], [{"n": i} for i in range(int(sys.argv[2]))])
store.dispose()
"""


# --- databases -------------------------------------------------------------------------


@dataclass
class Database:
    """One database the runs use: its kind, its label, and a URL per area (this, base)."""

    kind: str  # sqlite, postgresql, mysql
    label: str
    urls: dict[str, str]
    admin_url: str  # the server's URL (the sampler's connection)
    area: dict[str, str] = field(default_factory=dict)  # schema / database / file per area

    def worker_url(self, which: str) -> str:
        """The URL workers get: on PostgreSQL, named by application_name for the sampler."""
        url = self.urls[which]
        if self.kind != "postgresql":
            return url
        named = sa.make_url(url).update_query_dict({"application_name": WORKER_APPLICATION})
        return named.render_as_string(hide_password=False)


@contextmanager
def database(kind: str, args: argparse.Namespace, tmp: str) -> Iterator[Database]:
    """A schema (PostgreSQL), database (MariaDB) or file (SQLite) per area, dropped after."""
    areas = {"this": NAME, "base": BASE_NAME}
    if kind == "postgresql":
        for name in areas.values():
            drop_schema(args.postgres_url, name)
        urls = {which: in_schema(args.postgres_url, name) for which, name in areas.items()}
        db = Database(kind, "PostgreSQL", urls, args.postgres_url, dict(areas))
        try:
            yield db
        finally:
            for name in areas.values():
                drop_schema(args.postgres_url, name)
    elif kind == "mysql":
        urls = {which: mysql_database(args.mysql_url, name) for which, name in areas.items()}
        db = Database(kind, server_name(args.mysql_url), urls, args.mysql_url, dict(areas))
        try:
            yield db
        finally:
            for name in areas.values():
                drop_mysql_database(args.mysql_url, name)
    else:
        paths = {which: os.path.join(tmp, f"{name}.db") for which, name in areas.items()}
        urls = {which: sqlite_url(path) for which, path in paths.items()}
        yield Database(kind, "SQLite", urls, urls["this"], paths)


def server_name(url: str) -> str:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            version = conn.exec_driver_sql("SELECT version()").scalar_one()
    finally:
        engine.dispose()
    return "MariaDB" if "mariadb" in str(version).lower() else "MySQL"


def plain_engine(url: str) -> sa.Engine:
    """An engine of our own on ``url`` (no jobq: part 4's base schema is not this jobq's)."""
    return sa.create_engine(url, poolclass=sa.NullPool)


def fresh(db: Database, which: str) -> None:
    """Area ``which`` made again, empty and unmigrated: every run starts from a newly
    migrated database, with no statistics left by an earlier run (nor by autovacuum)."""
    name = db.area[which]
    if db.kind == "postgresql":
        drop_schema(db.admin_url, name)
        in_schema(db.admin_url, name)
    elif db.kind == "mysql":
        mysql_database(db.admin_url, name)
    else:
        for suffix in ("", "-wal", "-shm", "-journal"):
            with suppress(FileNotFoundError):
                os.remove(name + suffix)


def migrate(url: str) -> None:
    """This checkout's migrations, on ``url``."""
    store = jobq.Store(url)
    try:
        store.migrate()
    finally:
        store.dispose()


def analyze(db: Database, which: str) -> None:
    engine = plain_engine(db.urls[which])
    try:
        with engine.begin() as conn:
            sql = "ANALYZE TABLE jobq_tasks" if db.kind == "mysql" else "ANALYZE jobq_tasks"
            conn.exec_driver_sql(sql)
    finally:
        engine.dispose()


def counts(engine: sa.Engine) -> dict[str, int]:
    """Tasks by status."""
    with engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT status, count(*) FROM jobq_tasks GROUP BY status")
        return {status: n for status, n in rows}


def span(engine: sa.Engine) -> tuple[datetime, datetime]:
    """The first start and the last end among the done tasks (the database's clock)."""
    with engine.connect() as conn:
        first, last = conn.exec_driver_sql(
            "SELECT min(started_at), max(finished_at) FROM jobq_tasks WHERE status = 'done'"
        ).one()
    return utc(first), utc(last)


def clock(store: jobq.Store) -> datetime:
    """The database's time now (PostgreSQL: clock_timestamp(), not the transaction's)."""
    with store.engine.connect() as conn:
        return utc(conn.execute(sa.select(store.dialect.clock())).scalar_one())


# --- worker processes ------------------------------------------------------------------


def tree_env(url: str, tree: Path) -> dict[str, str]:
    """Our environment with jobq's database at ``url`` and ``tree`` first on the path."""
    return {**os.environ, "JOBQ_DATABASE_URL": url, "PYTHONPATH": str(tree)}


def worker_options(args: argparse.Namespace) -> list[str]:
    options = [] if args.task_logs else ["--log-level", "warning"]
    if args.poll_interval is not None:
        options += ["--poll-interval", str(args.poll_interval)]
    return options


class Workers:
    """``n`` `jobq worker` processes of the workflow app, started and stopped together."""

    def __init__(self, url: str, n: int, concurrency: int, options: list[str]) -> None:
        self.url, self.n = url, n
        self.cmd = jobq_worker_cmd("--concurrency", str(concurrency), *options, app=APP_PATH)
        self.procs: list[tuple[subprocess.Popen[bytes], IO[bytes]]] = []

    def __enter__(self) -> Workers:
        env = tree_env(self.url, ROOT)
        try:
            for _ in range(self.n):
                stderr = tempfile.TemporaryFile()
                proc = subprocess.Popen(
                    self.cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr
                )
                self.procs.append((proc, stderr))
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def check(self) -> None:
        """Raise if a worker exited."""
        for i, (proc, stderr) in enumerate(self.procs):
            if proc.poll() is not None:
                tail(stderr, f"worker {i} exited {proc.returncode}")
                raise RuntimeError(f"worker {i} exited {proc.returncode} during the run")

    def wait_ready(self, engine: sa.Engine, timeout: float) -> None:
        """Until every worker has registered (its row in jobq_workers), then a moment more
        for its LISTEN connection and first look at the queue."""
        deadline = time.monotonic() + timeout
        while True:
            self.check()
            with engine.connect() as conn:
                registered = conn.exec_driver_sql("SELECT count(*) FROM jobq_workers").scalar()
            if registered >= self.n:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{registered} of {self.n} workers registered in {timeout} s")
            time.sleep(0.05)
        time.sleep(0.5)

    def stop(self) -> None:
        """SIGTERM each (they are idle by now), wait, kill what is left; close the logs."""
        for i in stop([proc for proc, _ in self.procs]):
            tail(self.procs[i][1], f"worker {i} did not stop within 40 s: killed")
        for _, stderr in self.procs:
            stderr.close()
        self.procs = []


def wait_done(
    engine: sa.Engine, total: int, workers: Workers, timeout: float, what: str
) -> dict[str, int]:
    """Look at the rows every POLL s until ``total`` tasks are done (bounded by
    ``timeout``); raise if one failed or was cancelled, or a worker exited."""
    deadline = time.monotonic() + timeout
    while True:
        seen = counts(engine)
        if seen.get("done", 0) >= total:
            return seen
        if seen.get("failed") or seen.get("cancelled"):
            raise RuntimeError(f"{what}: tasks failed or were cancelled: {seen}")
        workers.check()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not done after {timeout} s: {seen}")
        time.sleep(POLL)


# --- lock-wait sampling (part 3) -------------------------------------------------------

PG_SAMPLE = """
SELECT a.pid, a.wait_event_type, a.wait_event, left(a.query, 110),
       l.locktype, l.relation::regclass::text, l.mode,
       CASE WHEN a.wait_event_type = 'Lock' THEN (
           SELECT left(b.query, 110) FROM pg_stat_activity b
           WHERE b.pid = (pg_blocking_pids(a.pid))[1]
       ) END
FROM pg_stat_activity a
LEFT JOIN pg_locks l ON l.pid = a.pid AND NOT l.granted
WHERE a.application_name = %s AND a.state = 'active' AND a.pid <> pg_backend_pid()
"""

MYSQL_SAMPLE = """
SELECT t.trx_mysql_thread_id, t.trx_state, LEFT(t.trx_query, 110),
       l.lock_table, l.lock_index, l.lock_mode, l.lock_type
FROM information_schema.INNODB_TRX t
JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
LEFT JOIN information_schema.INNODB_LOCKS l ON l.lock_id = t.trx_requested_lock_id
WHERE p.DB = %s AND t.trx_mysql_thread_id <> CONNECTION_ID()
"""


MYSQL_COUNTERS = (
    "SHOW GLOBAL STATUS WHERE Variable_name IN"
    " ('Innodb_row_lock_waits', 'Innodb_row_lock_time', 'Innodb_deadlocks')"
)
MYSQL_MIN_INTERVAL = 0.15


def one_line(text: str | None) -> str:
    """A statement on one line, its string literals (MariaDB's JSON of ends) elided, so
    that the same statement counts as one."""
    return re.sub(r"'(?:[^'\\]|\\.|\\$)*('|$)", "'...'", " ".join((text or "").split()))


@dataclass
class Sampled:
    """What a sampler saw over one run."""

    samples: int = 0
    #: Samples in which at least one worker session waited on a lock.
    lock_samples: int = 0
    #: Worker sessions seen waiting on a lock, summed over the samples.
    waiting: int = 0
    #: Worker sessions seen busy (PostgreSQL: state active; MariaDB: an open
    #: transaction), summed over the samples.
    busy: int = 0
    #: What the lock waits were in (lock and statement), how many session-samples each.
    what: Counter[str] = field(default_factory=Counter)
    #: PostgreSQL: the wait events of busy worker sessions (CPU when none).
    events: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    #: MariaDB: how InnoDB's own counters of row-lock waits and deadlocks moved over the
    #: run. They count the whole server's sessions, not only the workers'.
    server: dict[str, int] = field(default_factory=dict)


class Sampler(threading.Thread):
    """Every ``interval`` s, which worker sessions wait on a lock, until stopped."""

    def __init__(self, db: Database, interval: float) -> None:
        super().__init__(daemon=True)
        self.db, self.interval = db, interval
        self.result = Sampled()
        self.error: BaseException | None = None
        self._stop_event = threading.Event()
        self._conn: Any = None
        if db.kind == "postgresql":
            self._conn = connect_postgres(db.admin_url, autocommit=True)
            self._query, self._param = PG_SAMPLE, WORKER_APPLICATION
        else:
            self._engine = sa.create_engine(db.admin_url, poolclass=sa.NullPool)
            self._conn = self._engine.raw_connection()
            self._conn.dbapi_connection.autocommit(True)
            self._query, self._param = MYSQL_SAMPLE, db.area["this"]
            # InnoDB refreshes what INNODB_TRX shows only once it has gone unread for
            # 0.1 s (trx_i_s_cache, CACHE_MIN_IDLE_TIME_US): faster reads see a frozen copy.
            self.interval = max(interval, MYSQL_MIN_INTERVAL)
            self._counters_before = self._counters()

    def _counters(self) -> dict[str, int]:
        cursor = self._conn.cursor()
        cursor.execute(MYSQL_COUNTERS)
        values = {name: int(value) for name, value in cursor.fetchall()}
        cursor.close()
        return values

    def run(self) -> None:
        started = time.monotonic()
        try:
            while not self._stop_event.is_set():
                before = time.monotonic()
                cursor = self._conn.cursor()
                cursor.execute(self._query, (self._param,))
                rows = cursor.fetchall()
                cursor.close()
                self._count(rows)
                self._stop_event.wait(max(0.0, self.interval - (time.monotonic() - before)))
        except BaseException as error:  # reported by stop()
            self.error = error
        self.result.seconds = time.monotonic() - started

    def _count(self, rows: list[tuple[Any, ...]]) -> None:
        r = self.result
        r.samples += 1
        waiting = 0
        for row in rows:
            if self.db.kind == "postgresql":
                _, event_type, event, query, locktype, relation, mode, blocker = row
                r.events[f"{event_type}:{event}" if event_type else "CPU (no wait event)"] += 1
                if event_type == "Lock":
                    waiting += 1
                    on = f"{locktype} {relation or ''} {mode}".replace("  ", " ")
                    r.what[f"{on}: {one_line(query)} <- held by: {one_line(blocker)}"] += 1
            else:
                _, state, query, table, index, mode, kind = row
                if state == "LOCK WAIT":
                    waiting += 1
                    r.what[f"{kind} {table} {index} {mode}: {one_line(query)}"] += 1
        r.busy += len(rows)
        r.waiting += waiting
        r.lock_samples += waiting > 0

    def stop(self) -> Sampled:
        self._stop_event.set()
        self.join(timeout=10)
        if self.db.kind != "postgresql" and self.error is None:
            after = self._counters()
            self.result.server = {k: v - self._counters_before.get(k, 0) for k, v in after.items()}
        with suppress(Exception):
            self._conn.close()
        if self.db.kind != "postgresql":
            self._engine.dispose()
        if self.error is not None:
            raise RuntimeError(f"lock sampler failed: {self.error}") from self.error
        return self.result


# --- parts 1-3: one run of one scenario ------------------------------------------------


@dataclass
class Run:
    """One timed run: the enqueue, and from the enqueue's start to the last end."""

    part: str
    database: str
    scenario: str
    tasks: int
    enqueue: float  # seconds, in this process
    wall: float  # enqueue start (database clock) -> the last end (finished_at)
    first_start: float  # enqueue start -> the first start
    note: str = ""
    sampled: Sampled | None = None

    @property
    def after_first_start(self) -> float:
        return self.wall - self.first_start


def enqueue_chord(n: int) -> tuple[int, Callable[[jobq.Store], str]]:
    noop, callback = workflow_app.noop, workflow_app.callback
    handle = jobq.chord(jobq.group(noop.s(i=i) for i in range(n)), callback.s()).enqueue()
    callback_id = handle.final[0].id

    def check(store: jobq.Store) -> str:
        got = store.get(callback_id).result
        if got != n:
            raise RuntimeError(f"the callback saw {got} parent results, not {n}")
        return f"callback saw {got:,} parent results"

    return n + 1, check


def enqueue_chord_analysed(n: int) -> tuple[int, Callable[[jobq.Store], str]]:
    """The chord, then ANALYZE of jobq_tasks and jobq_task_edges (timed with the enqueue):
    what the fan-in costs once the database's statistics know the rows just written."""
    total, check = enqueue_chord(n)
    store = workflow_app.app.store
    mysql = store.engine.dialect.name in ("mysql", "mariadb")
    with store.engine.begin() as conn:
        for table in ("jobq_tasks", "jobq_task_edges"):
            conn.exec_driver_sql(("ANALYZE TABLE " if mysql else "ANALYZE ") + table)
    return total, check


def enqueue_plain_fanout(n: int) -> tuple[int, None]:
    workflow_app.noop.enqueue_many([{"i": i} for i in range(n)])
    workflow_app.noop.enqueue(i=n)
    return n + 1, None


def enqueue_chain(n: int) -> tuple[int, None]:
    noop = workflow_app.noop
    jobq.chain(*(noop.s(i=i) for i in range(n))).enqueue()
    return n, None


def enqueue_by_hand(n: int) -> tuple[int, None]:
    workflow_app.step.enqueue(k=0, n=n)
    return n, None


def enqueue_parallel(n: int) -> tuple[int, None]:
    workflow_app.noop.enqueue_many([{"i": i} for i in range(n)])
    return n, None


SCENARIOS: dict[str, tuple[str, Callable[[int], tuple[int, Any]]]] = {
    # name: (part, enqueue)
    "chord": ("fanout", enqueue_chord),
    "chord+ANALYZE": ("fanout", enqueue_chord_analysed),
    "plain": ("fanout", enqueue_plain_fanout),
    "chain": ("chain", enqueue_chain),
    "by hand": ("chain", enqueue_by_hand),
    "parallel": ("chain", enqueue_parallel),
}


def run_scenario(
    db: Database, scenario: str, n: int, args: argparse.Namespace, *, sample: bool = False
) -> Run:
    """Fresh tables and fresh workers; enqueue ``scenario`` of size ``n``, wait for its
    last end, check it, and stop the workers."""
    part, enqueue = SCENARIOS[scenario]
    fresh(db, "this")
    migrate(db.urls["this"])
    store = jobq.Store(db.urls["this"])
    engine = plain_engine(db.urls["this"])
    workflow_app.app.store = store
    sampler = None
    try:
        options = worker_options(args)
        with Workers(db.worker_url("this"), args.workers, args.concurrency, options) as workers:
            workers.wait_ready(engine, 60)
            if sample:
                sampler = Sampler(db, args.sample_ms / 1000)
                sampler.start()
            start = clock(store)
            began = time.perf_counter()
            total, check = enqueue(n)
            enqueued = time.perf_counter() - began
            wait_done(engine, total, workers, args.timeout, f"{db.label} {scenario}")
            sampled = sampler.stop() if sampler else None
            sampler = None
        first, last = span(engine)
        seen = counts(engine)
        if seen != {"done": total}:
            raise RuntimeError(f"{db.label} {scenario}: the rows end as {seen}, not {total} done")
        note = check(store) if check else ""
    finally:
        if sampler is not None:
            with suppress(Exception):
                sampler.stop()
        store.dispose()
        engine.dispose()
    wall = (last - start).total_seconds()
    first_start = (first - start).total_seconds()
    run = Run(part, db.label, scenario, total, enqueued, wall, first_start, note, sampled)
    log(
        f"  {db.label} {scenario} ({total:,} tasks): enqueue {enqueued:.3f} s, wall {wall:.3f} s"
        f" (first start after {first_start:.3f} s)"
        + (f"; lock-wait samples {sampled.lock_samples}/{sampled.samples}" if sampled else "")
    )
    return run


def interleaved(
    db: Database, scenarios: list[str], n: int, args: argparse.Namespace, *, sample: bool = False
) -> list[Run]:
    runs = []
    for round_ in range(args.rounds):
        order = scenarios if round_ % 2 == 0 else scenarios[::-1]
        log(f"{db.label}: round {round_ + 1} of {args.rounds}: {', '.join(order)}")
        for scenario in order:
            runs.append(run_scenario(db, scenario, n, args, sample=sample))
    return runs


# --- part 4: plain drains, this tree against the base commit ---------------------------


@dataclass
class BaseDrain:
    database: str
    tree: str  # "base" or "this"
    tasks: int
    seconds: float  # spawn to exit
    span: float  # first start to last finish, from the rows

    @property
    def rate(self) -> float:
        return self.tasks / self.seconds

    @property
    def span_rate(self) -> float:
        return self.tasks / self.span


@contextmanager
def base_tree(commit: str) -> Iterator[Path]:
    """``commit`` checked out with git worktree in a temporary directory, removed after."""
    tmp = tempfile.mkdtemp(prefix="jobq-wf-base-")
    path = Path(tmp) / "tree"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), commit],
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        yield path
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
            capture_output=True,
        )  # fmt: skip
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], capture_output=True)


def tree_drain(db: Database, which: str, tree: Path, args: argparse.Namespace) -> BaseDrain:
    """Fill area ``which`` with ``tree``'s own code, then time one worker of ``tree``
    draining it (spawn to exit)."""
    url, n = db.urls[which], args.drain
    fresh(db, which)  # the fill migrates it with the tree's own code
    env = tree_env(url, tree)
    subprocess.run(
        [sys.executable, "-c", FILL_SCRIPT, url, str(n), BASE_TASK],
        cwd=tree, env=env, check=True, timeout=args.timeout,
    )  # fmt: skip
    analyze(db, which)
    cmd = jobq_worker_cmd(
        "--burst", "--concurrency", str(args.drain_concurrency),
        *([] if args.task_logs else ["--log-level", "warning"]),
        app=BASE_APP_PATH,
    )  # fmt: skip
    with tempfile.TemporaryFile() as stderr:
        began = time.perf_counter()
        try:
            proc = subprocess.run(
                cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=stderr,
                timeout=args.timeout,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            tail(stderr, f"{which} drain timed out")
            raise
        seconds = time.perf_counter() - began
        if proc.returncode != 0:
            tail(stderr, f"{which} drain exited {proc.returncode}")
            raise RuntimeError(f"{db.label} {which}: the worker exited {proc.returncode}")
    engine = plain_engine(url)
    try:
        seen = counts(engine)
        if seen != {"done": n}:
            raise RuntimeError(f"{db.label} {which}: after the drain the rows are {seen}")
        first, last = span(engine)
    finally:
        engine.dispose()
    drain = BaseDrain(db.label, which, n, seconds, (last - first).total_seconds())
    log(
        f"  {db.label} {which}: {n:,} tasks in {seconds:.2f} s ({drain.rate:,.0f}/s),"
        f" first start to last finish {drain.span:.2f} s ({drain.span_rate:,.0f}/s)"
    )
    return drain


def baseline(db: Database, tree: Path, args: argparse.Namespace) -> list[BaseDrain]:
    trees = {"base": tree, "this": ROOT}
    drains = []
    for round_ in range(args.rounds):
        order = ["base", "this"] if round_ % 2 == 0 else ["this", "base"]
        log(f"{db.label}: plain drain, round {round_ + 1} of {args.rounds}: {', '.join(order)}")
        for which in order:
            drains.append(tree_drain(db, which, trees[which], args))
    return drains


# --- the report ------------------------------------------------------------------------


def wall_table(runs: list[Run], pairs: list[tuple[str, str, str]]) -> list[str]:
    """Parts 1 and 2: one row per database and scenario, ratios against the reference."""
    lines = [
        "| database | scenario | tasks | runs | enqueue s | wall s (enqueue start to last end)"
        " | first start s | first start to last end s | wall / reference |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for database in dict.fromkeys(r.database for r in runs):
        of = [r for r in runs if r.database == database]
        for scenario, reference, _ in pairs:
            mine = [r for r in of if r.scenario == scenario]
            if not mine:
                continue
            ref = [r for r in of if r.scenario == reference]
            ratio = ""
            if ref and reference != scenario:
                times = statistics.median(r.wall for r in mine) / statistics.median(
                    r.wall for r in ref
                )
                ratio = f"{times:.2f}x {reference}"
            lines.append(
                f"| {database} | {scenario} | {mine[0].tasks:,} | {len(mine)} "
                f"| {spread([r.enqueue for r in mine], '{:.3f}')} "
                f"| {spread([r.wall for r in mine])} "
                f"| {spread([r.first_start for r in mine])} "
                f"| {spread([r.after_first_start for r in mine])} | {ratio} |"
            )
    return lines


def verdicts(runs: list[Run], pairs: list[tuple[str, str, str]]) -> list[str]:
    lines = []
    for database in dict.fromkeys(r.database for r in runs):
        of = [r for r in runs if r.database == database]
        for scenario, reference, what in pairs:
            mine = [r for r in of if r.scenario == scenario]
            ref = [r for r in of if r.scenario == reference]
            if not mine or not ref or not what:
                continue
            ratio = statistics.median(r.wall for r in mine) / statistics.median(r.wall for r in ref)
            ratios = [m.wall / r.wall for m, r in zip(mine, ref, strict=False)]
            busy = statistics.median(r.after_first_start for r in mine) / statistics.median(
                r.after_first_start for r in ref
            )
            verdict = "met" if ratio <= TARGET else "NOT met"
            lines.append(
                f"- {database}: {what} <= {TARGET}x: **{verdict}** ({ratio:.2f}x of the"
                f" medians; round by round {', '.join(f'{x:.2f}' for x in ratios)};"
                f" from the first start to the last end {busy:.2f}x)"
            )
    return lines


def contention_table(runs: list[Run]) -> list[str]:
    lines = [
        "| database | run | tasks | samples (period) | samples with a worker waiting on a lock"
        " | worker sessions waiting (session-samples) | busy worker session-samples"
        " | server-wide InnoDB counters over the run |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for run in runs:
        s = run.sampled
        assert s is not None
        period = s.seconds / max(s.samples, 1) * 1000
        server = ", ".join(f"{k.removeprefix('Innodb_')} {v:+,}" for k, v in s.server.items())
        lines.append(
            f"| {run.database} | {run.scenario} | {run.tasks:,} | {s.samples} ({period:.0f} ms) "
            f"| {s.lock_samples} ({s.lock_samples / max(s.samples, 1):.1%}) | {s.waiting} "
            f"| {s.busy} | {server or '-'} |"
        )
    details = []
    for database in dict.fromkeys(r.database for r in runs):
        for scenario in ("chord", "plain"):
            of = [r.sampled for r in runs if r.database == database and r.scenario == scenario]
            what: Counter[str] = Counter()
            events: Counter[str] = Counter()
            for s in of:
                assert s is not None
                what.update(s.what)
                events.update(s.events)
            if what:
                details.append(f"\n{database}, {scenario}: lock waits (session-samples, all runs):")
                details += [f"    {n:>5}  {w}" for w, n in what.most_common(8)]
            if events:
                busy = sum(events.values())
                top = ", ".join(f"{e} {n / busy:.0%}" for e, n in events.most_common(6))
                details.append(
                    f"\n{database}, {scenario}: busy worker sessions' wait events: {top}"
                )
    return lines + details


def baseline_table(drains: list[BaseDrain], base: str) -> list[str]:
    lines = [
        "| database | tree | drains (jobs/s, spawn to exit) | median | first start to last finish,"
        " median jobs/s (min-max) | change of the median |",
        "|---|---|---|---:|---:|---:|",
    ]
    for database in dict.fromkeys(d.database for d in drains):
        medians = {}
        for which in ("base", "this"):
            mine = [d for d in drains if d.database == database and d.tree == which]
            if not mine:
                continue
            medians[which] = statistics.median(d.rate for d in mine)
            change = ""
            if which == "this" and "base" in medians:
                change = f"{(medians['this'] / medians['base'] - 1) * 100:+.1f}%"
                spans = {
                    t: statistics.median(
                        d.span_rate for d in drains if d.database == database and d.tree == t
                    )
                    for t in ("base", "this")
                }
                change += f" (span {(spans['this'] / spans['base'] - 1) * 100:+.1f}%)"
            label = f"{base} (before workflows)" if which == "base" else "this checkout"
            lines.append(
                f"| {database} | {label} | {' / '.join(f'{d.rate:,.0f}' for d in mine)} "
                f"| {medians[which]:,.0f} | {spread([d.span_rate for d in mine], '{:,.0f}')} "
                f"| {change} |"
            )
    return lines


# --- main ------------------------------------------------------------------------------

FANOUT_PAIRS = [
    ("chord", "plain", "chord wall time against plain tasks"),
    ("chord+ANALYZE", "plain", ""),
    ("plain", "plain", ""),
]
CHAIN_PAIRS = [
    ("chain", "by hand", "chain wall time against the hand-made sequence"),
    ("by hand", "by hand", ""),
    ("parallel", "by hand", ""),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=tuple(DATABASES), action="append",
                        help="a database to run on (repeatable; default all three)")  # fmt: skip
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated, of {','.join(PARTS)} (default all)")  # fmt: skip
    parser.add_argument("--fanout", type=int, default=10_000, help="the chord's width")
    parser.add_argument("--chain", type=int, default=1_000, help="the chain's length")
    parser.add_argument("--drain", type=int, default=20_000, help="part 4's plain tasks")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each side per part")
    parser.add_argument("--workers", type=int, default=4, help="worker processes, parts 1-3")
    parser.add_argument("--concurrency", type=int, default=32, help="slots a worker, parts 1-3")
    parser.add_argument("--drain-concurrency", type=int, default=100, help="part 4's worker")
    parser.add_argument("--poll-interval", type=float, default=None,
                        help="the workers' --poll-interval (default jobq's, 0.5 s)")  # fmt: skip
    parser.add_argument("--task-logs", action="store_true",
                        help="workers log each task (else --log-level warning)")  # fmt: skip
    parser.add_argument("--sample-ms", type=float, default=10.0, help="part 3's sampling period")
    parser.add_argument("--base", default=BASE_COMMIT, help="part 4's commit before workflows")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a run may take")
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--mysql-url", default=DEFAULT_MYSQL_URL)
    parser.add_argument("--json", metavar="PATH", help="also write every run as JSON ('-': stdout)")
    args = parser.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    kinds = args.only or list(DATABASES)

    runs: list[Run] = []
    sampled: list[Run] = []
    drains: list[BaseDrain] = []
    with (
        tempfile.TemporaryDirectory(prefix="jobq-wf-") as tmp,
        contextmanager_or_none("baseline" in parts, args.base) as tree,
    ):
        for kind in kinds:
            with database(kind, args, tmp) as db:
                if "fanout" in parts:
                    runs += interleaved(db, ["chord", "chord+ANALYZE", "plain"], args.fanout, args)
                if "chain" in parts:
                    runs += interleaved(db, ["chain", "by hand", "parallel"], args.chain, args)
                if "contention" in parts:
                    if kind == "sqlite":
                        log("SQLite: no lock sampling (one writer at a time, by design)")
                    else:
                        sampled += interleaved(
                            db, ["chord", "plain"], args.fanout, args, sample=True
                        )
                if "baseline" in parts:
                    assert tree is not None
                    drains += baseline(db, tree, args)

    text = report(args, parts, runs, sampled, drains)
    print(text)
    if args.json:
        document = {
            "code": git_state(),
            "options": vars(args),
            "runs": [_run_json(r) for r in runs],
            "contention": [_run_json(r) for r in sampled],
            "baseline": [asdict(d) | {"rate": d.rate, "span_rate": d.span_rate} for d in drains],
        }
        dumped = json.dumps(document, indent=2, default=str)
        if args.json == "-":
            print(dumped)
        else:
            Path(args.json).write_text(dumped + "\n")
    return 1 if "**NOT met**" in text else 0


@contextmanager
def contextmanager_or_none(wanted: bool, commit: str) -> Iterator[Path | None]:
    if not wanted:
        yield None
        return
    with base_tree(commit) as tree:
        yield tree


def _run_json(run: Run) -> dict[str, Any]:
    data = asdict(run)
    data["after_first_start"] = run.after_first_start
    if run.sampled is not None:
        data["sampled"]["what"] = dict(run.sampled.what)
        data["sampled"]["events"] = dict(run.sampled.events)
    return data


def report(
    args: argparse.Namespace,
    parts: list[str],
    runs: list[Run],
    sampled: list[Run],
    drains: list[BaseDrain],
) -> str:
    poll = args.poll_interval if args.poll_interval is not None else 0.5
    logs = "logs on" if args.task_logs else "--log-level warning"
    out = [
        f"workflows.py at {git_state()}; {args.rounds} round(s) a part, sides interleaved;"
        f" parts 1-3: {args.workers} worker processes x --concurrency {args.concurrency},"
        f" --poll-interval {poll:g}, {logs}",
        "",
    ]
    fanout = [r for r in runs if r.part == "fanout"]
    chain = [r for r in runs if r.part == "chain"]
    if fanout:
        out += [f"## 1. Fan-out of {args.fanout:,} with a fan-in callback, against plain tasks", ""]
        out += [*wall_table(fanout, FANOUT_PAIRS), "", *verdicts(fanout, FANOUT_PAIRS), ""]
    if chain:
        out += [f"## 2. A {args.chain:,}-step chain, against the same steps by hand", ""]
        out += [*wall_table(chain, CHAIN_PAIRS), "", *verdicts(chain, CHAIN_PAIRS), ""]
    if sampled:
        out += [
            f"## 3. Lock waits of worker sessions during the fan-in (sampled every"
            f" {args.sample_ms:g} ms; on MariaDB every {MYSQL_MIN_INTERVAL * 1000:.0f} ms at"
            " least)",
            "",
        ]
        out += [*contention_table(sampled), ""]
    if drains:
        conc = args.drain_concurrency
        out += [
            f"## 4. Plain drain of {args.drain:,} no-op tasks: one `jobq worker --burst"
            f" --concurrency {conc}`, this checkout against {args.base}",
            "",
        ]
        out += [*baseline_table(drains, args.base), ""]
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
