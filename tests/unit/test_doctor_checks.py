"""jobq.doctor.checks on readings written out by hand: where each threshold starts, and
what of a session's statement a finding shows. (Every check is caused for real on its
databases in tests/integration/test_doctor*.py.)"""

from __future__ import annotations

import pytest

from jobq.dialects.health import FileReading, Readings, SessionReading, TableReading
from jobq.doctor.checks import QUERY_CHARACTERS, diagnose, shown_query
from jobq.doctor.findings import Thresholds


def table(live: int, dead: int, vacuum_age: float | None = 0.0) -> TableReading:
    return TableReading(
        name="jobq_tasks", live_rows=live, dead_rows=dead, vacuum_age=vacuum_age,
        analyzed=True, estimated_rows=live, pages=1, autovacuum_server=True,
        autovacuum_table=True,
    )  # fmt: skip


def session(age: float, idle: float | None) -> SessionReading:
    return SessionReading(7, "app", None, "idle in transaction", age, idle, True, "SELECT 1")


@pytest.mark.parametrize(
    ("live", "dead", "min_dead", "ok"),
    [
        (800, 200, 100, True),  # exactly 20%: not over it
        (799, 201, 100, False),
        (1, 999, 1000, True),  # 99.9% dead, but fewer than 1,000 dead rows
        (0, 1000, 1000, False),
    ],
)
def test_dead_rows_are_judged_by_ratio_and_count(
    live: int, dead: int, min_dead: int, ok: bool
) -> None:
    readings = Readings(("jobq_tasks",), tables=(table(live, dead),))
    (found,) = diagnose(readings, Thresholds(min_dead_rows=min_dead)).checks[0].findings
    assert (found.check, found.ok) == ("dead_tuples", ok)


def test_a_table_never_vacuumed_needs_it_only_with_dead_rows() -> None:
    readings = Readings(("jobq_tasks",), tables=(table(10, 999, None),))
    vacuum = {c.name: c for c in diagnose(readings, Thresholds()).checks}["vacuum_age"]
    assert vacuum.ok and vacuum.findings[0].explanation.endswith("never vacuumed.")
    readings = Readings(("jobq_tasks",), tables=(table(10, 1000, None),))
    vacuum = {c.name: c for c in diagnose(readings, Thresholds()).checks}["vacuum_age"]
    assert not vacuum.ok and vacuum.findings[0].value is None
    assert "holds 1,000 dead rows and was never vacuumed:" in vacuum.findings[0].explanation


def test_sessions_over_a_threshold_are_listed_and_none_is_one_ok_finding() -> None:
    limits = Thresholds(max_transaction_age=60, max_idle_in_transaction=10)
    readings = Readings(("jobq_tasks",), sessions=(session(61, 5), session(30, 10)))
    checks = {c.name: c for c in diagnose(readings, limits).checks}
    assert [c for c in checks] == ["long_transactions", "idle_in_transaction"]
    assert [f.subject for f in checks["long_transactions"].findings] == ["session 7"]
    assert checks["long_transactions"].summary == "1 session"
    (none,) = checks["idle_in_transaction"].findings
    assert (none.ok, none.subject, none.value) == (True, "sessions", 10)
    assert none.explanation == "no idle transaction open longer than 10s; the oldest: 10s."


def test_only_the_checks_a_database_has_readings_for_run() -> None:
    readings = Readings(("jobq_tasks",), wal=FileReading("/x.db-wal", 64 * 1024 * 1024))
    diagnosis = diagnose(readings, Thresholds())
    assert [c.name for c in diagnosis.checks] == ["wal_size"]
    assert diagnosis.ok and diagnosis.checks[0].summary == "64 MB"  # not over 64 MB


@pytest.mark.parametrize(
    ("query", "shown"),
    [
        (None, None),
        ("  \n  ", None),
        ("SELECT 1", "SELECT 1"),
        ("\n  SELECT 1\nFROM t", "SELECT 1..."),
        ("ALTER ROLE app PASSWORD 'it''s secret'", "ALTER ROLE app PASSWORD '***'"),
        ("alter user app identified by 'pw1234'", "alter user app identified by '***'"),
        ("CREATE USER u WITH PASSWORD 'unterminated", "CREATE USER u WITH PASSWORD '***'"),
        ("SET PASSWORD = PASSWORD('x')", "SET PASSWORD = '***'"),
        ("x" * 200, "x" * QUERY_CHARACTERS + "..."),
    ],
)
def test_a_session_shows_the_first_line_of_its_statement_without_passwords(
    query: str | None, shown: str | None
) -> None:
    assert shown_query(query) == shown
