"""Shared helpers for the benchmarks: capture the SQL a Store sends, talk to the raw drivers.

The Store's statements are never written out by hand here. ``capture_statement`` runs a
Store method with a ``before_cursor_execute`` listener on its engine, records the exact
statement text and parameters SQLAlchemy hands to the DBAPI cursor, then aborts the
Store's transaction so nothing is written. The benchmarks replay that text with psycopg
or sqlite3 directly.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

import jobq

DEFAULT_MYSQL_URL = os.environ.get(
    "JOBQ_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test"
)
DEFAULT_POSTGRES_URL = os.environ.get(
    "JOBQ_TEST_POSTGRES_URL", "postgresql+psycopg://root@127.0.0.1:5432/test"
)
TABLE = "jobq_tasks"
# Store.enqueue_many sends at most this many rows per statement (jobq.core.store._BATCH).
ENQUEUE_BATCH = 5000
# What jobq's SQLite dialect runs on every new connection.
SQLITE_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA busy_timeout=30000",
)


class _Stop(Exception):
    """Raised from the listener to abort the Store's transaction once the SQL is seen."""


@dataclass(frozen=True)
class Statement:
    """One statement exactly as SQLAlchemy passed it to ``cursor.execute``.

    ``transactional`` says whether the Store ran it inside a transaction it opened
    (psycopg with autocommit off / SQLite after BEGIN), or on its own in autocommit.
    """

    sql: str
    params: dict[str, Any] | tuple[Any, ...]
    transactional: bool

    def slot_of(self, value: Any) -> str | int:
        """The dict key or tuple index of the one parameter equal to ``value``."""
        items = self.params.items() if isinstance(self.params, dict) else enumerate(self.params)
        slots = [k for k, v in items if type(v) is type(value) and v == value]
        if len(slots) != 1:
            raise LookupError(f"{value!r} is bound {len(slots)} times in {self.sql[:80]!r}...")
        return slots[0]

    def slots_containing(self, needle: str) -> list[str | int]:
        """The dict keys or tuple indexes of every string parameter containing ``needle``.

        A parameter may be bound more than once (SQLite's set_statuses reads its JSON
        array twice); at least one slot must hold it.
        """
        items = self.params.items() if isinstance(self.params, dict) else enumerate(self.params)
        slots = [k for k, v in items if isinstance(v, str) and needle in v]
        if not slots:
            raise LookupError(f"{needle!r} is in no parameter of {self.sql[:80]!r}...")
        return slots

    def binder(self, *slots: str | int) -> Callable[..., Any]:
        """A fast function returning the parameters with ``slots`` replaced, in order."""
        if isinstance(self.params, dict):
            base = dict(self.params)

            def bind_named(*values: Any) -> dict[str, Any]:
                params = base.copy()
                for slot, value in zip(slots, values, strict=True):
                    params[slot] = value  # type: ignore[index]
                return params

            return bind_named
        template = list(self.params)

        def bind_positional(*values: Any) -> list[Any]:
            params = template.copy()
            for slot, value in zip(slots, values, strict=True):
                params[slot] = value  # type: ignore[index]
            return params

        return bind_positional


def capture_statement(store: jobq.Store, action: Callable[[], Any]) -> Statement:
    """The first statement (other than BEGIN) ``action`` makes ``store`` send; nothing runs."""
    seen: list[Statement] = []

    def listener(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("BEGIN"):
            return
        if executemany:
            raise AssertionError("expected a single execute, got executemany")
        params = dict(parameters) if isinstance(parameters, dict) else tuple(parameters)
        dbapi_conn = cursor.connection
        if isinstance(dbapi_conn, sqlite3.Connection):
            transactional = dbapi_conn.in_transaction
        else:
            transactional = not dbapi_conn.autocommit
        seen.append(Statement(statement, params, transactional))
        raise _Stop

    # Capture reads the queues' limits first when its copy is older than a second.
    store.limited_queues()
    event.listen(store.engine, "before_cursor_execute", listener)
    try:
        action()
    except _Stop:
        pass
    finally:
        event.remove(store.engine, "before_cursor_execute", listener)
    if len(seen) != 1:
        raise RuntimeError(f"expected to capture one statement, got {len(seen)}")
    return seen[0]


def psycopg_conninfo(url: str | sa.URL) -> str:
    """A libpq URI for the same database as a SQLAlchemy URL."""
    u = sa.make_url(url).set(drivername="postgresql")
    return u.render_as_string(hide_password=False)


def in_schema(url: str, schema: str) -> str:
    """``url`` with its search_path set to ``schema``, which is created if missing.

    The benchmarks empty and refill the tasks table; a schema of their own keeps them
    away from any jobq_tasks table already in the database.
    """
    if not schema:
        return url
    if not schema.isidentifier():
        raise ValueError(f"not a plain schema name: {schema!r}")
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    finally:
        engine.dispose()
    u = sa.make_url(url).update_query_dict({"options": f"-csearch_path={schema}"})
    return u.render_as_string(hide_password=False)


def mysql_database(url: str, name: str) -> str:
    """The URL of database ``name`` on ``url``'s MySQL server, created empty now."""
    engine = jobq.Store(url).engine
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
        conn.exec_driver_sql(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
    engine.dispose()
    return engine.url.set(database=name).render_as_string(hide_password=False)


def mysql_server(url: str) -> str:
    """'MariaDB' or 'MySQL': which server ``url`` reaches."""
    engine = jobq.Store(url).engine
    with engine.connect() as conn:
        name = "MariaDB" if conn.dialect.is_mariadb else "MySQL"
    engine.dispose()
    return name


def drop_mysql_database(url: str, name: str) -> None:
    engine = jobq.Store(url).engine
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
    engine.dispose()


def drop_schema(url: str, schema: str) -> None:
    if not schema:
        return
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    finally:
        engine.dispose()


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
    return f"sqlite:///{os.path.abspath(path)}"


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
    conn = connect_sqlite(store.engine.url.database)
    try:
        conn.execute(f"DELETE FROM {TABLE}")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def analyze(store: jobq.Store) -> None:
    mysql = store.engine.dialect.name in ("mysql", "mariadb")
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"ANALYZE TABLE {TABLE}" if mysql else f"ANALYZE {TABLE}")


def status_counts(store: jobq.Store) -> dict[str, int]:
    with store.engine.connect() as conn:
        rows = conn.exec_driver_sql(f"SELECT status, count(*) FROM {TABLE} GROUP BY status")
        return {status: n for status, n in rows}


def git_state() -> str:
    """The checkout's commit, and whether jobq/ differs from it (the code measured)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", "-C", root, *args], capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown commit"
    dirty = git("status", "--porcelain", "--", "jobq", "alembic")
    return f"commit {commit}" + (" with uncommitted changes in jobq/" if dirty else "")
