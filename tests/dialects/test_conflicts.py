"""Deadlocks and isolation levels, on the databases that have them (PostgreSQL, MySQL).

A transaction the database aborts to break a deadlock was undone whole: jobq runs its own
units again and never shows the error. And whatever the isolation level of an engine a
user hands jobq, every task is captured exactly once while others are enqueued.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

import jobq
from jobq import Status
from jobq.dialects.schema import limit_starts, limits
from tests import procs, shared_database

#: One migrated database per backend for the module, emptied before each test.
backend, shared_url, db_url = shared_database.FIXTURES

SERVERS = pytest.mark.parametrize("backend", ["postgresql", "mysql"], scope="module")


def waiting_for(watcher: sa.Connection, holder: sa.Connection) -> int:
    """How many transactions wait for a lock that ``holder``'s transaction holds (MySQL: that
    wait for a lock in its database, which this test session has to itself)."""
    if watcher.dialect.name == "postgresql":
        pid = holder.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        query = sa.text(
            "SELECT count(*) FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))"
        ).bindparams(pid=pid)
    else:
        query = sa.text(
            "SELECT count(*) FROM information_schema.innodb_trx AS t "
            "JOIN information_schema.processlist AS p ON p.id = t.trx_mysql_thread_id "
            "WHERE t.trx_state = 'LOCK WAIT' AND p.db = DATABASE()"
        )
    return int(watcher.execute(query).scalar_one())


@SERVERS
def test_a_unit_the_database_aborts_to_break_a_deadlock_runs_again(store: jobq.Store) -> None:
    """clear_limit deletes the queue's limit row, then its start rows. An outside
    transaction holds the start rows and then asks for the limit row: a deadlock. The
    database aborts clear_limit's transaction (MySQL picks the one that changed fewer
    rows; PostgreSQL the one whose check runs first, the one that waited first), and
    clear_limit runs again once the outside transaction commits."""
    store.set_limit("q", rate="1000/1h")
    store.enqueue_many("t", [{}] * 300, queue="q")
    assert len(store.capture(300, queues="q", worker_id="w")) == 300  # 300 start rows
    runs: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("DELETE FROM JOBQ_LIMITS "):
            runs.append(statement)

    event.listen(store.engine, "before_cursor_execute", count)
    outside = sa.create_engine(store.engine.url)
    outcome: dict[str, Any] = {}

    def clear() -> None:
        try:
            outcome["cleared"] = store.clear_limit("q")
        except Exception as error:  # shown by the assertion below
            outcome["error"] = error

    try:
        with outside.connect() as holder, outside.connect() as watcher:
            with holder.begin():
                if store.dialect.name == "postgresql":
                    # The victim is whichever waiter's deadlock check fires first; on a busy
                    # machine clear_limit's timer can fire late: this one's fires far later.
                    holder.exec_driver_sql("SET LOCAL deadlock_timeout = '30s'")
                deleted = holder.execute(sa.delete(limit_starts).where(limit_starts.c.queue == "q"))
                assert deleted.rowcount == 300
                clearing = threading.Thread(target=clear)
                clearing.start()
                deadline = time.monotonic() + 30
                while waiting_for(watcher, holder) == 0:  # clear_limit waits for the start rows
                    assert time.monotonic() < deadline, "clear_limit never waited"
                    watcher.rollback()
                    # InnoDB refreshes its lock tables only once unread for 0.1 s.
                    time.sleep(0.2)
                # The cycle: this waits for the limit row clear_limit has deleted.
                holder.execute(sa.select(limits).where(limits.c.queue == "q").with_for_update())
            clearing.join(timeout=60)
    finally:
        event.remove(store.engine, "before_cursor_execute", count)
        outside.dispose()
    assert "error" not in outcome, outcome
    assert outcome == {"cleared": True}
    assert len(runs) == 2, "the aborted unit should have run again, once"
    assert store.limits() == {}


@SERVERS
@pytest.mark.slow
@pytest.mark.parametrize("isolation", [None, "READ COMMITTED", "REPEATABLE READ"])
def test_producers_and_consumers_run_every_task_once_at_any_isolation_level(
    store: jobq.Store, db_url: str, tmp_path: Path, isolation: str | None
) -> None:
    """Two processes enqueue 2,000 tasks each (one at a time, with unique keys, and in
    batches) while four capture and complete them in every way the Store offers. None
    is the engine jobq creates (READ COMMITTED on MySQL); the others are engines of the
    caller's own. No error surfaces, and every task is captured once, at attempt 1, and
    done. (Conflicts are rare here; the deadlock test above makes one for certain.)"""
    ctx = multiprocessing.get_context("spawn")
    start, produced = ctx.Event(), ctx.Event()
    producers = [
        ctx.Process(
            target=procs.produce,
            args=(db_url, isolation, n, 2_000, start, str(tmp_path / f"produced-{n}.json")),
        )
        for n in range(2)
    ]
    consumers = [
        ctx.Process(
            target=procs.consume,
            args=(
                db_url,
                isolation,
                seed,
                produced,
                start,
                str(tmp_path / f"consumed-{seed}.json"),
            ),
        )
        for seed in range(4)
    ]
    for process in producers + consumers:
        process.start()
    start.set()
    for process in producers:
        process.join(timeout=300)
    produced.set()
    for process in consumers:
        process.join(timeout=300)
    assert [p.exitcode for p in producers + consumers] == [0] * 6
    results = [json.loads((tmp_path / f"consumed-{n}.json").read_text()) for n in range(4)]
    enqueued = [i for n in range(2) for i in _read_ids(tmp_path / f"produced-{n}.json")]
    captured = [tuple(fence) for result in results for fence in result["captured"]]
    counts = Counter(task_id for task_id, _ in captured)
    assert len(set(enqueued)) == 4_000
    assert set(counts) == set(enqueued), "a task was never captured"
    assert set(counts.values()) == {1}, "a task was captured twice"
    assert {attempt for _, attempt in captured} == {1}
    assert sum(result["refused"] for result in results) == 0
    assert store.counts() == {("default", Status.DONE): 4_000}


def _read_ids(path: Path) -> list[int]:
    return json.loads(path.read_text())["ids"]
