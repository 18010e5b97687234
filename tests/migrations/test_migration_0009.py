"""Revision 0009 (progress, cancel requests, awaited ends) step by step: up from 0008 and
back, keeping the tasks; on PostgreSQL, the trigger that tells waiters of ends.

test_migrations.py checks that head builds exactly jobq/dialects/schema.py and that a round trip
through base restores it; here, the step from the previous revision that deployed
databases take, with tasks queued, running and done in them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

import jobq
from jobq import Status
from jobq.dialects.schema import tasks
from jobq.engine import migrations
from tests.migrations.rows import (
    ADDED_BY_0009,
    ADDED_BY_0010,
    COLUMNS_SINCE_0011,
    capture_in_sql,
    end_in_sql,
    old_revision_store,
    task_rows,
)
from tests.migrations.test_migration_0006 import at_revision
from tests.migrations.test_migrations import jobq_ddl

#: What 0009's columns hold in a row nobody has said anything of.
UNSAID = {"progress": None, "cancel_requested_at": None, "awaited": False}

#: The PostgreSQL objects 0009 makes, besides its columns.
TRIGGERS = {"jobq_tasks_ended", "jobq_tasks_deleted", "jobq_tasks_awaited"}
FUNCTIONS = {"jobq_notify_ended", "jobq_notify_awaited"}


def task_columns(store: jobq.Store) -> set[str]:
    with store.engine.connect() as conn:
        return {column["name"] for column in sa.inspect(conn).get_columns("jobq_tasks")}


def unsaid(store: jobq.Store) -> list[dict[str, Any]]:
    """0009's columns of every row, as a row nobody said anything of holds them."""
    return [{"id": row["id"], **UNSAID} for row in task_rows(store, ["id"])]


def pg_objects(store: jobq.Store) -> dict[str, str]:
    """The definitions of jobq_tasks's triggers and of jobq's trigger functions, by name.

    jobq_ddl (tables, indexes, constraints) leaves these out; 0003's jobq_tasks_enqueued
    and jobq_notify_enqueued are among them, to show that 0009 leaves them alone.
    """
    with store.engine.connect() as conn:
        triggers = conn.exec_driver_sql(
            "SELECT t.tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t "
            "JOIN pg_class c ON c.oid = t.tgrelid AND c.relname = 'jobq_tasks' "
            "JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = current_schema() "
            "WHERE NOT t.tgisinternal"
        )
        functions = conn.exec_driver_sql(
            "SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace AND n.nspname = current_schema() "
            "WHERE left(p.proname, 5) = 'jobq_'"
        )
        return {name: definition for name, definition in [*triggers, *functions]}


def test_upgrade_from_0008_keeps_every_task_and_says_nothing_of_them(empty_url: str) -> None:
    """Up from 0008 every row keeps every value, and 0009's columns hold NULL, NULL and
    false in each: no progress said, no cancel asked for, nobody waiting."""
    store = old_revision_store(empty_url)
    at_revision(store, "0008")
    columns = task_columns(store)
    assert not set(ADDED_BY_0009) & columns
    later = datetime.now(UTC) + timedelta(days=1)
    store.enqueue("plain", {})
    store.enqueue(
        "full", {"n": [1, "two"]}, queue="q", priority=7, run_at=later, retries=5,
        timeout=12.5, lease=45, unique_key="u", lock_key="k",
    )  # fmt: skip
    running = store.enqueue("running", {"r": 1}, lock_key="held")
    done = store.enqueue("done", {})
    # Runs under way and ended at 0008 in plain SQL: this jobq's capture and ends need
    # 0009's columns.
    capture_in_sql(store, running, worker_id="w-0008")
    end_in_sql(store, done, capture_in_sql(store, done), result={"answer": 42})
    before = task_rows(store)
    assert [row["status"] for row in before] == ["queued", "queued", "in_progress", "done"]

    at_revision(store, "0009")
    assert task_columns(store) == columns | set(ADDED_BY_0009)
    assert task_rows(store) == before
    assert task_rows(store, ["id", *ADDED_BY_0009]) == unsaid(store)
    # A row written afterwards without naming them (an older jobq still running during a
    # rolling deploy writes so) gets the same: awaited has a server default.
    with store.engine.begin() as conn:
        (old_style,) = conn.execute(
            sa.insert(tasks).values(
                name="old", args={}, run_at=later, retries_left=3, created_at=later
            )
        ).inserted_primary_key
    assert task_rows(store, ["id", *ADDED_BY_0009])[-1] == {"id": old_style, **UNSAID}
    store.dispose()


def test_downgrade_to_0008_drops_exactly_0009_and_upgrade_restores_it(empty_url: str) -> None:
    """Back to 0008 the three columns go (on PostgreSQL the triggers and their function
    too) and every row stays; up again, the DDL is head's exactly, and what the columns
    held is gone with them."""
    store = old_revision_store(empty_url)
    store.migrate()
    with store.engine.connect() as conn:
        before_ddl = jobq_ddl(conn)
    postgresql = store.engine.dialect.name == "postgresql"
    before_objects = pg_objects(store) if postgresql else {}
    if postgresql:
        assert set(before_objects) >= TRIGGERS | FUNCTIONS
    columns = task_columns(store)
    done = store.enqueue("done", {}, priority=2)
    running = store.enqueue("running", {}, lock_key="k", priority=1)
    store.enqueue("queued", {"q": 1}, unique_key="u")
    assert [task.id for task in store.capture(2, worker_id="w")] == [done, running]
    assert store.set_status(done, 1, Status.DONE, result={"ok": True})
    # Values in 0009's columns, written in SQL: the point is the schema, not the API.
    with store.engine.begin() as conn:
        conn.execute(
            sa.update(tasks)
            .where(tasks.c.id == running)
            .values(
                progress={"current": 1, "total": 3},
                cancel_requested_at=datetime.now(UTC),
                awaited=True,
            )
        )
        conn.execute(sa.update(tasks).where(tasks.c.id == done).values(awaited=True))
    rows = task_rows(store)
    assert [row["status"] for row in rows] == ["done", "in_progress", "queued"]

    with store.engine.begin() as conn:
        migrations.downgrade(conn, "0008")
        assert migrations.current(conn) == "0008"
    assert (
        task_columns(store)
        == columns - set(ADDED_BY_0009) - set(ADDED_BY_0010) - COLUMNS_SINCE_0011
    )
    assert task_rows(store) == rows
    if postgresql:
        left = pg_objects(store)
        assert not (TRIGGERS | FUNCTIONS) & set(left)
        assert left == {k: v for k, v in before_objects.items() if k not in TRIGGERS | FUNCTIONS}

    store.migrate()
    with store.engine.connect() as conn:
        assert migrations.current(conn) == migrations.head()
        assert jobq_ddl(conn) == before_ddl
    if postgresql:
        assert pg_objects(store) == before_objects
    assert task_rows(store) == rows
    assert task_rows(store, ["id", *ADDED_BY_0009]) == unsaid(store)
    store.dispose()


# --- PostgreSQL: the trigger that tells waiters of ends ---------------------------------


def conninfo(url: str) -> str:
    """A libpq URL of ``url``'s database (and search_path: the test's schema)."""
    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@dataclass
class Ears:
    """A session listening on channel jobq_ended and a session writing tasks, both
    autocommit: each statement of the writer commits, so what it fires is sent."""

    listener: psycopg.Connection[Any]
    writer: psycopg.Connection[Any]

    def write(self, sql: str, task_id: int) -> None:
        """Run ``sql`` (one ``%s``: the task id) in the writer; it must change one row."""
        assert self.writer.execute(sql, (task_id,)).rowcount == 1

    def heard(self, channel: str = "jobq_ended") -> list[str]:
        """The payloads heard from the writer on ``channel`` since the last call, up to a
        marker it notifies now.

        A session's notifications arrive in the order it committed them, so whatever the
        writer's statements before the marker fired arrives before it: no sleep, and an
        empty list proves that they fired nothing. The listener may hear other sessions
        (notifications are per database, and other tests' schemas share it): only the
        writer's count.
        """
        marker = f"marker-{uuid.uuid4()}"
        self.writer.execute("SELECT pg_notify('jobq_ended', %s)", (marker,))
        pid = self.writer.info.backend_pid
        payloads: list[str] = []
        for notify in self.listener.notifies(timeout=10.0):
            if notify.pid != pid:
                continue
            if notify.payload == marker:
                return payloads
            if notify.channel == channel:
                payloads.append(notify.payload)
        raise AssertionError(f"the marker never arrived; heard {payloads} before giving up")


@pytest.fixture
def ears(db_url: str) -> Iterator[Ears]:
    with (
        psycopg.connect(conninfo(db_url), autocommit=True) as listener,
        psycopg.connect(conninfo(db_url), autocommit=True) as writer,
    ):
        listener.execute("LISTEN jobq_ended")
        listener.execute("LISTEN jobq_tasks")
        yield Ears(listener, writer)


@pytest.fixture
def running(store: jobq.Store) -> int:
    """A task under way (captured by the Store, as a worker does): its id."""
    task_id = store.enqueue("t", {})
    (task,) = store.capture(1, worker_id="w")
    assert task.id == task_id and task.finished_at is None
    return task_id


FINISH = (
    "UPDATE jobq_tasks SET status = 'done', finished_at = now(), locked_by = NULL, "
    "locked_until = NULL WHERE id = %s AND finished_at IS NULL"
)
AWAIT = "UPDATE jobq_tasks SET awaited = true WHERE id = %s"


@pytest.mark.parametrize("backend", ["postgresql"])
def test_finishing_an_awaited_task_notifies_its_id_once(ears: Ears, running: int) -> None:
    """(a) The end of an awaited task sends one notification, its id; saying that someone
    waits sends none."""
    ears.write(AWAIT, running)
    assert ears.heard() == []
    ears.write(FINISH, running)
    assert ears.heard() == [str(running)]


@pytest.mark.parametrize("backend", ["postgresql"])
def test_finishing_a_task_nobody_awaits_notifies_nothing(ears: Ears, running: int) -> None:
    """(b) The WHEN clause keeps the ends nobody waits for from notifying."""
    ears.write(FINISH, running)
    assert ears.heard() == []


@pytest.mark.parametrize("backend", ["postgresql"])
def test_deleting_an_awaited_task_notifies_its_id_once(
    ears: Ears, store: jobq.Store, running: int
) -> None:
    """(c) A deleted awaited row (by prune, or an operator) ends the wait too; a deleted
    row nobody waits for notifies nothing."""
    waited = store.enqueue("t", {})
    ears.write(AWAIT, waited)
    ears.write("DELETE FROM jobq_tasks WHERE id = %s", waited)
    assert ears.heard() == [str(waited)]
    ears.write("DELETE FROM jobq_tasks WHERE id = %s", running)
    assert ears.heard() == []


@pytest.mark.parametrize("backend", ["postgresql"])
def test_updates_that_do_not_finish_an_awaited_task_notify_nothing(
    ears: Ears, running: int
) -> None:
    """(d) A heartbeat (the lease renewed) of an awaited run notifies nothing; nor does a
    later update of a finished one that sets finished_at again: only the step from NULL
    is an end."""
    ears.write(AWAIT, running)
    ears.write(
        "UPDATE jobq_tasks SET locked_until = now() + interval '30 seconds' WHERE id = %s",
        running,
    )
    assert ears.heard() == []
    ears.write(FINISH, running)
    assert ears.heard() == [str(running)]
    ears.write("UPDATE jobq_tasks SET finished_at = now() WHERE id = %s", running)
    assert ears.heard() == []


@pytest.mark.parametrize("backend", ["postgresql"])
def test_one_statement_finishing_several_awaited_tasks_notifies_each(
    ears: Ears, store: jobq.Store
) -> None:
    """A row trigger: a bulk end (as set_statuses writes) notifies each awaited row it
    finishes, and none of the others."""
    ids = store.enqueue_many("t", [{"i": i} for i in range(3)])
    assert len(store.capture(3, worker_id="w")) == 3
    ears.write(AWAIT, ids[0])
    ears.write(AWAIT, ids[2])
    assert ears.heard() == []
    ended = ears.writer.execute(
        "UPDATE jobq_tasks SET status = 'done', finished_at = now() WHERE id = ANY(%s)",
        (ids,),
    )
    assert ended.rowcount == 3
    assert sorted(ears.heard(), key=int) == [str(ids[0]), str(ids[2])]


@pytest.mark.parametrize("backend", ["postgresql"])
def test_marking_a_waiting_task_awaited_wakes_the_workers_of_its_queue(
    ears: Ears, store: jobq.Store, running: int
) -> None:
    """The mark locks the row for a moment, and a capture then skips it: once the mark
    commits, the enqueue channel names the task's queue so that workers look again. A
    running task's mark, or a second mark, wakes nobody."""
    waiting = store.enqueue("t", {}, queue="mail")
    ears.write(AWAIT, waiting)
    assert ears.heard("jobq_tasks") == ["mail"]
    ears.write(AWAIT, waiting)
    assert ears.heard("jobq_tasks") == []
    ears.write(AWAIT, running)
    assert ears.heard("jobq_tasks") == []
