"""Revision 0013 (table health) step by step: the queues' retention table, and on
PostgreSQL the storage parameters of the high-churn tables, up from 0012 and back."""

from __future__ import annotations

import sqlalchemy as sa

import jobq
from jobq.dialects.postgresql_storage import TABLE_SETTINGS
from jobq.engine import migrations
from tests.migrations.test_migration_0006 import at_revision, table_names
from tests.migrations.test_migrations import jobq_ddl


def storage_parameters(conn: sa.Connection) -> dict[str, set[str]]:
    """PostgreSQL: each jobq table's reloptions ("fillfactor=80", ...); else {}."""
    if conn.dialect.name != "postgresql":
        return {}
    rows = conn.execute(
        sa.text(
            "SELECT relname, reloptions FROM pg_class WHERE relname = ANY(:names) "
            "AND relkind = 'r' AND pg_table_is_visible(oid)"
        ),
        {"names": list(TABLE_SETTINGS)},
    )
    return {name: set(options or ()) for name, options in rows}


def test_up_from_0012_adds_the_retention_table_and_the_table_settings(empty_url: str) -> None:
    store = jobq.Store(empty_url)
    at_revision(store, "0012")
    assert "jobq_queue_retention" not in table_names(store)
    with store.engine.connect() as conn:
        assert not any(storage_parameters(conn).values())
    store.migrate()
    assert "jobq_queue_retention" in table_names(store)
    with store.engine.connect() as conn:
        found = storage_parameters(conn)
    if store.dialect.name == "postgresql":
        assert "fillfactor=80" in found["jobq_tasks"]
        assert "autovacuum_vacuum_scale_factor=0.01" in found["jobq_tasks"]
        assert "fillfactor=50" in found["jobq_workers"]
        assert set(found) == set(TABLE_SETTINGS)
    store.set_retention("audit", 3600)
    assert store.retentions() == {"audit": 3600.0}
    store.dispose()


def test_down_to_0012_and_up_again_is_head(empty_url: str) -> None:
    store = jobq.Store(empty_url)
    store.migrate()
    with store.engine.connect() as conn:
        head_ddl, head_settings = jobq_ddl(conn), storage_parameters(conn)
    with store.engine.begin() as conn:
        migrations.downgrade(conn, "0012")
        assert migrations.current(conn) == "0012"
        assert not any(storage_parameters(conn).values())
    assert "jobq_queue_retention" not in table_names(store)
    store.migrate()
    with store.engine.connect() as conn:
        assert jobq_ddl(conn) == head_ddl
        assert storage_parameters(conn) == head_settings
    store.dispose()
