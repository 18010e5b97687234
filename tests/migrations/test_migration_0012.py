"""Revision 0012 (a worker's supervisor) step by step: up from 0011 and back, with
registered workers in the database."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa

import jobq
from jobq.engine import migrations
from tests.migrations.test_migration_0006 import at_revision
from tests.migrations.test_migrations import jobq_ddl

WORKERS_AT_0011 = ("worker_id", "host", "pid", "concurrency")


def worker_rows(conn: sa.Connection) -> list[tuple[object, ...]]:
    columns = ", ".join(WORKERS_AT_0011)
    return [tuple(row) for row in conn.execute(sa.text(f"SELECT {columns} FROM jobq_workers"))]


def test_up_from_0011_keeps_workers_with_no_supervisor(empty_url: str) -> None:
    store = jobq.Store(empty_url)
    at_revision(store, "0011")
    now = datetime.now(UTC)
    with store.engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO jobq_workers (worker_id, host, pid, concurrency, started_at, "
                "last_seen) VALUES ('w-1', 'alpha', 11, 4, :now, :now)"
            ),
            {"now": now},
        )
    store.migrate()
    (worker,) = store.live_workers()
    assert (worker.worker_id, worker.host, worker.pid, worker.supervisor_pid) == (
        "w-1", "alpha", 11, None,
    )  # fmt: skip
    store.dispose()


def test_down_to_0011_keeps_workers_and_up_again_is_head(empty_url: str) -> None:
    store = jobq.Store(empty_url)
    store.migrate()
    with store.engine.connect() as conn:
        head_ddl = jobq_ddl(conn)
    store.register_worker("w-2", host="beta", pid=22, queues=None, concurrency=2, supervisor_pid=2)
    with store.engine.begin() as conn:
        migrations.downgrade(conn, "0011")
        assert migrations.current(conn) == "0011"
        assert worker_rows(conn) == [("w-2", "beta", 22, 2)]
    store.migrate()
    with store.engine.connect() as conn:
        assert jobq_ddl(conn) == head_ddl
    assert [w.supervisor_pid for w in store.live_workers()] == [None]
    store.dispose()
