"""PostgreSQL: the storage parameters of jobq's high-churn tables (revision 0013).

A queue's table is written all day: each task is inserted, updated at its capture, its
heartbeats and its end, and deleted by retention. PostgreSQL's defaults suit tables that
mostly grow: autovacuum waits for 20% of a table to be dead before it vacuums, so a
table of ten million finished rows carries two million dead ones before anything cleans
up, and each vacuum then takes long. These settings vacuum jobq's tables after a fixed
number of dead rows instead, analyse them sooner, and leave room in each page so that an
updated row can stay on its page (a HOT update where no indexed column changed: a
worker's heartbeat row, a lock's lease renewal; not a task's, see jobq_tasks below).
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

#: Table -> storage parameter -> value. A change here needs a new revision to reach
#: databases migrated before it.
TABLE_SETTINGS: dict[str, dict[str, str]] = {
    "jobq_tasks": {
        # Room for the new version of an updated row on its own page. No update of a run
        # is HOT (each changes status or locked_until, which indexes name): after 1M
        # runs benchmarks/table_settings.py saw none, and a heap 17% larger for this.
        "fillfactor": "80",
        # Vacuum after 1,000 dead rows plus 1% of the table, not 50 + 20%.
        "autovacuum_vacuum_threshold": "1000",
        "autovacuum_vacuum_scale_factor": "0.01",
        # A table that only grows (finished rows kept) is vacuumed for its visibility map.
        "autovacuum_vacuum_insert_threshold": "10000",
        "autovacuum_vacuum_insert_scale_factor": "0.05",
        "autovacuum_analyze_threshold": "1000",
        "autovacuum_analyze_scale_factor": "0.02",
    },
    # Small tables whose every row is rewritten every few seconds: heartbeats (workers),
    # lease renewals (locks), rate-limit starts inserted and deleted.
    "jobq_workers": {
        "fillfactor": "50",
        "autovacuum_vacuum_threshold": "100",
        "autovacuum_vacuum_scale_factor": "0",
    },
    "jobq_locks": {
        "fillfactor": "50",
        "autovacuum_vacuum_threshold": "100",
        "autovacuum_vacuum_scale_factor": "0",
    },
    "jobq_limit_starts": {
        "autovacuum_vacuum_threshold": "1000",
        "autovacuum_vacuum_scale_factor": "0",
    },
}

#: Parameters new in PostgreSQL 13, left out on older servers.
_SINCE_13 = {"autovacuum_vacuum_insert_threshold", "autovacuum_vacuum_insert_scale_factor"}


def _parameters(conn: Connection, table: str) -> dict[str, str]:
    version = conn.dialect.server_version_info or (0,)
    settings = TABLE_SETTINGS[table]
    return {k: v for k, v in settings.items() if version >= (13,) or k not in _SINCE_13}


def set_table_settings(conn: Connection) -> None:
    """Give jobq's high-churn tables TABLE_SETTINGS."""
    for table in TABLE_SETTINGS:
        # Names and values are the constants above, never input.
        assignments = ", ".join(f"{k} = {v}" for k, v in _parameters(conn, table).items())
        conn.exec_driver_sql(f"ALTER TABLE {table} SET ({assignments})")


def reset_table_settings(conn: Connection) -> None:
    """Give jobq's tables PostgreSQL's defaults back."""
    for table in TABLE_SETTINGS:
        conn.exec_driver_sql(f"ALTER TABLE {table} RESET ({', '.join(_parameters(conn, table))})")
