"""A migrated database for each test on a server, without migrating it for each test.

Migrating costs far more than most tests themselves: 2-3 s on MariaDB (each revision's
DDL, and two drops around it), 0.5-1 s on PostgreSQL; most tests of tests/integration and
tests/acceptance spent more time in their setup than in their body. So the session's
schema (PostgreSQL) or database (MySQL) is migrated once, and a test that finds it still
exactly as a migration left it gets it emptied instead: every jobq table truncated, ids
counting from 1 again (PostgreSQL's RESTART IDENTITY; a truncated InnoDB table starts
anew).

"Exactly as a migration left it" is checked each time from the server's catalogue: the
tables, their columns, indexes, constraints, triggers, functions and table options, and
the Alembic revision. A test that renamed, altered, dropped or downgraded anything leaves
a different schema, and the next test gets a fresh migration. A module whose tests read
the planner's or the server's statistics of the tables (plans, doctor) is marked
``fresh_database`` and always gets one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import sqlalchemy as sa

import jobq
from jobq.engine.database import Database

_POSTGRESQL = [
    """SELECT table_name, column_name, data_type, is_nullable, column_default
       FROM information_schema.columns
       WHERE table_schema = current_schema() AND table_name LIKE 'jobq%'""",
    """SELECT tablename, indexname, indexdef FROM pg_indexes
       WHERE schemaname = current_schema() AND tablename LIKE 'jobq%'""",
    """SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
       WHERE connamespace = current_schema()::regnamespace""",
    """SELECT event_object_table, trigger_name, event_manipulation, action_statement
       FROM information_schema.triggers WHERE trigger_schema = current_schema()""",
    """SELECT proname, md5(prosrc) FROM pg_proc
       WHERE pronamespace = current_schema()::regnamespace""",
    """SELECT relname, relkind, reloptions::text FROM pg_class
       WHERE relnamespace = current_schema()::regnamespace AND relname LIKE 'jobq%'""",
]
_MYSQL = [
    """SELECT table_name, column_name, column_type, is_nullable, column_default, extra
       FROM information_schema.columns
       WHERE table_schema = DATABASE() AND table_name LIKE 'jobq%'""",
    """SELECT table_name, index_name, seq_in_index, column_name, non_unique, sub_part
       FROM information_schema.statistics
       WHERE table_schema = DATABASE() AND table_name LIKE 'jobq%'""",
    """SELECT table_name, constraint_name, constraint_type
       FROM information_schema.table_constraints WHERE table_schema = DATABASE()""",
    """SELECT event_object_table, trigger_name, event_manipulation, action_statement
       FROM information_schema.triggers WHERE trigger_schema = DATABASE()""",
    """SELECT table_name, engine, row_format, create_options, table_collation
       FROM information_schema.tables WHERE table_schema = DATABASE()""",
]

#: The fingerprint of a freshly migrated schema, per session URL.
_MIGRATED: dict[str, str] = {}
_ENGINES: dict[str, sa.Engine] = {}


def _engine(url: str) -> sa.Engine:
    if url not in _ENGINES:
        _ENGINES[url] = Database(url).engine
    return _ENGINES[url]


def fingerprint(conn: sa.Connection) -> str:
    """A digest of everything about the jobq tables a test could have changed."""
    queries = _POSTGRESQL if conn.dialect.name == "postgresql" else _MYSQL
    digest = hashlib.sha256()
    for query in queries:
        rows = sorted(repr(tuple(row)) for row in conn.execute(sa.text(query)))
        digest.update("\n".join(rows).encode())
    tables = set(sa.inspect(conn).get_table_names())
    if "jobq_alembic_version" in tables:
        version = conn.exec_driver_sql("SELECT version_num FROM jobq_alembic_version").all()
        digest.update(repr(sorted(version)).encode())
    return digest.hexdigest()


def _truncate(conn: sa.Connection) -> None:
    names = sorted(
        name
        for name in sa.inspect(conn).get_table_names()
        if name.startswith("jobq_") and name != "jobq_alembic_version"
    )
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"TRUNCATE {', '.join(names)} RESTART IDENTITY CASCADE")
        return
    conn.exec_driver_sql("SET foreign_key_checks = 0")
    for name in names:
        conn.exec_driver_sql(f"TRUNCATE TABLE {name}")
    conn.exec_driver_sql("SET foreign_key_checks = 1")


def migrated(url: str, drop_jobq_tables: Callable[[str], None], *, fresh: bool) -> None:
    """Leave the database at ``url`` freshly migrated with no rows: emptied if its schema
    is exactly what the session's first migration made (and ``fresh`` is not asked),
    else its jobq tables dropped and migrated anew."""
    engine = _engine(url)
    if not fresh and url in _MIGRATED:
        with engine.begin() as conn:
            if fingerprint(conn) == _MIGRATED[url]:
                _truncate(conn)
                return
    engine.dispose()  # no pooled connection of ours holds a lock the drop would wait for
    drop_jobq_tables(url)
    store = jobq.Store(url)
    store.migrate()
    store.dispose()
    with engine.connect() as conn:
        _MIGRATED[url] = fingerprint(conn)
    engine.dispose()
