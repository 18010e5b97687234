"""Real databases for the tests: SQLite always, PostgreSQL when JOBQ_TEST_POSTGRES_URL is
set, MySQL / MariaDB when JOBQ_TEST_MYSQL_URL is set.

A service named in JOBQ_TEST_REQUIRE (CI sets it) fails the test instead of skipping.
PostgreSQL tests run in a schema of their own per test session, MySQL tests in a database
of their own, so they never touch other tables on the server they are given.
"""

from __future__ import annotations

import compileall
import os
import shutil
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

import jobq
from jobq.engine.database import Database
from tests import fresh_schema, tigerbeetle_server

# tests/django runs in a Python 3.12+ virtualenv with Django (tests/django/run.sh).
try:
    import django.tasks  # noqa: F401
except ImportError:
    collect_ignore = ["django"]


def pytest_configure(config: pytest.Config) -> None:
    """Compile jobq's and the tests' modules once, in the controller before its workers
    start: with PYTHONDONTWRITEBYTECODE set (CI's machine sets it) every worker process a
    test spawns would compile them from source instead, some 0.3 s of CPU each."""
    if not hasattr(config, "workerinput"):
        root = Path(__file__).resolve().parent.parent
        for package in ("jobq", "tests"):
            compileall.compile_dir(root / package, quiet=1)


BACKENDS = ["sqlite", "postgresql", "mysql"]
ENV = {
    "postgresql": "JOBQ_TEST_POSTGRES_URL",
    "mysql": "JOBQ_TEST_MYSQL_URL",
    "tigerbeetle": "JOBQ_TEST_TIGERBEETLE_BIN",
}


def required() -> set[str]:
    return {s.strip() for s in os.environ.get("JOBQ_TEST_REQUIRE", "").split(",") if s.strip()}


def missing(backend: str) -> None:
    """Skip for want of ``backend``, or fail when the run requires it."""
    reason = f"{backend} not configured: set {ENV.get(backend)}"
    if backend == "tigerbeetle":
        reason = "no tigerbeetle server binary: put one on PATH or set JOBQ_TEST_TIGERBEETLE_BIN"
    if backend == "pgbouncer":
        reason = "no pgbouncer on PATH (Debian: apt-get install pgbouncer)"
    if backend in required():
        pytest.fail(f"{reason} (required by JOBQ_TEST_REQUIRE)")
    pytest.skip(reason)


@contextmanager
def server_namespace(backend: str, create: str, drop: str) -> Iterator[tuple[str, str]]:
    """(base URL, name) of a namespace made on ``backend``'s server by the ``create`` SQL
    (``{name}`` in it is the name) and removed by ``drop`` at the end; skips (or fails,
    when required) if the server is not configured or not reachable."""
    base = os.environ.get(ENV[backend])
    if not base:
        missing(backend)
    name = f"jobq_test_{uuid.uuid4().hex[:8]}"
    admin = Database(base).engine  # the URL with jobq's default driver filled in
    try:
        with admin.begin() as conn:
            conn.exec_driver_sql(create.format(name=name))
    except sa.exc.OperationalError as error:
        if backend in required():
            raise
        pytest.skip(f"{backend} unreachable: {error.orig}")
    yield base, name
    with admin.begin() as conn:
        conn.exec_driver_sql(drop.format(name=name))
    admin.dispose()


@contextmanager
def fresh_namespace_url(backend: str) -> Iterator[str]:
    """A URL of a fresh schema (PostgreSQL: the URL's search_path) or database (MySQL) on
    ``backend``'s test server, dropped on leaving."""
    if backend == "postgresql":
        create, drop = "CREATE SCHEMA {name}", "DROP SCHEMA {name} CASCADE"
        with server_namespace("postgresql", create, drop) as (base, schema):
            url = sa.make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
            yield url.render_as_string(hide_password=False)
        return
    create = "CREATE DATABASE {name} CHARACTER SET utf8mb4"
    with server_namespace("mysql", create, "DROP DATABASE {name}") as (base, name):
        yield sa.make_url(base).set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A URL whose search_path is a fresh schema, dropped at the end of the session."""
    with fresh_namespace_url("postgresql") as url:
        yield url


@pytest.fixture(scope="session")
def mysql_url() -> Iterator[str]:
    """A URL of a fresh database on the MySQL server, dropped at the end of the session."""
    with fresh_namespace_url("mysql") as url:
        yield url


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


def session_url(backend: str, request: pytest.FixtureRequest) -> str:
    """The URL of the session's schema (PostgreSQL) or database (MySQL) on ``backend``."""
    fixture = {"postgresql": "postgres_url", "mysql": "mysql_url"}[backend]
    return str(request.getfixturevalue(fixture))


@pytest.fixture
def empty_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of a database with no jobq tables in it."""
    if backend == "sqlite":
        # An empty file, as a server's database exists before its tables: a command that
        # only reads refuses a SQLite file that does not exist (test_cli_first_run.py).
        (tmp_path / "jobq.db").touch()
        yield f"sqlite:///{tmp_path / 'jobq.db'}"
        return
    url = session_url(backend, request)
    _drop_jobq_tables(url)
    yield url
    _drop_jobq_tables(url)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated once for the session, copied for each test that needs one."""
    path = tmp_path_factory.mktemp("template") / "jobq.db"
    store = jobq.Store(f"sqlite:///{path}")
    store.migrate()
    store.dispose()
    with closing(sqlite3.connect(path)) as conn:  # everything in the file, none in a WAL
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


@pytest.fixture
def db_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of a freshly migrated database with no rows: on SQLite a copy of a file
    migrated once; on a server the session's schema, emptied if it is still as migrated,
    else migrated anew (tests/fresh_schema.py)."""
    if backend == "sqlite":
        path = tmp_path / "jobq.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        return f"sqlite:///{path}"
    url = session_url(backend, request)
    fresh = request.node.get_closest_marker("fresh_database") is not None
    fresh_schema.migrated(url, _drop_jobq_tables, fresh=fresh)
    return url


@pytest.fixture
def store(db_url: str) -> Iterator[jobq.Store]:
    s = jobq.Store(db_url)
    yield s
    s.dispose()


@pytest.fixture
def app(db_url: str) -> Iterator[jobq.App]:
    """An App on the test's database (its Store disposed after the test)."""
    app = jobq.App(db_url)
    yield app
    app.store.dispose()


def _drop_jobq_tables(url: str) -> None:
    engine = Database(url).engine
    with engine.begin() as conn:
        names = sa.inspect(conn).get_table_names()
        if conn.dialect.name in ("mysql", "mariadb"):
            conn.exec_driver_sql("SET foreign_key_checks = 0")  # no DROP ... CASCADE there
        for name in names:
            if name.startswith("jobq_"):
                conn.exec_driver_sql(f"DROP TABLE {name} CASCADE")
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql("DROP FUNCTION IF EXISTS jobq_notify_enqueued()")
    engine.dispose()


@pytest.fixture
def tigerbeetle(tmp_path: Path) -> Iterator[tigerbeetle_server.Server]:
    """A fresh single-replica TigerBeetle server (skips without a binary); stopped after."""
    pytest.importorskip("tigerbeetle", reason="the tigerbeetle client is not installed")
    executable = tigerbeetle_server.binary()
    if executable is None:
        missing("tigerbeetle")
    with tigerbeetle_server.running(executable, tmp_path) as server:
        yield server
