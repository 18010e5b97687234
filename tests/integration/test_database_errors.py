"""An unreachable, unmigrated or misnamed database gives one clear error, without secrets."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

import jobq
from jobq.engine import driver_runs

ROOT = Path(__file__).resolve().parents[2]


def test_unreachable_postgresql_names_host_and_database_not_password() -> None:
    # A short wait: the message after waiting is the one checked, without 5 s of it.
    store = jobq.Store("postgresql://jobq:hunter2secret@127.0.0.1:1/orders", enqueue_wait=0.2)
    with pytest.raises(jobq.DatabaseUnavailable) as raised:
        store.enqueue("t", {})
    message = str(raised.value)
    assert "127.0.0.1:1" in message and "'orders'" in message
    assert "hunter2secret" not in message
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_unreachable_mysql_names_host_and_database_not_password() -> None:
    # A short wait: the message after waiting is the one checked, without 5 s of it.
    store = jobq.Store("mysql://jobq:hunter2secret@127.0.0.1:1/orders", enqueue_wait=0.2)
    with pytest.raises(jobq.DatabaseUnavailable) as raised:
        store.enqueue("t", {})
    message = str(raised.value)
    assert "127.0.0.1:1" in message and "'orders'" in message
    assert "hunter2secret" not in message


def test_a_missing_mysql_driver_names_the_extra(tmp_path: Path) -> None:
    """Without PyMySQL, a mysql:// URL says which extra to install, from the API and the
    CLI (one line, exit 1); another driver's absence is a bad URL naming the module."""
    fake = tmp_path / "pymysql"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'pymysql'\")\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    code = (
        "import jobq\n"
        "for url in ('mysql://u:hunter2secret@h/db', 'mariadb://h/db', 'mysql+pymysql://h/db'):\n"
        "    try: jobq.Store(url)\n"
        "    except jobq.MissingExtra as error: print(error)\n"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert (
        shown.stdout.splitlines()
        == ["MySQL through PyMySQL needs the 'mysql' extra: pip install 'jobq[mysql]'"] * 3
    )
    cli = subprocess.run(
        [sys.executable, "-m", "jobq.cli", "status", "--database-url", "mysql://h/db"],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert cli.returncode == 1
    assert cli.stderr.strip().endswith("pip install 'jobq[mysql]'"), cli.stderr
    assert "Traceback" not in cli.stderr and len(cli.stderr.strip().splitlines()) == 1


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
        ("mysql+nodriver://u:hunter2secret@h/db", "nodriver"),
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


def server_ids(store: jobq.Store) -> list[int]:
    """The server's ids of the Store's idle driver connections: in the engine's pool on
    PostgreSQL (Database.run borrows from it), run()'s own on MySQL."""
    if store.dialect.name == "postgresql":
        records = list(store.engine.pool._pool.queue)  # type: ignore[attr-defined]
        return [record.dbapi_connection.info.backend_pid for record in records]
    return [raw.thread_id() for raw, _ in store.db._idle]


def holds_idle(store: jobq.Store) -> bool:
    """Whether the Store keeps an idle connection (its pool's, or run()'s own)."""
    if store.dialect.raw_from_pool:
        return bool(store.engine.pool._pool.queue)  # type: ignore[attr-defined]
    return bool(store.db._idle)


#: MariaDB's error for a KILL of a session that no longer exists (ER_NO_SUCH_THREAD).
UNKNOWN_THREAD_ID = 1094


def end_sessions(store: jobq.Store, ids: list[int]) -> None:
    """End those sessions from the server's side (as a restart or a timeout would), from
    a connection of another engine (the Store's pool would hand out one of those)."""
    admin_engine = sa.create_engine(store.engine.url)
    with admin_engine.connect() as admin:
        for session in ids:
            if store.dialect.name == "postgresql":
                admin.exec_driver_sql(f"SELECT pg_terminate_backend({int(session)})")
            else:
                try:
                    admin.exec_driver_sql(f"KILL {int(session)}")
                except sa.exc.OperationalError as error:
                    # It ended by itself since it was listed (a connection closed after
                    # use, or one the pool let go): "Unknown thread id".
                    if error.orig is None or error.orig.args[0] != UNKNOWN_THREAD_ID:
                        raise
    admin_engine.dispose()


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])  # only a server drops connections
def test_a_dropped_connection_is_reported_then_replaced(store: jobq.Store) -> None:
    """The server closes the Store's connection: one call says so, the next reconnects."""
    task_id = store.enqueue("t", {})
    assert store.get(task_id) is not None  # the Store now holds an idle connection
    held = server_ids(store)
    assert held
    end_sessions(store, held)
    with pytest.raises(jobq.DatabaseUnavailable, match=r"127\.0\.0\.1"):
        store.get(task_id)
    assert store.get(task_id) is not None
    task = store.capture(1, worker_id="w")[0]
    assert store.set_status(task.id, task.attempt, "done")


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_a_connection_closed_while_idle_is_replaced_unseen(
    store: jobq.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection idle past PING_AFTER is pinged before use: one the server closed while
    it sat idle (MySQL's wait_timeout, say) is replaced without an error."""
    task_id = store.enqueue("t", {})
    held = server_ids(store)
    assert held
    end_sessions(store, held)
    monkeypatch.setattr(driver_runs, "PING_AFTER", 0.0)  # as if they had sat idle long enough
    assert store.get(task_id) is not None
    assert set(server_ids(store)).isdisjoint(held)


def test_a_forked_child_opens_connections_of_its_own(store: jobq.Store) -> None:
    """Idle driver connections stay with the parent; the child's calls still work."""
    task_id = store.enqueue("t", {"from": "parent"})
    assert holds_idle(store), "the parent holds an idle connection"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running pytest's teardown
        ok = not holds_idle(store) and store.get(task_id) is not None
        os.write(write, b"ok" if ok else b"no")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 2) == b"ok"
    assert store.get(task_id) is not None  # the parent's connection is intact


def test_connections_opening_a_new_sqlite_file_at_once_all_connect(tmp_path: Path) -> None:
    # Turning a new file to WAL takes the write lock from a read lock: two connections doing
    # it at once get "database is locked" without the busy handler unless jobq waits itself.
    # Threads race as processes do (sqlite3 lets go of the GIL); 4 at once, in rounds.
    for round_ in range(150):
        path = tmp_path / f"{round_}.db"
        path.touch()
        stores = [jobq.Store(f"sqlite:///{path}") for _ in range(4)]
        at_once = threading.Barrier(len(stores))
        failures: list[BaseException] = []
        threads = [
            threading.Thread(target=_connect, args=(store, at_once, failures)) for store in stores
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for store in stores:
            store.dispose()
        assert failures == [], round_


def _connect(store: jobq.Store, at_once: threading.Barrier, failures: list[BaseException]) -> None:
    """Open one connection of ``store`` when all threads are ready; its error, collected."""
    at_once.wait()
    try:
        with store.engine.connect() as connection:
            connection.exec_driver_sql("SELECT 1")
    except BaseException as error:
        failures.append(error)
