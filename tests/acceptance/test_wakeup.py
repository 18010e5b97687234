"""On PostgreSQL an idle worker wakes on NOTIFY instead of waiting for its next poll."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
import sqlalchemy as sa

import jobq
from jobq import Status
from tests.acceptance.test_worker_processes import store, wait_until, worker  # noqa: F401
from tests.apps import mixed

pytestmark = [
    pytest.mark.slow,
    pytest.mark.serial,
    pytest.mark.parametrize("backend", ["postgresql"]),
]


def conninfo(db_url: str) -> str:
    return sa.make_url(db_url).set(drivername="postgresql").render_as_string(hide_password=False)


def test_one_notification_per_insert_statement_naming_its_queues(
    store: jobq.Store,  # noqa: F811
    db_url: str,
) -> None:
    # Notifications are per database: other schemas' tasks may show up; count only ours.
    bulk, single = f"bulk-{uuid.uuid4().hex[:8]}", f"single-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(conninfo(db_url), autocommit=True) as listener:
        listener.execute("LISTEN jobq_tasks")
        mixed.double.enqueue_many([{"n": i} for i in range(500)], _queue=bulk)
        mixed.double.enqueue(n=1, _queue=single)
        payloads = [n.payload for n in listener.notifies(timeout=1.0)]
    assert [p for p in payloads if bulk in p or single in p] == [bulk, single]


def started_within(store: jobq.Store, task_id: int, seconds: float) -> None:  # noqa: F811
    wait_until(lambda: store.get(task_id).status is Status.DONE, timeout=30)  # type: ignore[union-attr]
    task = store.get(task_id)
    assert task is not None and task.started_at is not None and task.created_at is not None
    waited = (task.started_at - task.created_at).total_seconds()
    assert waited < seconds, f"started {waited:.3f} s after enqueue"


@contextmanager
def idle_worker(store: jobq.Store, db_url: str) -> Iterator[list[str]]:  # noqa: F811
    """A running worker gone idle: its next poll is 10 s away. Yields, after it stops, its
    stderr as the list's one item."""
    stderr: list[str] = []
    process = worker(db_url, "--poll-interval", "10")
    try:
        wait_until(lambda: bool(store.live_workers()))
        time.sleep(1.0)
        yield stderr
    finally:
        process.send_signal(signal.SIGTERM)
        stderr.append(process.communicate(timeout=30)[1])


def test_an_idle_worker_starts_a_task_within_half_a_second(
    store: jobq.Store,  # noqa: F811
    db_url: str,
) -> None:
    with idle_worker(store, db_url):
        started_within(store, mixed.double.enqueue(n=2), 0.5)


def test_the_listener_reconnects_after_its_connection_is_killed(
    store: jobq.Store,  # noqa: F811
    db_url: str,
) -> None:
    with idle_worker(store, db_url) as stderr:
        with psycopg.connect(conninfo(db_url), autocommit=True) as admin:
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE query = 'LISTEN jobq_tasks' AND pid <> pg_backend_pid()"
            ).fetchone()
        assert killed is not None and killed[0] >= 1
        time.sleep(2.0)  # the listener notices and reconnects
        started_within(store, mixed.double.enqueue(n=3), 0.5)
    assert "LISTEN connection lost" in stderr[0]


def test_a_released_workflow_node_notifies_its_queue(
    store: jobq.Store,  # noqa: F811
    db_url: str,
) -> None:
    """Queueing a blocked node is an UPDATE, which the insert trigger does not see: the
    end that releases it notifies the node's queue itself."""
    app = jobq.App(db_url)
    after = f"after-{uuid.uuid4().hex[:8]}"

    @app.task(retries=0)
    def first() -> int:
        return 1

    @app.task()
    def second() -> int:
        return 2

    handle = jobq.chain(first.s(), second.s(_queue=after)).enqueue()
    (task,) = app.store.capture(1, worker_id="w", queues="default")
    assert task.id == handle.tasks[0].id
    with psycopg.connect(conninfo(db_url), autocommit=True) as listener:
        listener.execute("LISTEN jobq_tasks")
        end = jobq.db.tasks.Completion(task.id, task.attempt, Status.DONE, in_workflow=True)
        assert app.store.set_statuses([end]) == 1
        payloads = [n.payload for n in listener.notifies(timeout=1.0)]
    assert after in payloads
    assert handle.tasks[1].status is Status.QUEUED
    app.store.dispose()
