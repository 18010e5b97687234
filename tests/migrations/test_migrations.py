"""The Alembic revisions build exactly jobq/dialects/schema.py; downgrade/upgrade round-trips."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

import jobq
from jobq.dialects.mysql_ddl import autogenerate_filter
from jobq.dialects.schema import metadata
from jobq.engine import migrations

JOBQ_TABLES = sorted(metadata.tables)


def is_about_jobq(difference: object) -> bool:
    """Whether an autogenerate difference concerns a jobq table; others may share the database."""
    table = next((item for item in _flatten(difference) if isinstance(item, sa.Table)), None)
    return table is None or table.name.startswith("jobq_")


def _flatten(value: object) -> list[object]:
    if isinstance(value, tuple | list):
        return [leaf for item in value for leaf in _flatten(item)]
    return [value]


def _sqlite_ddl(name: str, sql: str) -> str:
    """SQLite's CREATE statement, written the same whatever rebuilt the table.

    A table rebuilt by a migration (SQLite cannot alter a column in place) is renamed
    into place, which quotes its name, and Alembic writes its named constraints in no set
    order: the same table all the same.
    """
    sql = " ".join(sql.split()).replace(f'"{name}"', name)
    if not sql.endswith(" )"):
        return sql  # an index
    head, *constraints = sql.removesuffix(" )").split(", CONSTRAINT ")
    return ", CONSTRAINT ".join([head, *sorted(constraints)]) + " )"


def jobq_ddl(conn: sa.Connection) -> dict[str, str]:
    """Every jobq table and index definition as the database reports it."""
    if conn.dialect.name == "sqlite":
        rows = conn.exec_driver_sql(
            "SELECT name, sql FROM sqlite_master WHERE name LIKE 'jobq_%' AND sql IS NOT NULL "
            "AND name != 'jobq_alembic_version'"
        )
        return {name: _sqlite_ddl(name, sql) for name, sql in rows}
    if conn.dialect.name in ("mysql", "mariadb"):
        # The whole definition: columns (the generated ones that emulate partial indexes
        # too), indexes, CHECKs, foreign keys, engine and collation; not the next id, nor
        # the order in which columns and indexes were added.
        ddl = {}
        for table in JOBQ_TABLES:
            create = conn.exec_driver_sql(f"SHOW CREATE TABLE {table}").one()[1]
            head, *body, tail = create.splitlines()
            tail = re.sub(r" AUTO_INCREMENT=\d+", "", tail)
            ddl[table] = "\n".join([head, *sorted(line.rstrip(",") for line in body), tail])
        return ddl
    ddl = {}
    for table in JOBQ_TABLES:
        rows = conn.exec_driver_sql(
            "SELECT indexname, indexdef FROM pg_indexes "
            "WHERE schemaname = current_schema() AND tablename = %(table)s",
            {"table": table},
        )
        ddl.update({name: definition for name, definition in rows})
        columns = conn.exec_driver_sql(
            "SELECT column_name, data_type, is_nullable, column_default "
            "FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = %(table)s ORDER BY column_name",
            {"table": table},
        )
        ddl[f"{table} columns"] = repr(columns.all())
        checks = conn.exec_driver_sql(
            "SELECT conname, pg_get_constraintdef(c.oid) FROM pg_constraint c "
            "JOIN pg_class t ON t.oid = c.conrelid AND t.relname = %(table)s "
            "JOIN pg_namespace n ON n.oid = t.relnamespace AND n.nspname = current_schema() "
            "ORDER BY conname",
            {"table": table},
        )
        ddl[f"{table} constraints"] = repr(checks.all())
    return ddl


def test_upgrade_to_head_matches_schema_py(empty_url: str) -> None:
    store = jobq.Store(empty_url)
    store.migrate()
    with store.engine.connect() as conn:
        opts: dict[str, Any] = {"version_table": migrations.VERSION_TABLE}
        if conn.dialect.name in ("mysql", "mariadb"):
            # Emulated partial indexes escape autogenerate; the DDL comparison below has them.
            opts["include_object"] = autogenerate_filter(metadata)
        context = MigrationContext.configure(conn, opts=opts)
        assert [d for d in compare_metadata(context, metadata) if is_about_jobq(d)] == []
        assert migrations.current(conn) == migrations.head()
        migrated = jobq_ddl(conn)
    # Partial indexes, DESC keys and CHECKs escape autogenerate: compare the DDL itself.
    with store.engine.begin() as conn:
        for table in JOBQ_TABLES:
            conn.exec_driver_sql(f"DROP TABLE {table}")
        metadata.create_all(conn)
    with store.engine.connect() as conn:
        assert jobq_ddl(conn) == migrated
    store.dispose()


def test_downgrade_to_base_then_upgrade_round_trips(empty_url: str) -> None:
    store = jobq.Store(empty_url)
    store.migrate()
    store.migrate()  # idempotent
    with store.engine.connect() as conn:
        before = jobq_ddl(conn)
    with store.engine.begin() as conn:
        migrations.downgrade(conn, "base")
    with store.engine.connect() as conn:
        assert not set(JOBQ_TABLES) & set(sa.inspect(conn).get_table_names())
        assert migrations.current(conn) is None
    store.migrate()
    with store.engine.connect() as conn:
        assert jobq_ddl(conn) == before
    task_id = store.enqueue("t", {"ok": True})
    assert store.get(task_id) is not None
    store.dispose()


def test_head_is_the_newest_script() -> None:
    """check() compares with HEAD without Alembic: it must name the newest script."""
    assert migrations.head() == migrations.HEAD


def test_checking_a_migrated_database_imports_no_alembic(tmp_path: Path) -> None:
    """A worker's start on a database at HEAD does without Alembic (a tenth of a second)."""
    url = f"sqlite:///{tmp_path / 'jobq.db'}"
    jobq.Store(url).migrate()
    code = (
        "import sys, jobq; jobq.Store(sys.argv[1]).check_schema();"
        " print(sorted(m for m in sys.modules if m.split('.')[0] in ('alembic', 'mako')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, url], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]", out


def test_a_table_by_jobqs_name_that_jobq_did_not_create_is_refused_untouched(
    empty_url: str,
) -> None:
    store = jobq.Store(empty_url)
    with store.engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE jobq_workers (id INTEGER PRIMARY KEY)"))
    try:
        try:
            store.migrate()
        except jobq.SchemaConflict as error:
            assert "has table(s) jobq_workers but no jobq revision" in str(error)
        else:
            raise AssertionError("migrate wrote over a table it did not create")
        with store.engine.connect() as conn:
            assert set(sa.inspect(conn).get_table_names()) & set(metadata.tables) == {
                "jobq_workers"
            }
            assert migrations.current(conn) is None
    finally:
        with store.engine.begin() as conn:
            conn.execute(sa.text("DROP TABLE jobq_workers"))
        store.dispose()
