"""What idle workers cost PostgreSQL: at most 2 connections each (one for work, one for
LISTEN), and under one transaction a second each on average, the chores (rescue,
workflow sweeps, purges) done by one elected worker for all. Real `jobq worker`
processes with their default options, on a database of their own, whose statistics
(pg_stat_database, pg_stat_activity) count nothing else.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

import jobq
from jobq.upkeep import upkeep_holder
from tests import pgbouncer_server
from tests.acceptance.test_hostile_tasks import alive_until, stop
from tests.conftest import missing
from tests.worker_processes import Workers

pytestmark = pytest.mark.slow

WORKERS = 5
#: Seconds over which the transactions are counted.
WINDOW = 15.0
#: Seconds after the workers started before the window opens (see below).
SETTLE = 11.0


@pytest.fixture
def database() -> Iterator[str]:
    """The URL of a new, migrated database on the test server, dropped after."""
    server = os.environ.get("JOBQ_TEST_POSTGRES_URL")
    if not server:
        missing("postgresql")
    with pgbouncer_server.own_database(server) as name:
        url = sa.make_url(server).set(database=name).render_as_string(hide_password=False)
        store = jobq.Store(url)
        store.migrate()
        store.dispose()
        yield url


def server_stats(url: str) -> tuple[int, int]:
    """(transactions so far, sessions now) of ``url``'s database, read from another one."""
    parsed = sa.make_url(url)
    conninfo = (
        f"host={parsed.host} port={parsed.port or 5432} user={parsed.username} dbname=postgres"
    )
    with psycopg.connect(conninfo, autocommit=True) as admin:
        xacts = admin.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
            [parsed.database],
        ).fetchone()
        sessions = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [parsed.database]
        ).fetchone()
    assert xacts is not None and sessions is not None
    return int(xacts[0]), int(sessions[0])


def test_idle_workers_hold_two_connections_and_make_under_one_transaction_a_second(
    database: str, tmp_path: Path
) -> None:
    workers = Workers("tests.apps.mixed:app", database, tmp_path, ["--poll-interval", "0.5"])
    started = [workers.start() for _ in range(WORKERS)]
    store = jobq.Store(database)
    try:
        alive_until(
            started[0],
            lambda: len(store.live_workers()) == WORKERS and upkeep_holder(store) is not None,
        )
        store.dispose()  # its connection is in the database too: not counted
        # PostgreSQL adds an idle session's counts to pg_stat_database up to 10 s late:
        # the starts' transactions must all be in before the window opens.
        settled = time.monotonic() + SETTLE
        while time.monotonic() < settled:  # a measurement's settling time, not a wait
            time.sleep(0.5)
        before, _ = server_stats(database)
        began = time.monotonic()
        sessions = []
        while time.monotonic() - began < WINDOW:  # a measurement window, not a wait
            sessions.append(server_stats(database)[1])
            time.sleep(1.0)
        after, _ = server_stats(database)
        per_worker = (after - before) / (time.monotonic() - began) / WORKERS
        leader = upkeep_holder(store)
        assert max(sessions) <= 2 * WORKERS, sessions
        assert per_worker < 1.0, f"{per_worker:.2f} transactions a second a worker"
        assert sum(w.worker_id == leader for w in store.live_workers()) == 1
    finally:
        store.dispose()
        for worker in started:
            stop(worker)
        workers.kill_all()
