"""An unreachable, unmigrated or misnamed database gives one clear error, without secrets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import jobq


def test_unreachable_postgresql_names_host_and_database_not_password() -> None:
    store = jobq.Store("postgresql://jobq:hunter2secret@127.0.0.1:1/orders")
    with pytest.raises(jobq.DatabaseUnavailable) as raised:
        store.enqueue("t", {})
    message = str(raised.value)
    assert "127.0.0.1:1" in message and "'orders'" in message
    assert "hunter2secret" not in message
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_sqlite_in_a_missing_directory_is_unavailable(tmp_path: Path) -> None:
    store = jobq.Store(f"sqlite:///{tmp_path}/no/such/dir/jobq.db")
    with pytest.raises(jobq.DatabaseUnavailable, match="unable to open database file"):
        store.migrate()


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("not a url", "not valid"),
        ("oracle://scott:tiger@db/x", "does not run on 'oracle'"),
        ("postgresql+nodriver://u:hunter2secret@h/db", "nodriver"),
    ],
)
def test_bad_urls_are_refused_up_front(url: str, fragment: str) -> None:
    with pytest.raises(jobq.InvalidDatabaseURL) as raised:
        jobq.Store(url)
    assert fragment in str(raised.value)
    assert "hunter2secret" not in str(raised.value) and "tiger" not in str(raised.value)


def test_unmigrated_database_says_to_run_jobq_migrate(empty_url: str) -> None:
    store = jobq.Store(empty_url)
    for call in (
        lambda: store.enqueue("t", {}),
        lambda: store.enqueue_many("t", [{}]),
        lambda: store.capture(1, worker_id="w"),
        lambda: store.get(1),
        lambda: store.rescue(),
    ):
        with pytest.raises(jobq.SchemaNotMigrated, match="run `jobq migrate`"):
            call()
    store.dispose()


def test_default_url_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("JOBQ_DATABASE_URL", f"sqlite:///{tmp_path / 'env.db'}")
    assert jobq.Store().engine.url.database == str(tmp_path / "env.db")
    monkeypatch.delenv("JOBQ_DATABASE_URL")
    monkeypatch.chdir(tmp_path)
    store = jobq.Store()
    assert store.engine.url.database == "jobq.db"
    store.migrate()
    assert os.path.exists(tmp_path / "jobq.db")


@pytest.mark.parametrize("backend", ["postgresql"])  # only a server can drop a connection
def test_a_dropped_connection_is_reported_then_replaced(store: jobq.Store) -> None:
    """The server closes the Store's connection: one call says so, the next reconnects."""
    task_id = store.enqueue("t", {})
    assert store.get(task_id) is not None  # the Store now holds an idle connection
    held = [raw.info.backend_pid for raw in store.db._idle]
    assert held
    with store.engine.connect() as admin:
        for pid in held:
            admin.exec_driver_sql(f"SELECT pg_terminate_backend({int(pid)})")
    with pytest.raises(jobq.DatabaseUnavailable, match=r"127\.0\.0\.1"):
        store.get(task_id)
    assert store.get(task_id) is not None
    task = store.capture(1, worker_id="w")[0]
    assert store.set_status(task.id, task.attempt, "done")


def test_a_forked_child_opens_connections_of_its_own(store: jobq.Store) -> None:
    """Idle driver connections stay with the parent; the child's calls still work."""
    task_id = store.enqueue("t", {"from": "parent"})
    assert store.db._idle, "the parent holds an idle connection"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running pytest's teardown
        ok = not store.db._idle and store.get(task_id) is not None
        os.write(write, b"ok" if ok else b"no")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 2) == b"ok"
    assert store.get(task_id) is not None  # the parent's connection is intact
