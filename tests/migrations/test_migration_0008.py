"""Revision 0008 (the runs of each schedule) step by step: up from 0007 and back.

test_migrations.py checks that head builds exactly jobq/schema.py and that a round trip
through base restores it; here, the step from the previous revision that deployed
databases take, with a schedule and a run under way in them.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

import jobq
from jobq import Status, migrations
from jobq.schedule import Cron
from tests.helpers import all_rows, set_columns
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
    set_columns(store, task_id, run_at=PAST)
    (run,) = store.capture(10, worker_id="w")
    assert run.id == task_id and run.recurring
    return run


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
    not half-written; after `migrate` the run under way ends and is recorded."""
    store = jobq.Store(empty_url)
    at_revision(store, "0007")
    assert RUNS_TABLE not in table_names(store)
    task_id = sync_sweep(store)
    plain = store.enqueue("p", {}, run_at=PAST)
    (other,) = store.capture(10, worker_id="w")
    assert other.id == plain
    assert store.set_status(plain, other.attempt, Status.DONE)  # a plain end needs no table
    run = start_run(store, task_id)

    with pytest.raises(jobq.SchemaNotMigrated, match="run `jobq migrate`"):
        store.schedule_runs("sweep")
    before = all_rows(store)
    with pytest.raises(jobq.SchemaNotMigrated, match="run `jobq migrate`"):
        store.set_status(run.id, run.attempt, Status.DONE)
    assert all_rows(store) == before  # the end was rolled back whole: still in progress
    assert store.get(run.id).status is Status.IN_PROGRESS  # type: ignore[union-attr]

    store.migrate()
    assert revision(store) == migrations.head()
    assert RUNS_TABLE in table_names(store)
    assert run_indexes(store) == ["jobq_schedule_runs_schedule"]
    assert all_rows(store) == before
    assert store.schedule_runs("sweep") == []
    assert store.set_status(run.id, run.attempt, Status.DONE)
    (recorded,) = store.schedule_runs("sweep")
    assert (recorded.status, recorded.task_id, recorded.attempt) == ("done", run.id, 1)
    store.dispose()


def test_downgrade_to_0007_drops_only_the_runs_table_and_upgrade_restores_it(
    empty_url: str,
) -> None:
    store = jobq.Store(empty_url)
    store.migrate()
    with store.engine.connect() as conn:
        before = jobq_ddl(conn)
    task_id = sync_sweep(store)
    run = start_run(store, task_id)
    assert store.set_status(run.id, run.attempt, Status.FAILED, error="boom")
    assert [r.status for r in store.schedule_runs("sweep")] == ["failed"]
    tables = table_names(store)
    schedules = store.schedules()
    rows = all_rows(store)

    with store.engine.begin() as conn:
        migrations.downgrade(conn, "0007")
    assert revision(store) == "0007"
    assert table_names(store) == tables - {RUNS_TABLE}
    assert store.schedules() == schedules
    assert all_rows(store) == rows

    store.migrate()
    assert revision(store) == migrations.head()
    with store.engine.connect() as conn:
        assert jobq_ddl(conn) == before
    assert store.schedule_runs("sweep") == []  # the runs went with their table
    run = start_run(store, task_id)
    assert store.set_status(run.id, run.attempt, Status.DONE)
    assert [(r.status, r.attempt) for r in store.schedule_runs("sweep")] == [("done", 2)]
    store.dispose()
