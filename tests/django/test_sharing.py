"""Django's connection as the one jobq writes in: workflows, enqueue_many and text beyond
the BMP, on each database (MariaDB too, through Django's mysqlclient)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction
from django.tasks import TaskResultStatus, task_backends
from shop import tasks

import jobq
from jobq.contrib.django.settings import database_url


@pytest.fixture
def app() -> Iterator[jobq.App]:
    app = jobq.App()
    app.store = jobq.Store(database_url("default"))
    yield app
    app.store.dispose()


def test_workflows_and_enqueue_many_take_djangos_connection(app: jobq.App) -> None:
    @app.task
    def step(n: int) -> int:
        return n

    before = app.store.counts()
    with pytest.raises(RuntimeError), transaction.atomic():
        jobq.chain(step.s(n=1), step.s(n=2)).enqueue(connection)
        jobq.group(step.s(n=3), step.s(n=4)).enqueue(connection)
        step.enqueue_many([{"n": 5}, {"n": 6}], _connection=connection)
        raise RuntimeError("undo")
    assert app.store.counts() == before
    with transaction.atomic():
        chained = jobq.chain(step.s(n=1), step.s(n=2)).enqueue(connection)
        many = step.enqueue_many([{"n": 5}, {"n": 6}], _connection=connection)
    assert [t.status for t in chained.tasks] == ["queued", "blocked"]
    assert [app.store.get(h).args for h in many] == [{"n": 5}, {"n": 6}]
    alone = step.s(n=7).enqueue(connection)  # outside a block: its own transaction
    assert app.workflow(alone.id).tasks[0].status == "queued"


def test_text_beyond_the_bmp_goes_through_djangos_connection(run_worker) -> None:
    result = tasks.add.enqueue("teapot 🫖 ", "ok")
    assert tasks.add.get_result(result.id).args == ["teapot 🫖 ", "ok"]
    run_worker()
    assert tasks.add.get_result(result.id).return_value == "teapot 🫖 ok"


def test_on_mysql_a_connection_without_utf8mb4_is_refused(app: jobq.App) -> None:
    @app.task
    def plain() -> None: ...

    connection.ensure_connection()
    if connection.vendor != "mysql":  # the other databases have no charset to choose
        assert plain.enqueue(_connection=connection).status == "queued"
        return
    connection.connection.set_character_set("utf8mb3")
    try:
        with pytest.raises(jobq.InvalidOption, match="talks utf8mb3 to the server"):
            plain.enqueue(_connection=connection)
        with pytest.raises(jobq.InvalidOption, match="rows need utf8mb4"):
            tasks.noop.enqueue()
    finally:
        connection.connection.set_character_set("utf8mb4")
    assert tasks.noop.enqueue().status == TaskResultStatus.READY


def test_a_backend_with_a_database_url_enqueues_in_transactions_of_its_own(
    settings: Any, tmp_path: Path
) -> None:
    # Django's database itself; on SQLite another file (the one writer of Django's file is
    # the atomic block below).
    url = database_url("default").render_as_string(hide_password=False)
    if connection.vendor == "sqlite":
        url = f"sqlite:///{tmp_path / 'separate.sqlite3'}"
    settings.TASKS = {
        **settings.TASKS,
        "separate": {
            "BACKEND": "jobq.contrib.django.JobqBackend",
            "OPTIONS": {"DATABASE_URL": url},
        },
    }
    backend = task_backends["separate"]
    backend.app.migrate()
    try:
        assert backend.app.alias is None and not backend.app.shares_transactions
        with pytest.raises(RuntimeError), transaction.atomic():
            kept = tasks.add.using(backend="separate").enqueue(2, 2)
            raise RuntimeError("undo Django's writes only")
        assert kept.backend == "separate" and backend.get_result(kept.id) == kept
    finally:
        backend.app.store.dispose()


def test_the_enqueue_is_in_djangos_own_transaction_on_its_own_connection(app: jobq.App) -> None:
    """Django's connection sees the row before the block commits (a second connection's
    uncommitted row would be invisible to it), jobq's own pool hands out no connection,
    and on PostgreSQL the row was written by Django's transaction itself."""
    backend = task_backends["default"]
    pool = backend.app.store.engine.pool
    with transaction.atomic():
        result = tasks.add.enqueue(4, 5)
        with connection.cursor() as cursor:
            cursor.execute("SELECT name FROM jobq_tasks WHERE id = %s", [int(result.id)])
            assert list(cursor.fetchall()) == [("shop.tasks.add",)]
            if connection.vendor == "postgresql":
                cursor.execute(
                    "SELECT xmin::text = txid_current()::text FROM jobq_tasks WHERE id = %s",
                    [int(result.id)],
                )
                assert cursor.fetchone() == (True,)
        assert pool.checkedout() == 0
    assert backend.app.store.get(int(result.id)).status == "queued"
