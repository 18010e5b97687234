"""Names and keys compare exactly on every database, and bulk enqueue returns its rows' ids.

MySQL's default collations would make 'Q' the queue 'q', and 'k ' the unique key 'k'
(case-insensitive, trailing spaces ignored); jobq's tables use a binary NO PAD collation
there, so each behaves as on PostgreSQL and SQLite.
"""

from __future__ import annotations

import itertools

import pytest
import sqlalchemy as sa
from sqlalchemy import event

import jobq
from jobq.locks import Lease, Mutex
from tests.helpers import all_rows

VARIANTS = ["k", "K", "k ", " k", "k\u0301", "\u1e31"]  # case, spaces, accents


def test_unique_keys_that_differ_in_case_spaces_or_accents_are_different_keys(
    store: jobq.Store,
) -> None:
    ids = [store.enqueue("t", {"n": n}, unique_key=key) for n, key in enumerate(VARIANTS)]
    assert len(set(ids)) == len(VARIANTS)
    assert [store.enqueue("t", {}, unique_key=key) for key in VARIANTS] == ids


def test_queues_that_differ_in_case_or_spaces_are_different_queues(store: jobq.Store) -> None:
    for queue in ("q", "Q", "q "):
        store.enqueue("t", {"queue": queue}, queue=queue)
    for queue in ("q", "Q", "q "):
        (task,) = store.capture(10, queues=[queue], worker_id="w")
        assert task.args == {"queue": queue} and task.queue_id == queue


def test_lock_keys_that_differ_only_in_trailing_spaces_do_not_hold_each_other(
    store: jobq.Store,
) -> None:
    store.enqueue("t", {}, lock_key="ledger:1")
    store.enqueue("t", {}, lock_key="ledger:1 ")
    assert len(store.capture(10, worker_id="w")) == 2


def test_lock_names_compare_exactly(store: jobq.Store) -> None:
    assert Mutex(store, "nightly").acquire()
    assert Mutex(store, "Nightly").acquire()
    assert Lease(store, "nightly ", ttl=30).acquire()


@pytest.mark.parametrize("backend", ["mysql"])
def test_bulk_ids_follow_the_servers_auto_increment_step(empty_url: str) -> None:
    """With auto_increment_increment = 2 (as Galera sets it), enqueue_many still returns
    the ids of its own rows, in argument order."""
    engine = jobq.Store(empty_url).engine  # the URL with jobq's driver filled in
    stepping = sa.create_engine(engine.url, isolation_level="READ COMMITTED")

    @event.listens_for(stepping, "connect")
    def step_by_two(dbapi_connection: object, _record: object) -> None:
        cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
        cursor.execute("SET SESSION auto_increment_increment = 2")
        cursor.close()

    store = jobq.Store(stepping)
    store.migrate()
    first = store.enqueue_many("t", [{"n": n} for n in range(5)])
    with stepping.begin() as conn:
        inside = store.enqueue_many("t", [{"n": n} for n in range(5, 8)], connection=conn)
    ids = first + inside
    assert [b - a for a, b in itertools.pairwise(ids)] == [2] * 7
    rows = {row["id"]: row["args"]["n"] for row in all_rows(store)}
    assert [rows[i] for i in ids] == list(range(8))
    store.dispose()
