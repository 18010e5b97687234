"""What every fuzz test shares: a Store that already holds rows, and snapshots of them.

A refused input must leave every row of every jobq table as it was; an accepted one may
only add its own. Comparing snapshots of all the tables before and after says which.

The tables are migrated once per session and database (hundreds of examples run in a
few seconds; migrating for each test would cost more), and emptied and seeded afresh
for each test.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa

import jobq
from jobq.cron.periodic import Schedule
from jobq.db.validation import check_key
from jobq.dialects.schema import (
    HOLDS_UNIQUE_KEY,
    limit_starts,
    limits,
    locks,
    schedules,
    tasks,
    workers,
)
from jobq.locks import Mutex

#: Every table jobq writes.
TABLES = (tasks, schedules, limits, limit_starts, locks, workers)

#: Each table's rows as the driver returns them (JSON as text, times as the database
#: writes them), by table name: the strictest comparison there is.
Snapshot = dict[str, list[tuple[Any, ...]]]

_SELECTS = {
    table.name: "SELECT * FROM {} ORDER BY {}".format(
        table.name, ", ".join(column.name for column in table.primary_key.columns)
    )
    for table in TABLES
}


def snapshot(store: jobq.Store) -> Snapshot:
    """Every row of every jobq table, in primary-key order (the first column is the id)."""
    with store.engine.connect() as conn:
        return {
            name: [tuple(row) for row in conn.exec_driver_sql(sql)]
            for name, sql in _SELECTS.items()
        }


class Tables:
    """Snapshots of one store's tables, taken around each example.

    The snapshot an example ends with starts the next one (each snapshot costs a round
    trip per table); an example that ends without one makes the next take its own.
    """

    def __init__(self, store: jobq.Store) -> None:
        self.store = store
        self._last: Snapshot | None = None

    def before(self) -> Snapshot:
        last, self._last = self._last, None
        return snapshot(self.store) if last is None else last

    def after(self) -> Snapshot:
        self._last = snapshot(self.store)
        return self._last


def added_tasks(before: Snapshot, after: Snapshot) -> list[int]:
    """The ids of the task rows ``after`` has and ``before`` lacks, in order; fails if any
    other row of any table changed."""
    old = {row[0] for row in before["jobq_tasks"]}
    kept = [row for row in after["jobq_tasks"] if row[0] in old]
    assert kept == before["jobq_tasks"], "an existing task row changed"
    others = {name: rows for name, rows in after.items() if name != "jobq_tasks"}
    assert others == {name: rows for name, rows in before.items() if name != "jobq_tasks"}, (
        "a row of another table changed"
    )
    return [row[0] for row in after["jobq_tasks"] if row[0] not in old]


def holder(store: jobq.Store, unique_key: Any) -> int | None:
    """The id of the task holding ``unique_key`` now (waiting, running or to be retried);
    None for a key no row can hold (None, or no key at all)."""
    try:
        check_key("unique_key", unique_key, required=True)
    except jobq.InvalidOption:
        return None
    held = sa.and_(tasks.c.unique_key == unique_key, HOLDS_UNIQUE_KEY)
    with store.engine.connect() as conn:
        return conn.execute(sa.select(tasks.c.id).where(held)).scalar()


def one_line(message: str) -> str:
    """``message``, checked to be one non-empty line (no traceback, no dump)."""
    assert message.strip(), "empty error message"
    assert "\n" not in message.strip(), f"not one line: {message!r}"
    assert "Traceback" not in message
    return message


@dataclass(frozen=True)
class Seeded:
    """A store holding one row of each kind, and the ids of its task rows."""

    store: jobq.Store
    tables: Tables
    queued: int
    held: int  # holds the unique key "held"
    running: int
    failed: int  # failed, no retries left
    cancelled: int


@pytest.fixture(scope="session")
def fuzz_sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'jobq.db'}"


@pytest.fixture
def fuzz_url(backend: str, request: pytest.FixtureRequest) -> str:
    """The URL of this session's fuzz database on ``backend`` (skips without one)."""
    name = {"sqlite": "fuzz_sqlite_url", "postgresql": "postgres_url", "mysql": "mysql_url"}
    return str(request.getfixturevalue(name[backend]))


@pytest.fixture
def store(fuzz_url: str) -> Iterator[jobq.Store]:
    """A Store on empty, migrated jobq tables."""
    store = jobq.Store(fuzz_url)
    store.migrate()  # a no-op once done, unless other tests dropped the tables meanwhile
    with store.engine.begin() as conn:
        for table in reversed(TABLES):  # schedules before the tasks they name
            conn.execute(sa.delete(table))
    yield store
    store.dispose()


@pytest.fixture
def seeded(store: jobq.Store) -> Seeded:
    """``store`` with tasks in every status, a limit, a lock, a schedule and a worker."""
    queued = store.enqueue("seed", {"n": 1})
    held = store.enqueue("seed", {"n": 2}, unique_key="held", queue="other", priority=5)
    store.enqueue("seed", {"n": 3}, queue="run")
    (running,) = store.capture(1, queues="run", worker_id="seeder")
    store.enqueue("seed", {"n": 4}, queue="fail", retries=0)
    (failing,) = store.capture(1, queues="fail", worker_id="seeder")
    assert store.set_status(failing.id, failing.attempt, "failed", error="boom")
    cancelled = store.enqueue("seed", {"n": 5}, queue="cancel")
    assert store.cancel(cancelled)
    store.set_limit("limited", concurrency=2, rate="5/1m")
    assert Mutex(store, "seed-lock").acquire()
    store.sync_schedules(
        [Schedule(name="seed-cron", cron=jobq.Cron("0 0 1 1 *"), task="seed", queue="cron")]
    )
    store.register_worker("seed-worker", host="h", pid=1, queues=["default"], concurrency=1)
    return Seeded(store, Tables(store), queued, held, running.id, failing.id, cancelled)
