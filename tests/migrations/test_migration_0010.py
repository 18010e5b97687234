"""Revision 0010 (paused queues, trace context) step by step: up from 0009 and back, with
limits and tasks in the database; the CHECK of jobq_limits before and after."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

import jobq
from jobq.dialects.schema import limits
from jobq.engine import migrations
from tests.migrations.rows import ADDED_BY_0010, COLUMNS_AT_0009, old_revision_store, task_rows
from tests.migrations.test_migration_0006 import at_revision
from tests.migrations.test_migrations import jobq_ddl

#: jobq_limits's columns at 0009 (this jobq's Store reads 0010's).
LIMIT_COLUMNS = ("queue", "concurrency", "rate_count", "rate_period", "generation")
#: What the database may raise for a CHECK that fails (MariaDB: an OperationalError).
REFUSED = (sa.exc.IntegrityError, sa.exc.OperationalError)


def limit_rows(store: jobq.Store) -> list[tuple[Any, ...]]:
    query = sa.select(*(limits.c[name] for name in LIMIT_COLUMNS)).order_by(limits.c.queue)
    with store.engine.connect() as conn:
        return [tuple(row) for row in conn.execute(query)]


def insert_limit(store: jobq.Store, queue: str, concurrency: int | None) -> None:
    """A row of jobq_limits as 0009 has it (no paused column named)."""
    values = {"queue": queue, "concurrency": concurrency, "generation": 7}
    with store.engine.begin() as conn:
        conn.execute(sa.insert(limits).values(**values, updated_at=datetime.now(UTC)))


def test_up_from_0009_keeps_limits_and_tasks_and_pauses_nothing(empty_url: str) -> None:
    store = old_revision_store(empty_url)
    at_revision(store, "0009")
    insert_limit(store, "emails", 3)
    store.enqueue("t", {"n": 1}, queue="emails")  # 0009's INSERT: no trace_context
    rows = task_rows(store, COLUMNS_AT_0009)
    limits = limit_rows(store)
    store.migrate()
    assert task_rows(store, COLUMNS_AT_0009) == rows
    assert task_rows(store, ["id", *ADDED_BY_0010]) == [
        {"id": rows[0]["id"], "trace_context": None}
    ]
    assert limit_rows(store) == limits
    assert store.paused_queues() == []
    assert list(store.limits()) == ["emails"]
    store.dispose()


def test_down_to_0009_drops_pauses_that_limit_nothing_and_restores_the_check(
    empty_url: str,
) -> None:
    store = old_revision_store(empty_url)
    store.migrate()
    with store.engine.connect() as conn:
        head_ddl = jobq_ddl(conn)
    store.set_limit("emails", concurrency=3)
    store.pause_queue("emails")  # limited and paused: the limit stays, unpaused
    store.pause_queue("reports")  # paused only: the row goes
    with store.engine.begin() as conn:
        migrations.downgrade(conn, "0009")
        assert migrations.current(conn) == "0009"
    assert [row[:2] for row in limit_rows(store)] == [("emails", 3)]
    with pytest.raises(REFUSED, match="jobq_limits_not_empty"):
        insert_limit(store, "nothing", None)
    store.migrate()
    with store.engine.connect() as conn:
        assert jobq_ddl(conn) == head_ddl
    assert store.paused_queues() == [] and list(store.limits()) == ["emails"]
    store.dispose()
