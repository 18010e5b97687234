"""Revision 0006 (per-queue limits) step by step: up from 0005 and back, keeping the tasks.

test_migrations.py checks that head builds exactly jobq/dialects/schema.py and that a round
trip through base restores it; here, the step from the previous revision that deployed
databases take, and the CHECK constraints the revision gives jobq_limits.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

import jobq
from jobq.dialects.schema import limits
from jobq.engine import migrations
from tests.migrations.rows import TABLES_SINCE_0011, old_revision_store, task_row
from tests.migrations.test_migrations import jobq_ddl

LIMIT_TABLES = {"jobq_limits", "jobq_limit_starts"}


def table_names(store: jobq.Store) -> set[str]:
    with store.engine.connect() as conn:
        return {name for name in sa.inspect(conn).get_table_names() if name.startswith("jobq_")}


def at_revision(store: jobq.Store, revision: str) -> None:
    with store.engine.begin() as conn:
        migrations.upgrade(conn, revision)


def test_upgrade_from_0005_adds_the_limit_tables_and_keeps_the_tasks(empty_url: str) -> None:
    store = old_revision_store(empty_url)
    at_revision(store, "0005")
    assert not LIMIT_TABLES & table_names(store)
    # Until 0007 a row must hold its lease: this jobq writes NULL for "the definition's".
    ids = store.enqueue_many("t", [{"i": i} for i in range(3)], queue="emails", lease=30)
    # This jobq's capture reads jobq_limits (and 0009's columns): a database left at 0005
    # says to migrate.
    with pytest.raises(jobq.SchemaNotMigrated, match="run `jobq migrate`"):
        store.capture(1, worker_id="w")
    with pytest.raises(jobq.SchemaNotMigrated):
        store.limits()

    store.migrate()
    with store.engine.connect() as conn:
        assert migrations.current(conn) == migrations.head()
    assert table_names(store) >= LIMIT_TABLES
    assert store.limits() == {}
    store.set_limit("emails", concurrency=2)
    assert [task.id for task in store.capture(10, worker_id="w")] == ids[:2]
    store.dispose()


def test_downgrade_to_0005_drops_only_the_limit_tables_and_upgrade_restores_them(
    empty_url: str,
) -> None:
    store = old_revision_store(empty_url)
    store.migrate()
    with store.engine.connect() as conn:
        before = jobq_ddl(conn)
    store.set_limit("emails", concurrency=1, rate="5/1m")
    ids = store.enqueue_many("t", [{}, {}], queue="emails")
    (running,) = store.capture(10, worker_id="w")
    tables = table_names(store)

    with store.engine.begin() as conn:
        migrations.downgrade(conn, "0005")
    with store.engine.connect() as conn:
        assert migrations.current(conn) == "0005"
    assert table_names(store) == (
        tables - LIMIT_TABLES - {"jobq_schedule_runs"} - TABLES_SINCE_0011
    )  # 0008's, 0011's and later
    # Plain SQL: this jobq's Store reads 0009's columns, which 0005 does not have.
    got = task_row(store, running.id)
    assert got is not None and got["status"] == jobq.Status.IN_PROGRESS.value
    assert task_row(store, ids[1]) is not None

    store.migrate()
    with store.engine.connect() as conn:
        assert jobq_ddl(conn) == before
    assert store.limits() == {}  # the limits went with their table
    store.queue_limits.forget()
    assert [task.id for task in store.capture(10, worker_id="w")] == [ids[1]]
    store.dispose()


BAD_ROWS = [
    ("concurrency 0", {"concurrency": 0}),
    ("concurrency -1", {"concurrency": -1}),
    ("neither", {}),
    ("rate count without period", {"rate_count": 5}),
    ("rate period without count", {"concurrency": 1, "rate_period": 2.0}),
    ("rate count 0", {"rate_count": 0, "rate_period": 2.0}),
    ("rate period 0", {"rate_count": 5, "rate_period": 0.0}),
    ("rate period negative", {"rate_count": 5, "rate_period": -1.0}),
]


@pytest.mark.parametrize("values", [row[1] for row in BAD_ROWS], ids=[row[0] for row in BAD_ROWS])
def test_the_database_refuses_a_limit_row_that_means_nothing(
    db_url: str, values: dict[str, Any]
) -> None:
    """The CHECK constraints of 0006 hold whoever writes the table (not only set_limit).

    Drivers differ in the class of the error (PyMySQL: OperationalError, for MariaDB's
    error 4025); each names the constraint.
    """
    engine = sa.create_engine(db_url)
    row = {"queue": "q", "generation": 1, "updated_at": datetime.now(UTC), **values}
    with pytest.raises(sa.exc.DBAPIError, match="jobq_limits_"), engine.begin() as conn:
        conn.execute(sa.insert(limits).values(**row))
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(limits)).scalar_one() == 0
    engine.dispose()


def test_the_database_accepts_the_limit_rows_set_limit_writes(db_url: str) -> None:
    engine = sa.create_engine(db_url)
    rows = [
        {"queue": "a", "concurrency": 1},
        {"queue": "b", "rate_count": 1, "rate_period": 0.001},
        {"queue": "c", "concurrency": 3, "rate_count": 10, "rate_period": 60.0},
    ]
    with engine.begin() as conn:
        for row in rows:
            conn.execute(
                sa.insert(limits).values(generation=1, updated_at=datetime.now(UTC), **row)
            )
    engine.dispose()
    store = jobq.Store(db_url)
    assert list(store.limits()) == ["a", "b", "c"]
    store.dispose()
