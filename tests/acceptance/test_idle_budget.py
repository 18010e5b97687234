"""What idle workers cost PostgreSQL: at most 2 connections each (one for work, one for
LISTEN; a `--processes N` group 2 N, its supervisor none), and under one transaction a
second each on average, the chores (rescue, workflow sweeps, purges) done by one elected
worker for all. Real `jobq worker` processes with their default options, on a database of
their own, whose statistics (pg_stat_database, pg_stat_activity) count nothing else.
"""

from __future__ import annotations

import contextlib
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
from tests.acceptance.test_hostile_tasks import alive_until, stop_all
from tests.conftest import missing
from tests.worker_processes import Workers

pytestmark = [pytest.mark.slow, pytest.mark.serial]

WORKERS = 5
#: Seconds over which the transactions are counted: an idle session reports its counts to
#: pg_stat_database up to 10 s late, at either end of the window, and a short window made
#: that lag a part of the rate (1.02 measured once beside a loaded machine, 0.89 usually).
WINDOW = 30.0
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


def server_sockets(pid: int, port: int) -> int:
    """How many TCP connections process ``pid`` has open to ``port`` (the database
    server's), from /proc: its socket descriptors among the established connections."""
    inodes = set()
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                remote, state, inode = fields[2], fields[3], fields[9]
                if state == "01" and int(remote.rsplit(":", 1)[1], 16) == port and inode in inodes:
                    count += 1
    return count


def group_pids(supervisor: int) -> list[int]:
    """The worker processes ``supervisor`` started (its children)."""
    with open(f"/proc/{supervisor}/task/{supervisor}/children") as children:
        return [int(pid) for pid in children.read().split()]


def test_idle_workers_hold_two_connections_and_make_under_one_transaction_a_second(
    database: str, tmp_path: Path
) -> None:
    """Two workers on their own and a `--processes 3` group: five workers."""
    workers = Workers("tests.apps.mixed:app", database, tmp_path, ["--poll-interval", "0.5"])
    started = [workers.start(), workers.start(), workers.start("--processes", "3")]
    supervisor = started[2].process.pid
    port = sa.make_url(database).port or 5432
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
        held: dict[int, int] = {}  # the most connections each process held
        while time.monotonic() - began < WINDOW:  # a measurement window, not a wait
            sessions.append(server_stats(database)[1])
            pids = [started[0].process.pid, started[1].process.pid, supervisor]
            for pid in [*pids, *group_pids(supervisor)]:
                held[pid] = max(held.get(pid, 0), server_sockets(pid, port))
            time.sleep(1.0)
        after, _ = server_stats(database)
        per_worker = (after - before) / (time.monotonic() - began) / WORKERS
        leader = upkeep_holder(store)
        assert max(sessions) <= 2 * WORKERS, sessions
        # The group holds 2 N: two a process, none for the supervisor.
        assert held.pop(supervisor) == 0
        assert len(held) == WORKERS and max(held.values()) <= 2, held
        assert sum(held.values()) >= WORKERS, held  # /proc was read right: each holds some
        assert per_worker < 1.0, f"{per_worker:.2f} transactions a second a worker"
        assert sum(w.worker_id == leader for w in store.live_workers()) == 1
    finally:
        store.dispose()
        stop_all(started)
        workers.kill_all()
