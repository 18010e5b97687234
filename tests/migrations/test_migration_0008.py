"""Revision 0008 (the runs of each schedule) step by step: up from 0007 and back.

test_migrations.py checks that head builds exactly jobq/dialects/schema.py and that a round trip
through base restores it; here, the step from the previous revision that deployed
databases take, with a schedule and a run under way in them.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

import jobq
from jobq import Status
from jobq.cron.schedule import Cron
from jobq.dialects.schema import tasks
from jobq.engine import migrations
from tests.migrations.rows import (
    TABLES_SINCE_0011,
    capture_in_sql,
    end_in_sql,
    old_revision_store,
    task_row,
    task_rows,
)
from tests.migrations.test_migration_0006 import at_revision, table_names
from tests.migrations.test_migrations import jobq_ddl

RUNS_TABLE = "jobq_schedule_runs"
PAST = datetime(2020, 1, 1, tzinfo=UTC)


def sync_sweep(store: jobq.Store) -> int:
    """Store schedule ``sweep`` (every minute), as a starting worker does; its task row."""
    cron = Cron("* * * * *")
    store.sync_schedules([jobq.Schedule(name="sweep", cron=cron, task="t", queue="default")])
    (state,) = store.schedules()
    return state.task_id


def start_run(store: jobq.Store, task_id: int) -> jobq.Task:
    """Make the schedule's tick due and capture its row."""
    make_due(store, task_id)
    (run,) = store.capture(10, worker_id="w")
    assert run.id == task_id and run.recurring
    return run


def make_due(store: jobq.Store, task_id: int) -> None:
    """Make the schedule's tick due. Plain SQL, as at 0007 (tests.helpers.set_columns
    writes through the whole table of jobq/dialects/schema.py, whose 0009 columns are missing)."""
    with store.engine.begin() as conn:
        conn.execute(sa.update(tasks).where(tasks.c.id == task_id).values(run_at=PAST))


def revision(store: jobq.Store) -> str | None:
    with store.engine.connect() as conn:
        return migrations.current(conn)


def run_indexes(store: jobq.Store) -> list[str]:
    with store.engine.connect() as conn:
        return sorted(index["name"] for index in sa.inspect(conn).get_indexes(RUNS_TABLE))


def test_upgrade_from_0007_adds_the_runs_table_and_keeps_schedules_and_runs(
    empty_url: str,
) -> None:
    """At 0007, reading the runs or ending a schedule's run says to migrate, and the end is
    not half-written; after `migrate` a plain task ended at 0007 stays as it was, and the
    schedule's run under way ends and is recorded."""
    store = old_revision_store(empty_url)
    at_revision(store, "0007")
    assert RUNS_TABLE not in table_names(store)
    task_id = sync_sweep(store)
    # The runs under way and ended at 0007 are written in plain SQL: this jobq's capture
    # and ends need 0009's columns, and no worker of it runs below head.
    plain = store.enqueue("p", {}, run_at=PAST)
    end_in_sql(store, plain, capture_in_sql(store, plain), result={"ok": True})
    make_due(store, task_id)
    attempt = capture_in_sql(store, task_id)

    with pytest.raises(jobq.SchemaNotMigrated, match="run `jobq migrate`"):
        store.schedule_runs("sweep")
    before = task_rows(store)
    with pytest.raises(jobq.SchemaNotMigrated, match="run `jobq migrate`"):
        store.set_status(task_id, attempt, Status.DONE)
    assert task_rows(store) == before  # the end was rolled back whole: still in progress
    row = task_row(store, task_id)
    assert row is not None and row["status"] == Status.IN_PROGRESS.value

    store.migrate()
    assert revision(store) == migrations.head()
    assert RUNS_TABLE in table_names(store)
    assert run_indexes(store) == ["jobq_schedule_runs_schedule"]
    assert task_rows(store) == before
    assert store.schedule_runs("sweep") == []
    assert store.set_status(task_id, attempt, Status.DONE)
    (recorded,) = store.schedule_runs("sweep")
    assert (recorded.status, recorded.task_id, recorded.attempt) == ("done", task_id, 1)
    store.dispose()


def test_downgrade_to_0007_drops_only_the_runs_table_and_upgrade_restores_it(
    empty_url: str,
) -> None:
    store = old_revision_store(empty_url)
    store.migrate()
    with store.engine.connect() as conn:
        before = jobq_ddl(conn)
    task_id = sync_sweep(store)
    run = start_run(store, task_id)
    assert store.set_status(run.id, run.attempt, Status.FAILED, error="boom")
    assert [r.status for r in store.schedule_runs("sweep")] == ["failed"]
    tables = table_names(store)
    schedules = store.schedules()
    rows = task_rows(store)  # the columns 0007 has: the Store reads 0009's too

    with store.engine.begin() as conn:
        migrations.downgrade(conn, "0007")
    assert revision(store) == "0007"
    assert table_names(store) == tables - {RUNS_TABLE} - TABLES_SINCE_0011
    assert store.schedules() == schedules
    assert task_rows(store) == rows

    store.migrate()
    assert revision(store) == migrations.head()
    with store.engine.connect() as conn:
        assert jobq_ddl(conn) == before
    assert store.schedule_runs("sweep") == []  # the runs went with their table
    run = start_run(store, task_id)
    assert store.set_status(run.id, run.attempt, Status.DONE)
    assert [(r.status, r.attempt) for r in store.schedule_runs("sweep")] == [("done", 2)]
    store.dispose()
