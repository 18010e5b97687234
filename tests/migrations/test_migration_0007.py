"""Revision 0007 (a NULL lease: the worker's definition decides) step by step.

Up from 0006 every row keeps its values, and rows enqueued afterwards without a lease
store NULL and are captured with their definition's lease; back down, NULL becomes the
old default of 30 s and the column is NOT NULL again.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

import jobq
from jobq.db.tasks import Leases
from jobq.engine import migrations
from tests.migrations.rows import capture_in_sql, old_revision_store, task_row, task_rows


def at_revision(store: jobq.Store, revision: str, *, down: bool = False) -> None:
    with store.engine.begin() as conn:
        (migrations.downgrade if down else migrations.upgrade)(conn, revision)


def lease_nullable(store: jobq.Store) -> bool:
    with store.engine.connect() as conn:
        (column,) = [c for c in sa.inspect(conn).get_columns("jobq_tasks") if c["name"] == "lease"]
    return bool(column["nullable"])


def by_id(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {row["id"]: row for row in rows}


def test_upgrade_from_0006_keeps_every_row_and_lets_leases_be_null(empty_url: str) -> None:
    """Up from 0006 every row keeps its values; a row enqueued afterwards without a lease
    stores NULL, and a capture gives it its definition's lease (the others keep theirs)."""
    store = old_revision_store(empty_url)
    at_revision(store, "0006")
    assert not lease_nullable(store)
    store.enqueue("t", {"a": 1}, lease=45, priority=3, unique_key="u")
    queued = store.enqueue_many("t", [{"b": i} for i in range(3)], lease=30, queue="q")
    # A run under way across the upgrade. This jobq's capture needs 0009's columns: the
    # same update in plain SQL (the first row of queue "q", as capture(1, queues=["q"])).
    running = queued[0]
    capture_in_sql(store, running)
    before = task_rows(store)

    at_revision(store, "0007")
    assert lease_nullable(store)
    assert by_id(task_rows(store)) == by_id(before)

    fresh = store.enqueue("sleepy", {})
    row = task_row(store, fresh)
    assert row is not None and row["lease"] is None
    # Captured at head, as no worker of this jobq captures below it: 0008 and 0009 leave
    # the leases alone, so the rows 0007 stored are the ones captured.
    store.migrate()
    leases = Leases(by_name=(("sleepy", 2.0),))
    captured = {task.id: task for task in store.capture(10, worker_id="w", lease=leases)}
    held = captured[fresh].locked_until - captured[fresh].started_at  # type: ignore[operator]
    assert round(held.total_seconds(), 1) == 2.0
    assert captured[before[0]["id"]].lease == 45
    assert running not in captured
    store.dispose()


def test_downgrade_to_0006_gives_null_leases_30_seconds(empty_url: str) -> None:
    store = old_revision_store(empty_url)
    at_revision(store, "0007")
    own = store.enqueue("t", {}, lease=12)
    unset = store.enqueue("t", {})
    at_revision(store, "0006", down=True)
    assert not lease_nullable(store)
    rows = by_id(task_rows(store))  # plain SQL: the Store reads 0009's columns
    assert (rows[own]["lease"], rows[unset]["lease"]) == (12, 30)
    at_revision(store, "0007")
    assert lease_nullable(store)
    store.dispose()
