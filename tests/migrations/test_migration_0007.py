"""Revision 0007 (a NULL lease: the worker's definition decides) step by step.

Up from 0006 every row keeps its values, and rows enqueued afterwards without a lease
store NULL and are captured with their definition's lease; back down, NULL becomes the
old default of 30 s and the column is NOT NULL again.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

import jobq
from jobq import migrations
from jobq.tasks import Leases
from tests.helpers import all_rows


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
    store = jobq.Store(empty_url)
    at_revision(store, "0006")
    assert not lease_nullable(store)
    store.enqueue("t", {"a": 1}, lease=45, priority=3, unique_key="u")
    store.enqueue_many("t", [{"b": i} for i in range(3)], lease=30, queue="q")
    (running,) = store.capture(1, worker_id="w", queues=["q"])
    before = all_rows(store)

    at_revision(store, "0007")
    assert lease_nullable(store)
    assert by_id(all_rows(store)) == by_id(before)

    fresh = store.enqueue("sleepy", {})
    assert store.get(fresh) is not None and store.get(fresh).lease is None  # type: ignore[union-attr]
    leases = Leases(by_name=(("sleepy", 2.0),))
    captured = {task.id: task for task in store.capture(10, worker_id="w", lease=leases)}
    held = captured[fresh].locked_until - captured[fresh].started_at  # type: ignore[operator]
    assert round(held.total_seconds(), 1) == 2.0
    assert captured[before[0]["id"]].lease == 45
    assert running.id not in captured
    store.dispose()


def test_downgrade_to_0006_gives_null_leases_30_seconds(empty_url: str) -> None:
    store = jobq.Store(empty_url)
    at_revision(store, "0007")
    own = store.enqueue("t", {}, lease=12)
    unset = store.enqueue("t", {})
    at_revision(store, "0006", down=True)
    assert not lease_nullable(store)
    rows = by_id(all_rows(store))
    assert (rows[own]["lease"], rows[unset]["lease"]) == (12, 30)
    at_revision(store, "0007")
    assert lease_nullable(store)
    store.dispose()
