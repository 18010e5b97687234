"""The benchmarks' shared harness: databases to run on, jobq worker processes timed from
spawn to exit, and the Markdown results table (what the machine is doing meanwhile:
benchmarks/_machine.py).

Every script in benchmarks/ takes its set-up from here, so that each of them measures
the same way: a schema (PostgreSQL), database (MariaDB / MySQL) or file (SQLite) of its
own, emptied and refilled between runs; workers started with this interpreter and the
checkout importable; progress on stderr, the report on stdout.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import functools
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import sqlalchemy as sa

import jobq

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MYSQL_URL = os.environ.get(
    "JOBQ_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test"
)
DEFAULT_POSTGRES_URL = os.environ.get(
    "JOBQ_TEST_POSTGRES_URL", "postgresql+psycopg://root@127.0.0.1:5432/test"
)
#: The server of the scripts that load millions of rows (set it to keep them off the
#: test server).
BENCH_POSTGRES_URL = os.environ.get(
    "JOBQ_BENCH_POSTGRES_URL", "postgresql+psycopg://root@127.0.0.1:5432/test"
)
TABLE = "jobq_tasks"
APP_PATH = "benchmarks.noop_app:app"
SYNC_TASK = "bench.noop"  # benchmarks/noop_app.py
ASYNC_TASK = "bench.noop_async"
PEERS_PYTHON = ROOT / "benchmarks" / ".venv-peers" / "bin" / "python"
# What jobq's SQLite dialect runs on every new connection.
SQLITE_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA busy_timeout=30000",
)


# --- the report ------------------------------------------------------------------------


def log(message: str) -> None:
    """Write a progress line to stderr (stdout is kept for the report)."""
    print(message, file=sys.stderr, flush=True)


def markdown_table(header: Sequence[str], align: str, rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table: ``align`` has one letter a column, ``l`` (``---``), ``r``
    (``---:``) or ``c`` (``:---:``); each row's cells are shown with ``str``."""
    if len(align) != len(header):
        raise ValueError(f"{len(header)} columns but {len(align)} alignments")
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "".join({"l": "---|", "r": "---:|", "c": ":---:|"}[a] for a in align),
    ]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def git_state(root: Path = ROOT) -> str:
    """The commit of the checkout at ``root`` (this one unless told), and whether its jobq/
    differs from it (the code measured)."""

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown commit"
    dirty = git("status", "--porcelain", "--", "jobq", "alembic")
    return f"commit {commit}" + (" with uncommitted changes in jobq/" if dirty else "")


def percentile(samples: Sequence[float], p: float) -> float:
    """The nearest-rank ``p``th percentile of ``samples`` (not empty)."""
    xs = sorted(samples)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * len(xs)) - 1))]


def spread(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    """'median (min-max)' of ``values``; the one value alone if there is one."""
    if not values:
        return "-"
    median = fmt.format(statistics.median(values))
    if len(values) == 1:
        return median
    return f"{median} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def csv_ints(text: str) -> list[int]:
    """``1,2,4`` as [1, 2, 4] (argparse type)."""
    values = [int(x) for x in text.split(",") if x.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"positive integers, comma-separated: {text!r}")
    return values


def utc(value: Any) -> datetime:
    """A time as the drivers return it (aware, naive UTC, or SQLite's text), in UTC."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


# --- databases -------------------------------------------------------------------------


def psycopg_conninfo(url: str | sa.URL) -> str:
    """A libpq URI for the same database as a SQLAlchemy URL."""
    u = sa.make_url(url).set(drivername="postgresql")
    return u.render_as_string(hide_password=False)


def connect_postgres(url: str | sa.URL, *, autocommit: bool = False) -> Any:
    """A bare psycopg 3 connection; autocommit off is psycopg's (and SQLAlchemy's) default."""
    import psycopg

    return psycopg.connect(psycopg_conninfo(url), autocommit=autocommit)


def connect_sqlite(path: str) -> sqlite3.Connection:
    """A bare sqlite3 connection set up as jobq's SQLite dialect sets up its own."""
    conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    for pragma in SQLITE_PRAGMAS:
        conn.execute(pragma)
    return conn


def sqlite_url(path: str) -> str:
    """The SQLAlchemy URL of the SQLite file ``path``."""
    return f"sqlite:///{os.path.abspath(path)}"


def _admin(url: str, *statements: str, store: bool = False) -> None:
    # MySQL URLs go through jobq's Store, which sets its driver up as the workers' is.
    engine = jobq.Store(url).engine if store else sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


def in_schema(url: str, schema: str) -> str:
    """``url`` with its search_path set to ``schema``, which is created if missing.

    The benchmarks empty and refill the tasks table; a schema of their own keeps them
    away from any jobq_tasks table already in the database.
    """
    if not schema:
        return url
    if not schema.isidentifier():
        raise ValueError(f"not a plain schema name: {schema!r}")
    _admin(url, f"CREATE SCHEMA IF NOT EXISTS {schema}")
    u = sa.make_url(url).update_query_dict({"options": f"-csearch_path={schema}"})
    return u.render_as_string(hide_password=False)


def drop_schema(url: str, schema: str) -> None:
    """Drop ``schema`` and all in it, if it exists (nothing if ``schema`` is empty)."""
    if schema:
        _admin(url, f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def mysql_database(url: str, name: str) -> str:
    """The URL of database ``name`` on ``url``'s MySQL server, created empty now."""
    drop, create = (
        f"DROP DATABASE IF EXISTS {name}",
        f"CREATE DATABASE {name} CHARACTER SET utf8mb4",
    )
    _admin(url, drop, create, store=True)
    url = jobq.Store(url).engine.url
    return url.set(database=name).render_as_string(hide_password=False)


def drop_mysql_database(url: str, name: str) -> None:
    """Drop database ``name`` of ``url``'s MySQL server if it exists."""
    _admin(url, f"DROP DATABASE IF EXISTS {name}", store=True)


def mysql_server(url: str) -> str:
    """'MariaDB' or 'MySQL': which server ``url`` reaches."""
    engine = jobq.Store(url).engine
    try:
        with engine.connect() as conn:
            return "MariaDB" if conn.dialect.is_mariadb else "MySQL"
    finally:
        engine.dispose()


@contextmanager
def own_database(kind: str, postgres_url: str, schema: str, file: str = "jobq.db") -> Iterator[str]:
    """The URL of a database of the run's own for the block: ``kind`` 'sqlite', ``file``
    in a temporary directory, deleted after; 'postgresql', ``schema`` of ``postgres_url``,
    created now and dropped after."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield sqlite_url(os.path.join(tmp, file))
        return
    url = in_schema(postgres_url, schema)
    try:
        yield url
    finally:
        drop_schema(postgres_url, schema)


@dataclass
class Database:
    """Where the runs' tasks live: a URL, a label, and a Store the benchmark checks with."""

    url: str
    label: str
    store: jobq.Store = field(init=False)

    def __post_init__(self) -> None:
        self.store = jobq.Store(self.url)
        self.store.migrate()

    @property
    def kind(self) -> str:
        """SQLAlchemy's dialect name: postgresql, mysql, mariadb or sqlite."""
        return self.store.engine.dialect.name


@contextmanager
def database(url: str, tmp: str, name: str) -> Iterator[Database]:
    """A schema (PostgreSQL), database (MariaDB / MySQL) or file (SQLite: ``url`` is
    'sqlite', the file goes in ``tmp``) called ``name``, the run's own, migrated; dropped
    afterwards."""
    if url.startswith("sqlite:"):
        raise SystemExit("--database-url: give 'sqlite' (the run makes a temporary file)")
    backend = "sqlite" if url == "sqlite" else sa.make_url(url).get_backend_name()
    if backend not in ("sqlite", "postgresql", "mysql", "mariadb"):
        raise SystemExit(f"--database-url: not PostgreSQL, MariaDB/MySQL nor SQLite: {backend}")
    db = None
    try:
        if backend == "sqlite":
            db = Database(sqlite_url(os.path.join(tmp, f"{name}.db")), "SQLite")
        elif backend == "postgresql":
            drop_schema(url, name)
            db = Database(in_schema(url, name), "PostgreSQL")
        else:
            db = Database(mysql_database(url, name), "MariaDB/MySQL")
        yield db
    finally:
        if db is not None:
            db.store.dispose()
        if backend == "postgresql":
            drop_schema(url, name)
        elif backend != "sqlite":
            drop_mysql_database(url, name)


def reset(store: jobq.Store) -> None:
    """Empty the tasks table: TRUNCATE on PostgreSQL and MySQL; DELETE and a WAL checkpoint
    on SQLite.

    The schedules that reference task rows go too (CASCADE; on MySQL, their table first).
    """
    if store.engine.dialect.name == "postgresql":
        with store.engine.begin() as conn:
            conn.exec_driver_sql(f"TRUNCATE {TABLE} CASCADE")
        return
    if store.engine.dialect.name in ("mysql", "mariadb"):
        with store.engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM jobq_schedules")
            conn.exec_driver_sql("SET foreign_key_checks = 0")  # TRUNCATE refuses otherwise
            conn.exec_driver_sql(f"TRUNCATE {TABLE}")
            conn.exec_driver_sql("SET foreign_key_checks = 1")
        return
    conn = connect_sqlite(store.engine.url.database or "")
    try:
        conn.execute(f"DELETE FROM {TABLE}")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def analyze(store: jobq.Store) -> None:
    """ANALYZE the tables a capture reads (tasks, fair keys), so that the planner knows the
    rows just loaded, as autovacuum would tell it a minute later."""
    mysql = store.engine.dialect.name in ("mysql", "mariadb")
    with store.engine.begin() as conn:
        for table in (TABLE, "jobq_fair_keys"):
            conn.exec_driver_sql(f"ANALYZE TABLE {table}" if mysql else f"ANALYZE {table}")


def status_counts(store: jobq.Store) -> dict[str, int]:
    """How many tasks are in each status."""
    with store.engine.connect() as conn:
        rows = conn.exec_driver_sql(f"SELECT status, count(*) FROM {TABLE} GROUP BY status")
        return {status: n for status, n in rows}


# --- worker processes ------------------------------------------------------------------


def worker_env(url: str, pycache: str | None = None, **extra: str) -> dict[str, str]:
    """Our environment, with jobq's database at ``url``, the checkout importable and
    ``extra`` set; with ``pycache``, a byte-code cache of the run's own there, else the
    checkout compiled in place.

    An installed package has its modules compiled (pip compiles a wheel's, the peers'
    included); with PYTHONDONTWRITEBYTECODE set, as on the benchmark machine, every jobq
    process would compile the checkout from source instead: CPU at each start that no
    installed jobq pays."""
    env = dict(os.environ)
    env["JOBQ_DATABASE_URL"] = url
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    else:
        compile_checkout()
    env.update(extra)
    return env


@functools.cache
def compile_checkout() -> None:
    """Compile jobq's and the benchmarks' modules into their ``__pycache__`` folders, once
    a run. Not into a PYTHONPYCACHEPREFIX: a process given one looks there for every
    module's byte code, the standard library's and the peers' too, and would compile those
    from source instead."""
    for package in ("jobq", "benchmarks"):
        compileall.compile_dir(ROOT / package, quiet=1)


def jobq_cmd(*args: str) -> list[str]:
    """A ``jobq`` command line run with this interpreter."""
    return [sys.executable, "-m", "jobq.cli", *args]


def jobq_worker_cmd(*options: str, app: str = APP_PATH) -> list[str]:
    """The command line of a jobq worker running ``app`` (benchmarks/noop_app.py)."""
    return jobq_cmd("worker", "--app", app, *options)


def tail(stderr: IO[bytes], what: str, lines: int = 60) -> None:
    """Copy the last ``lines`` lines written to the file ``stderr`` to our stderr."""
    stderr.flush()
    stderr.seek(0)
    text = stderr.read().decode(errors="replace").splitlines()
    log(f"--- {what}: last {min(len(text), lines)} of {len(text)} stderr lines ---")
    for line in text[-lines:]:
        log(line)


def stop(procs: Sequence[subprocess.Popen[Any]], grace: float = 40.0) -> list[int]:
    """SIGTERM what still runs (a supervisor passes it on), then SIGKILL after ``grace`` s;
    the indexes of those that had to be killed."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    killed = []
    for i, proc in enumerate(procs):
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            killed.append(i)
    return killed


def run_commands(
    commands: Sequence[Sequence[str]],
    env: dict[str, str],
    timeout: float,
    what: str,
    tail_lines: int = 60,
) -> tuple[float, str]:
    """Start every command at once in the checkout and wait for all to exit 0: the seconds
    from the first spawn to the last exit, and what they wrote to stderr. Raises (after
    stopping what still runs and showing the stderr tails) on a non-zero exit or past
    ``timeout``."""
    with contextlib.ExitStack() as files:
        stderrs = [files.enter_context(tempfile.TemporaryFile()) for _ in commands]
        procs: list[subprocess.Popen[bytes]] = []
        start = time.perf_counter()
        try:
            for cmd, stderr in zip(commands, stderrs, strict=True):
                procs.append(
                    subprocess.Popen(
                        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr
                    )
                )
            deadline = start + timeout
            for proc in procs:
                proc.wait(timeout=max(0.0, deadline - time.perf_counter()))
            seconds = time.perf_counter() - start
        except subprocess.TimeoutExpired:
            stop(procs)
            for i, stderr in enumerate(stderrs):
                tail(stderr, f"{what}: command {i} (timed out)", tail_lines)
            raise RuntimeError(f"{what}: not finished within {timeout} s") from None
        except BaseException:
            stop(procs)
            raise
        failed = [(i, p.returncode) for i, p in enumerate(procs) if p.returncode != 0]
        for i, code in failed:
            tail(stderrs[i], f"{what}: command {i} exited {code}", tail_lines)
        if failed:
            raise RuntimeError(f"{what}: commands exited {failed}")
        text = ""
        for stderr in stderrs:
            stderr.seek(0)
            text += stderr.read().decode(errors="replace")
    return seconds, text
