"""Enqueues wait for the database on every backend, and `jobq enqueue --wait` does too.

test_enqueue_outages.py restarts a private PostgreSQL server; here the shared servers
stay up, and an outage is one of: sessions the server ends (pg_terminate_backend,
MariaDB's KILL), a way to the server cut by a TCP forwarder (tests/forwarder.py), or a
SQLite file that is not there (no outage: a mistake, not waited for).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import sqlalchemy as sa

import jobq
from tests.acceptance.test_cli import Cli
from tests.acceptance.test_enqueue_outages import LONG, name, rows_named
from tests.acceptance.test_worker_processes import wait_until
from tests.forwarder import Forwarder, forwarding
from tests.integration.test_database_errors import end_sessions, server_ids

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
@pytest.mark.parametrize("wait", [0.0, LONG])
def test_connections_the_server_ended_are_replaced_before_anything_is_sent(
    store: jobq.Store, db_url: str, wait: float
) -> None:
    store.enqueue_wait = wait
    for rows in (1, 3):
        store.enqueue_many("warm", [{}] * 4)
        held = server_ids(store)
        assert held
        end_sessions(store, held)
        wait_until(lambda: not set(held) & set(sessions(store)))  # noqa: B023
        task = name()
        store.enqueue_many(task, [{}] * rows) if rows > 1 else store.enqueue(task, {})
        assert rows_named(db_url, task) == {task: rows}
        assert set(server_ids(store)).isdisjoint(held)


def sessions(store: jobq.Store) -> list[int]:
    """The ids of every session on the server."""
    engine = sa.create_engine(store.engine.url)
    sql = (
        "SELECT pid FROM pg_stat_activity"
        if store.dialect.name == "postgresql"
        else "SELECT id FROM information_schema.processlist"
    )
    try:
        with engine.connect() as conn:
            return [int(i) for i in conn.exec_driver_sql(sql).scalars()]
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["mysql"])
def test_a_mariadb_session_killed_mid_insert_is_not_tried_again(
    store: jobq.Store, db_url: str
) -> None:
    """The INSERT waits on a table lock when its session is killed: lost in flight."""
    store.enqueue_wait = LONG
    task = name()
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as admin, ThreadPoolExecutor(1) as pool:
            admin.exec_driver_sql("LOCK TABLES jobq_tasks WRITE")
            pending = pool.submit(store.enqueue, task, {})

            def waiting() -> list[int]:
                return [
                    int(i)
                    for i in admin.exec_driver_sql(
                        "SELECT id FROM information_schema.processlist"
                        " WHERE info LIKE 'INSERT INTO jobq_tasks%%' AND state LIKE '%%lock%%'"
                    ).scalars()
                ]

            wait_until(lambda: bool(waiting()))
            [thread] = waiting()
            admin.exec_driver_sql(f"KILL {thread}")
            error = pending.exception(timeout=LONG)  # raised with the lock still held
            admin.exec_driver_sql("UNLOCK TABLES")
    finally:
        engine.dispose()
    assert isinstance(error, jobq.DatabaseUnavailable)
    assert "may or may not have been written" in str(error)
    assert rows_named(db_url, task) == {task: 0}


@pytest.fixture
def forwarder(db_url: str) -> Iterator[Forwarder]:
    with forwarding(db_url) as forwarder:
        yield forwarder


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_jobq_enqueue_waits_for_the_way_to_the_database(
    db_url: str, forwarder: Forwarder, tmp_path: Path
) -> None:
    cli = Cli(tmp_path)
    task = name()
    with ThreadPoolExecutor(1) as pool:
        forwarder.cut()
        running = pool.submit(cli, forwarder.url(db_url), "enqueue", task, "--wait", "60")
        wait_until(lambda: forwarder.refused >= 2)  # refused, and tried again
        forwarder.restore()
        done = running.result()
    assert (done.returncode, done.stderr.count("error")) == (0, 0), done.stderr
    assert int(done.stdout) > 0
    assert rows_named(db_url, task) == {task: 1}
    # --wait 0: refused once, at once; exit 1 with one line.
    forwarder.cut()
    refused = forwarder.refused
    done = cli(forwarder.url(db_url), "enqueue", task, "--wait", "0")
    assert done.returncode == 1 and forwarder.refused == refused + 1
    assert done.stderr.startswith("error: Cannot connect to database"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_missing_sqlite_file_is_not_waited_for(tmp_path: Path) -> None:
    """SQLite has no server to wait for: a file that is not there is a mistake
    (DatabaseNotFound), raised at once whatever the wait, and nothing is created."""
    path = tmp_path / "jobq.db"
    store = jobq.Store(f"sqlite:///{path}", enqueue_wait=LONG)
    began = time.monotonic()
    with pytest.raises(jobq.DatabaseNotFound):
        store.enqueue(name(), {})
    assert time.monotonic() - began < LONG / 2
    assert not path.exists()
