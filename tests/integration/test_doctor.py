"""`jobq doctor` on SQLite and MySQL/MariaDB, each check made to fire by causing it, and
what every database shares: a fresh database is healthy, an unmigrated one is an error.

PostgreSQL's checks are in test_doctor_postgresql.py.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

import jobq
from jobq.cli import main
from jobq.db.errors import SchemaNotMigrated
from jobq.doctor import Diagnosis, Finding, Thresholds, examine
from jobq.doctor.findings import MB
from jobq.engine.database import Database
from tests.helpers import until

# Doctor reads server-wide state (sessions of the database, replication slots) that
# tests running beside it would change: never in parallel with others.
# The server's statistics of the tables (dead rows, vacuums): a fresh migration each.
pytestmark = [pytest.mark.serial, pytest.mark.fresh_database]


sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])
mysql_only = pytest.mark.parametrize("backend", ["mysql"])

#: A task's arguments big enough that a few thousand fill megabytes.
BULKY = {"blob": "x" * 1000}


@pytest.fixture
def database(db_url: str) -> Iterator[Database]:
    db = Database(db_url)
    yield db
    db.dispose()


def finding(diagnosis: Diagnosis, check: str, subject: str | None = None) -> Finding:
    """The one finding of ``check`` (about ``subject``, if given)."""
    found = [
        f
        for c in diagnosis.checks
        for f in c.findings
        if f.check == check and subject in (None, f.subject)
    ]
    assert len(found) == 1, (check, subject, diagnosis)
    return found[0]


@pytest.mark.parametrize("backend", ["sqlite", "mysql"])
def test_a_fresh_database_is_healthy(db_url: str, backend: str) -> None:
    """(PostgreSQL's in test_doctor_postgresql.py, in a database no one else uses.)"""
    result = CliRunner().invoke(main, ["doctor", "--database-url", db_url])
    assert result.exit_code == 0, result.output
    ran = {"sqlite": ["wal_size", "free_pages"],
           "mysql": ["long_transactions", "idle_in_transaction", "purge_lag"]}[backend]  # fmt: skip
    lines = result.stdout.splitlines()
    assert lines[0] == f"jobq doctor: {Database(db_url)!r}"
    assert [line.split()[1] for line in lines if line.startswith("OK ")] == ran
    assert lines[-1] == f"All {len(ran)} checks OK."
    document = json.loads(
        CliRunner().invoke(main, ["doctor", "--json", "--database-url", db_url]).stdout
    )
    assert document["ok"] is True and document["checks"] == ran
    assert document["skipped"] == {} and document["notes"] == {}
    assert {finding["check"] for finding in document["findings"]} == set(ran)
    for each in document["findings"]:
        assert set(each) == {"check", "subject", "ok", "value", "threshold", "unit",
                             "explanation", "advice", "details"}  # fmt: skip
        assert each["ok"] is True and each["advice"] is None


def test_an_unmigrated_database_is_an_error(empty_url: str) -> None:
    with pytest.raises(SchemaNotMigrated):
        examine(Database(empty_url))
    result = CliRunner().invoke(main, ["doctor", "--json", "--database-url", empty_url])
    assert result.exit_code == 1 and result.stdout == "", result.output
    assert result.stderr.startswith("error: The jobq tables are missing"), result.stderr


@sqlite_only
def test_a_reader_that_stays_lets_the_wal_grow(
    db_url: str, store: jobq.Store, database: Database
) -> None:
    path = sa.make_url(db_url).database
    assert path is not None
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM jobq_tasks").fetchall()
    try:
        # Each batch commits; no checkpoint can pass the reader's snapshot, so the log grows.
        for _ in range(4):
            store.enqueue_many("t", [BULKY] * 500)
        diagnosis = examine(database, Thresholds(max_wal_bytes=MB))
        result = CliRunner().invoke(
            main, ["doctor", "--max-wal-size", "1", "--database-url", db_url]
        )
    finally:
        reader.rollback()
        reader.close()
    wal = finding(diagnosis, "wal_size")
    assert (wal.ok, wal.subject, wal.threshold) == (False, f"file {path}-wal", MB)
    assert wal.value is not None and wal.value > MB
    assert "cannot pass a reader still in a transaction" in wal.explanation
    assert "PRAGMA wal_checkpoint(TRUNCATE)" in (wal.advice or "")
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines()[2].startswith("ATTENTION  wal_size")
    assert "1 finding needs attention." in result.stdout
    # Once every connection is closed, the last one checkpoints and removes the log.
    store.dispose()
    database.dispose()
    assert finding(examine(database, Thresholds(max_wal_bytes=MB)), "wal_size").ok


@sqlite_only
def test_pages_left_free_by_deleted_rows(store: jobq.Store, database: Database) -> None:
    store.enqueue_many("t", [BULKY] * 2000)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM jobq_tasks")
    some_free = Thresholds(min_free_bytes=MB)
    free = finding(examine(database, some_free), "free_pages")
    assert not free.ok and free.value is not None and free.value > 0.5, free
    assert free.details["free_bytes"] > MB  # type: ignore[operator]
    assert "VACUUM rewrites the file" in (free.advice or "")
    # Under the default 10 MB, so few free pages are left alone.
    assert finding(examine(database), "free_pages").ok


@mysql_only
def test_a_snapshot_held_open_holds_back_purge(db_url: str, database: Database) -> None:
    """An idle transaction holding a consistent snapshot keeps InnoDB from purging the undo
    of every later update: the history list grows past the threshold, and the session
    shows as a long transaction, idle in it."""
    engine = sa.create_engine(database.engine.url, isolation_level="AUTOCOMMIT")
    holder, writer, busy = engine.connect(), engine.connect(), engine.connect()
    holder_id = holder.exec_driver_sql("SELECT CONNECTION_ID()").scalar_one()
    busy_id = busy.exec_driver_sql("SELECT CONNECTION_ID()").scalar_one()
    ended: list[BaseException] = []

    def run_long() -> None:
        busy.exec_driver_sql("START TRANSACTION")
        busy.exec_driver_sql("SELECT count(*) FROM jobq_tasks")  # now InnoDB knows it
        try:
            busy.exec_driver_sql("SELECT SLEEP(60) /* jobq doctor test */")
        except sa.exc.OperationalError as error:  # KILL QUERY
            ended.append(error)
        busy.exec_driver_sql("ROLLBACK")

    running = threading.Thread(target=run_long)
    try:
        # The 300 updates below stay in the history whatever else purge removes meanwhile.
        limits = Thresholds(max_purge_lag=250, max_transaction_age=0.5, max_idle_in_transaction=0.5)
        holder.exec_driver_sql("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.exec_driver_sql("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        running.start()
        task_id = jobq.Store(db_url).enqueue("t", {})
        update = sa.text("UPDATE jobq_tasks SET priority = priority + 1 WHERE id = :id")
        for _ in range(300):  # each commit leaves its undo in the history list
            writer.execute(update, {"id": task_id})

        def all_flagged() -> Diagnosis | None:
            diagnosis = examine(database, limits)
            flagged = {(f.check, f.subject) for f in diagnosis.problems}
            wanted = {
                ("purge_lag", "server"),
                ("long_transactions", f"session {holder_id}"),
                ("idle_in_transaction", f"session {holder_id}"),
                ("long_transactions", f"session {busy_id}"),
            }
            return diagnosis if wanted <= flagged else None

        diagnosis = until(all_flagged)
    finally:
        if running.is_alive():
            writer.exec_driver_sql(f"KILL QUERY {int(busy_id)}")
            running.join(timeout=30)
        holder.exec_driver_sql("ROLLBACK")
        for conn in (holder, writer, busy):
            conn.close()
        engine.dispose()
    assert "interrupted" in str(ended[0])
    lag = finding(diagnosis, "purge_lag")
    assert lag.value is not None and lag.value >= 300
    assert lag.details["source"] == "information_schema.INNODB_METRICS"
    assert "Purge cannot pass a transaction that is still open" in (lag.advice or "")
    idle = finding(diagnosis, "idle_in_transaction", f"session {holder_id}")
    assert f"KILL {holder_id}" in (idle.advice or "")
    assert idle.details["holds_horizon"] is None
    long = finding(diagnosis, "long_transactions", f"session {busy_id}")
    assert long.details["query"] == "SELECT SLEEP(60) /* jobq doctor test */"
    assert long.details["idle_age"] is None
