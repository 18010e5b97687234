"""`jobq doctor` on PostgreSQL: each check made to fire by causing what it looks for.

The tests work in a database of their own on the shared server (a fresh schema of it
per test, jobq migrated into it), so that no other client's sessions count; a prepared
transaction needs max_prepared_transactions > 0, which the shared server has not, so that
test makes a private server (tests/postgres_server.py). The statistics views lag the
sessions that write: a writer flushes its counts with pg_stat_force_next_flush(), and
what depends on time (a vacuum's age, a session's) is polled for with a deadline.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

import jobq
from jobq.cli import main
from jobq.doctor import Diagnosis, Finding, Thresholds, examine
from jobq.engine.database import Database
from tests import postgres_server
from tests.conftest import ENV, missing
from tests.helpers import until

# Doctor reads server-wide state (sessions of the database, replication slots) that
# tests running beside it would change: never in parallel with others.
pytestmark = pytest.mark.serial


#: Thresholds a test can reach in a second: everything else at its default.
QUICK = Thresholds(max_transaction_age=0.5, max_idle_in_transaction=0.5)


@pytest.fixture(scope="module")
def own_database() -> Iterator[str]:
    """A URL of a database made for this module on the shared server, dropped after it."""
    base = os.environ.get(ENV["postgresql"])
    if not base:
        missing("postgresql")
    admin = sa.create_engine(Database(base).engine.url, isolation_level="AUTOCOMMIT")
    name = f"jobq_doctor_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    try:
        yield admin.url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE {name} WITH (FORCE)")
        admin.dispose()


@pytest.fixture
def url(own_database: str) -> Iterator[str]:
    """A URL whose search_path is a fresh schema of the module's database, jobq migrated."""
    schema = f"doctor_{uuid.uuid4().hex[:8]}"
    url = sa.make_url(own_database).update_query_dict({"options": f"-csearch_path={schema}"})
    text = url.render_as_string(hide_password=False)
    engine = sa.create_engine(own_database)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    try:
        store = jobq.Store(text)
        store.migrate()
        store.dispose()
        yield text
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
        engine.dispose()


@pytest.fixture
def database(url: str) -> Iterator[Database]:
    db = Database(url)
    yield db
    db.dispose()


def autocommit(database: Database) -> sa.Connection:
    """A connection of its own on which each statement commits (VACUUM needs that)."""
    return database.engine.connect().execution_options(isolation_level="AUTOCOMMIT")


def diagnose(database: Database, thresholds: Thresholds = QUICK) -> Diagnosis:
    """``database`` examined with thresholds a test reaches quickly."""
    return examine(database, thresholds)


def finding(diagnosis: Diagnosis, check: str, subject: str) -> Finding:
    """The finding of ``check`` about ``subject``; fails if there is none."""
    found = [
        f for c in diagnosis.checks for f in c.findings if (f.check, f.subject) == (check, subject)
    ]
    assert len(found) == 1, (check, subject, [c.findings for c in diagnosis.checks])
    return found[0]


def fill(conn: sa.Connection, rows: int) -> None:
    """``rows`` tasks in jobq_tasks, written directly: jobq's own enqueue_many would
    ANALYZE the table past 10,000 rows."""
    conn.exec_driver_sql(
        "INSERT INTO jobq_tasks (name, args, run_at, retries_left, created_at, finished_at)"
        f" SELECT 't', '{{}}', now(), 0, now(), now() + n * interval '1 s'"
        f" FROM generate_series(1, {rows}) AS n"
    )


def flush_statistics(conn: sa.Connection) -> None:
    """Make this session's counts (dead rows, ...) visible to others at once: they are
    sent when the session is next idle, and otherwise at most once a second."""
    conn.exec_driver_sql("SELECT pg_stat_force_next_flush()")


def test_a_fresh_database_is_healthy(url: str, database: Database) -> None:
    diagnosis = examine(database)
    assert diagnosis.ok, [f for f in diagnosis.problems]
    assert [c.name for c in diagnosis.checks] == [
        "dead_tuples", "vacuum_age", "never_analyzed", "index_bloat", "long_transactions",
        "idle_in_transaction", "replication_slots", "prepared_transactions",
    ]  # fmt: skip
    result = CliRunner().invoke(main, ["doctor", "--database-url", url])
    assert result.exit_code == 0, result.output
    assert "All 8 checks OK." in result.stdout


def test_tables_too_small_to_matter_are_not_asked_to_be_analysed(
    url: str, database: Database
) -> None:
    """A freshly migrated database holding a few rows that autovacuum never analyses (it
    waits for 50 changed rows): all is well; from --min-analyze-rows rows, it is not."""
    doctor = ["doctor", "--database-url", url]
    with autocommit(database) as conn:
        conn.exec_driver_sql("ALTER TABLE jobq_tasks SET (autovacuum_enabled = false)")
        fill(conn, 33)
        flush_statistics(conn)
        diagnosis = diagnose(database)
        small = finding(diagnosis, "never_analyzed", "table jobq_tasks")
        assert (small.ok, small.value, small.threshold) == (True, 33, 1000)
        assert small.details["analyzed"] is False
        assert small.explanation == (
            "never analysed, but the statistics count 33 live rows: fewer than 1,000 rows, "
            "too few for a plan to go far wrong."
        )
        never = [c for c in diagnosis.checks if c.name == "never_analyzed"]
        assert [f.ok for f in never[0].findings] == [True] * len(never[0].findings)
        healthy = CliRunner().invoke(main, doctor)
        assert healthy.exit_code == 0, healthy.output
        lower = CliRunner().invoke(main, [*doctor, "--min-analyze-rows", "33"])
        assert lower.exit_code == 1, lower.output
        assert "jobq_tasks has never been analysed" in lower.stdout

        fill(conn, 1000 - 33)
        flush_statistics(conn)
        large = CliRunner().invoke(main, doctor)
        assert large.exit_code == 1, large.output
        assert "jobq_tasks has never been analysed, though the statistics count 1,000" in (
            large.stdout
        )


def test_dead_rows_an_old_vacuum_and_a_table_never_analysed(database: Database) -> None:
    with autocommit(database) as conn:
        conn.exec_driver_sql("ALTER TABLE jobq_tasks SET (autovacuum_enabled = false)")
        fill(conn, 3000)
        flush_statistics(conn)
        never = finding(diagnose(database), "never_analyzed", "table jobq_tasks")
        assert (never.ok, never.value) == (False, 3000)
        assert "never been analysed, though the statistics count 3,000 live rows" in (
            never.explanation
        )
        assert never.advice == ("Run ANALYZE jobq_tasks. Autovacuum is off, so nothing else will.")

        conn.exec_driver_sql("VACUUM jobq_tasks")  # not ANALYZE: it stays never analysed
        conn.exec_driver_sql("DELETE FROM jobq_tasks WHERE mod(id, 3) <> 0")
        flush_statistics(conn)
        diagnosis = diagnose(database)
        dead = finding(diagnosis, "dead_tuples", "table jobq_tasks")
        assert (dead.ok, dead.value, dead.threshold) == (False, 2000 / 3000, 0.2)
        assert dead.details["dead_rows"] == 2000
        assert "holds 2,000 dead rows, 67% of its 3,000 rows (more than 20%)" in dead.explanation
        assert dead.advice is not None and "autovacuum_enabled" in dead.advice
        assert finding(diagnosis, "never_analyzed", "table jobq_tasks").ok is False
        # Other tables are fine: too few dead rows to count.
        assert finding(diagnosis, "dead_tuples", "table jobq_workers").ok

        # Vacuumed a moment ago: an old vacuum once it is older than the threshold.
        assert finding(diagnosis, "vacuum_age", "table jobq_tasks").ok  # within a day
        old_vacuum = Thresholds(max_vacuum_age=1)

        def vacuum_too_old() -> Finding | None:
            found = finding(diagnose(database, old_vacuum), "vacuum_age", "table jobq_tasks")
            return None if found.ok else found

        late = until(vacuum_too_old)
        assert late.value is not None and late.value > 1
        assert "holds 2,000 dead rows and was last vacuumed" in late.explanation

        conn.exec_driver_sql("VACUUM ANALYZE jobq_tasks")
        diagnosis = diagnose(database, old_vacuum)
        for check in ("dead_tuples", "vacuum_age", "never_analyzed"):
            assert finding(diagnosis, check, "table jobq_tasks").ok, check


def test_an_index_left_mostly_empty(database: Database) -> None:
    """Most rows deleted and vacuumed: the index keeps its pages, nine in ten empty."""
    bloated = Thresholds(min_index_bytes=256 * 1024)
    with autocommit(database) as conn:
        conn.exec_driver_sql("ALTER TABLE jobq_tasks SET (autovacuum_enabled = false)")
        fill(conn, 40_000)
        conn.exec_driver_sql("ANALYZE jobq_tasks")
        fresh = finding(diagnose(database, bloated), "index_bloat", "index jobq_tasks_pkey")
        assert fresh.ok and fresh.value is not None and fresh.value < 0.2, fresh
        conn.exec_driver_sql("DELETE FROM jobq_tasks WHERE mod(id, 10) <> 0")
        conn.exec_driver_sql("VACUUM ANALYZE jobq_tasks")
        estimated = finding(diagnose(database, bloated), "index_bloat", "index jobq_tasks_pkey")
        assert not estimated.ok and estimated.details["method"] == "estimate", estimated
        assert estimated.value is not None and estimated.value > 0.8
        assert "REINDEX INDEX CONCURRENTLY jobq_tasks_pkey" in (estimated.advice or "")
        # Below the minimum size, however empty, an index is left alone.
        small = finding(diagnose(database), "index_bloat", "index jobq_tasks_pkey")
        assert small.ok and small.value == estimated.value

        # Measured rather than estimated once pgstattuple is there (doctor never creates it).
        conn.exec_driver_sql("CREATE EXTENSION pgstattuple")
        try:
            measured = finding(diagnose(database, bloated), "index_bloat", "index jobq_tasks_pkey")
        finally:
            conn.exec_driver_sql("DROP EXTENSION pgstattuple")
        assert not measured.ok and measured.details["method"] == "pgstatindex", measured
        assert measured.value is not None and measured.value > 0.8
        assert "measured by pgstatindex" in measured.explanation


def test_sessions_long_in_a_transaction_or_idle_in_one(database: Database) -> None:
    idle, busy = autocommit(database), autocommit(database)
    idle_pid = idle.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
    busy_pid = busy.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
    # Idle, holding a snapshot; and busy, running one long statement in its transaction.
    idle.exec_driver_sql("BEGIN ISOLATION LEVEL REPEATABLE READ")
    idle.exec_driver_sql("SELECT count(*) FROM jobq_tasks /* jobq doctor test */")
    ended: list[BaseException] = []

    def run_until_cancelled() -> None:
        busy.exec_driver_sql("BEGIN")
        try:
            busy.exec_driver_sql("SELECT pg_sleep(60) /* password 'hunter2' */")
        except sa.exc.OperationalError as error:
            ended.append(error)
        busy.exec_driver_sql("ROLLBACK")

    running = threading.Thread(target=run_until_cancelled)
    running.start()
    try:

        def both_flagged() -> Diagnosis | None:
            diagnosis = diagnose(database)
            flagged = {(f.check, f.subject) for f in diagnosis.problems}
            wanted = {
                ("idle_in_transaction", f"session {idle_pid}"),
                ("long_transactions", f"session {idle_pid}"),
                ("long_transactions", f"session {busy_pid}"),
            }
            return diagnosis if wanted <= flagged else None

        diagnosis = until(both_flagged)
    finally:
        with database.engine.connect() as admin:
            admin.exec_driver_sql(f"SELECT pg_cancel_backend({int(busy_pid)})")
        running.join(timeout=30)
        idle.exec_driver_sql("ROLLBACK")
        idle.close()
        busy.close()
    assert "canceling statement" in str(ended[0])
    waiting = finding(diagnosis, "idle_in_transaction", f"session {idle_pid}")
    assert waiting.details["state"] == "idle in transaction"
    assert waiting.details["holds_horizon"] is True
    assert waiting.details["query"] == "SELECT count(*) FROM jobq_tasks /* jobq doctor test */"
    assert "It holds back the horizon" in waiting.explanation
    assert f"SELECT pg_terminate_backend({idle_pid})" in (waiting.advice or "")
    assert "idle_in_transaction_session_timeout" in (waiting.advice or "")
    long = finding(diagnosis, "long_transactions", f"session {busy_pid}")
    assert long.details["state"] == "active" and long.value is not None and long.value > 0.5
    assert long.details["query"] == "SELECT pg_sleep(60) /* password '***' */"
    assert "hunter2" not in long.explanation
    # Both gone: nothing over the thresholds.
    diagnosis = diagnose(database)
    assert finding(diagnosis, "long_transactions", "sessions").ok
    assert finding(diagnosis, "idle_in_transaction", "sessions").ok


def test_an_inactive_replication_slot(url: str, database: Database) -> None:
    name = f"jobq_doctor_test_{os.getpid()}"
    with autocommit(database) as conn:
        conn.execute(
            sa.text("SELECT pg_create_physical_replication_slot(:name, true)"), {"name": name}
        )
        try:
            diagnosis = diagnose(database)
            result = CliRunner().invoke(main, ["doctor", "--json", "--database-url", url])
        finally:
            conn.execute(sa.text("SELECT pg_drop_replication_slot(:name)"), {"name": name})
    slot = finding(diagnosis, "replication_slots", f"slot {name}")
    assert not slot.ok and slot.details["active"] is False and slot.details["kind"] == "physical"
    assert slot.value is not None and slot.value >= 0
    assert f"Replication slot {name} (physical) is inactive" in slot.explanation
    assert f"SELECT pg_drop_replication_slot('{name}')" in (slot.advice or "")
    assert result.exit_code == 1, result.output
    assert '"subject": "slot ' + name in result.stdout
    assert finding(diagnose(database), "replication_slots", "slots").ok


def test_a_forgotten_prepared_transaction() -> None:
    programs = postgres_server.bindir()
    if programs is None:
        missing("postgresql")
    server = postgres_server.PostgresServer(programs)  # type: ignore[arg-type]
    with (server.data / "postgresql.conf").open("a") as conf:
        conf.write("max_prepared_transactions = 2\n")
    try:
        server.start()
        store = jobq.Store(server.url)
        store.migrate()
        with autocommit(store.db) as conn:
            conn.exec_driver_sql("BEGIN")
            conn.exec_driver_sql("INSERT INTO jobq_workflows (nodes, created_at) VALUES (1, now())")
            conn.exec_driver_sql("PREPARE TRANSACTION 'jobq doctor test'")

            def flagged() -> Finding | None:
                found = diagnose(store.db).problems
                return next((f for f in found if f.check == "prepared_transactions"), None)

            try:
                prepared = until(flagged)
            finally:
                conn.exec_driver_sql("ROLLBACK PREPARED 'jobq doctor test'")
        assert prepared.subject == "prepared transaction jobq doctor test"
        assert prepared.details == {"gid": "jobq doctor test", "database": "postgres",
                                    "owner": "postgres"}  # fmt: skip
        assert "ROLLBACK PREPARED 'jobq doctor test'" in (prepared.advice or "")
        assert examine(store.db).ok
        store.dispose()
    finally:
        server.stop()
        shutil.rmtree(server.directory, ignore_errors=True)
