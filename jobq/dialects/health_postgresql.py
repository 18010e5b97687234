"""PostgreSQL's statistics for `jobq doctor`: pg_stat_user_tables, index sizes, and what
holds back the xmin horizon (pg_stat_activity, pg_replication_slots, pg_prepared_xacts).

jobq's tables are found as jobq finds them, through the session's search_path
(``to_regclass``), their names bound as one array parameter. Sessions are those of this
database (since PostgreSQL 14 only they hold back its horizon); slots and prepared
transactions are the whole server's. Index bloat is read with pgstattuple's
``pgstatindex`` where that extension is installed and reachable on the search_path (it
reads the whole index, so only indexes of ``inspect_index_bytes`` or more); otherwise it
is estimated from the planner's statistics (``pg_stats`` widths, the index's row count).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.dialects.health import (
    IndexReading,
    PreparedReading,
    Readings,
    Remedies,
    SessionReading,
    SlotReading,
    TableReading,
)

# Each of jobq's tables by the name its statements use, resolved by the search_path.
_JOBQ_TABLES = """
    FROM unnest(CAST(:names AS text[])) AS wanted(name)
    JOIN pg_class t ON t.oid = to_regclass(quote_ident(wanted.name))
"""

_TABLES = sa.text(f"""
    SELECT t.relname, s.n_live_tup, s.n_dead_tup,
           EXTRACT(EPOCH FROM clock_timestamp() - GREATEST(s.last_vacuum, s.last_autovacuum)),
           s.last_analyze IS NOT NULL OR s.last_autoanalyze IS NOT NULL,
           t.reltuples, t.relpages, current_setting('autovacuum')::boolean,
           COALESCE((SELECT CAST(o.option_value AS boolean) FROM pg_options_to_table(t.reloptions) o
                     WHERE o.option_name = 'autovacuum_enabled'), true)
    {_JOBQ_TABLES}
    JOIN pg_stat_user_tables s ON s.relid = t.oid
    ORDER BY t.relname
""")

# Each B-tree (or other) index of jobq's tables with what an estimate of its size needs:
# its rows, the average width of its key columns (pg_stats), its fill factor.
_INDEXES = sa.text(f"""
    SELECT ic.relname, t.relname, ic.oid, am.amname, pg_relation_size(ic.oid),
           ic.reltuples, current_setting('block_size')::integer,
           COALESCE((SELECT CAST(o.option_value AS integer)
                     FROM pg_options_to_table(ic.reloptions) o
                     WHERE o.option_name = 'fillfactor'), 90),
           stats.width, stats.columns, i.indnatts, 0 = ANY (i.indkey)
    {_JOBQ_TABLES}
    JOIN pg_namespace ns ON ns.oid = t.relnamespace
    JOIN pg_index i ON i.indrelid = t.oid
    JOIN pg_class ic ON ic.oid = i.indexrelid
    JOIN pg_am am ON am.oid = ic.relam
    CROSS JOIN LATERAL (
        SELECT sum((1 - s.null_frac) * s.avg_width) AS width, count(*) AS columns
        FROM pg_attribute a
        JOIN pg_stats s
          ON s.schemaname = ns.nspname AND s.tablename = t.relname AND s.attname = a.attname
        WHERE a.attrelid = t.oid AND a.attnum = ANY (i.indkey)
    ) stats
    ORDER BY ic.relname
""")

_HAS_PGSTATINDEX = sa.text("SELECT to_regprocedure('pgstatindex(regclass)') IS NOT NULL")
_PGSTATINDEX = sa.text(
    "SELECT leaf_pages, avg_leaf_density, index_size"
    " FROM pgstatindex(CAST(CAST(:oid AS oid) AS regclass))"
)

_SESSIONS = sa.text("""
    SELECT pid, usename, application_name, state,
           EXTRACT(EPOCH FROM clock_timestamp() - xact_start),
           CASE WHEN state LIKE 'idle in transaction%'
                THEN EXTRACT(EPOCH FROM clock_timestamp() - state_change) END,
           backend_xmin IS NOT NULL OR backend_xid IS NOT NULL,
           query
    FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid()
      AND backend_type = 'client backend' AND xact_start IS NOT NULL
    ORDER BY xact_start
""")

_SEES_EVERY_SESSION = sa.text("SELECT pg_has_role(current_user, 'pg_read_all_stats', 'USAGE')")

_SLOTS = sa.text("""
    SELECT slot_name, slot_type, active,
           pg_wal_lsn_diff(
               CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn()
                    ELSE pg_current_wal_lsn() END,
               restart_lsn),
           xmin IS NOT NULL, catalog_xmin IS NOT NULL, database
    FROM pg_replication_slots
    ORDER BY slot_name
""")

_PREPARED = sa.text("""
    SELECT gid, database, owner, EXTRACT(EPOCH FROM clock_timestamp() - prepared)
    FROM pg_prepared_xacts
    ORDER BY prepared
""")

REMEDIES = Remedies(
    vacuum="VACUUM {name}",
    analyze="ANALYZE {name}",
    reindex="REINDEX INDEX CONCURRENTLY {name}",
    autovacuum_table_on="ALTER TABLE {name} RESET (autovacuum_enabled)",
    autovacuum_server_on="autovacuum = on in postgresql.conf",
    vacuum_sooner="ALTER TABLE {name} SET (autovacuum_vacuum_scale_factor = 0.01)",
    end_session="SELECT pg_terminate_backend({pid})",
    idle_timeout="idle_in_transaction_session_timeout",
    drop_slot="SELECT pg_drop_replication_slot('{name}')",
    finish_prepared="COMMIT PREPARED '{name}' or ROLLBACK PREPARED '{name}'",
)

#: Bytes of a B-tree page that hold no index tuples: the page header and B-tree's own.
_PAGE_OVERHEAD = 24 + 16
#: Bytes an index tuple takes besides its key: its header, and its line pointer.
_TUPLE_HEADER = 8
_LINE_POINTER = 4


def readings(conn: Connection, tables: Sequence[str], inspect_index_bytes: int) -> Readings:
    """What `jobq doctor` checks on a PostgreSQL database (see the module docstring)."""
    names = list(tables)
    table_readings = tuple(_table(row) for row in conn.execute(_TABLES, {"names": names}))
    sees_all = conn.execute(_SEES_EVERY_SESSION).scalar()
    return Readings(
        tables_found=tuple(reading.name for reading in table_readings),
        tables=table_readings,
        indexes=_indexes(conn, names, inspect_index_bytes),
        sessions=tuple(_session(row) for row in conn.execute(_SESSIONS)),
        sessions_limited=None
        if sees_all
        else "sessions of other roles show no transaction times without the "
        "pg_read_all_stats role (or pg_monitor)",
        slots=tuple(_slot(row) for row in conn.execute(_SLOTS)),
        prepared=tuple(
            PreparedReading(gid, database, owner, float(age))
            for gid, database, owner, age in conn.execute(_PREPARED)
        ),
        remedies=REMEDIES,
    )


def _table(row: Any) -> TableReading:
    name, live, dead, vacuum_age, analyzed, reltuples, relpages, on_server, on_table = row
    return TableReading(
        name=name,
        live_rows=int(live or 0),
        dead_rows=int(dead or 0),
        vacuum_age=None if vacuum_age is None else float(vacuum_age),
        analyzed=bool(analyzed),
        estimated_rows=float(reltuples),
        pages=int(relpages),
        autovacuum_server=bool(on_server),
        autovacuum_table=bool(on_table),
    )


def _indexes(
    conn: Connection, names: list[str], inspect_index_bytes: int
) -> tuple[IndexReading, ...]:
    has_pgstatindex = bool(conn.execute(_HAS_PGSTATINDEX).scalar())
    found = []
    for row in conn.execute(_INDEXES, {"names": names}).all():
        reading = None
        method, size = row[3], int(row[4])
        if has_pgstatindex and method == "btree" and size >= inspect_index_bytes:
            reading = _pgstatindex(conn, row)
            if reading is None:
                has_pgstatindex = False  # not allowed to: estimate this one and the rest
        found.append(reading or _estimate(row))
    return tuple(found)


def _pgstatindex(conn: Connection, row: Any) -> IndexReading | None:
    """The index of ``row`` (of _INDEXES) as pgstatindex measures it; None when this role
    may not run pgstatindex (it needs pg_stat_scan_tables, or superuser)."""
    name, table, oid, _, size, _, block_size, fillfactor = row[:8]
    try:
        with conn.begin_nested():  # a refusal must not abort the reading's transaction
            leaf_pages, density, index_size = conn.execute(_PGSTATINDEX, {"oid": oid}).one()
    except sa.exc.DBAPIError:
        return None
    pages = max(int(index_size) // int(block_size), 1)
    if leaf_pages == 0 or density is None or math.isnan(density):
        wasted = 0.0 if leaf_pages == 0 else None
    else:
        # Leaf pages as full as CREATE INDEX leaves them hold (fillfactor)% of a page.
        wasted = _clamp(1 - (leaf_pages * density / 100) / (pages * fillfactor / 100))
    return IndexReading(str(name), str(table), int(size), wasted, "pgstatindex")


def _estimate(row: Any) -> IndexReading:
    """The index of ``row`` (of _INDEXES), its waste estimated from the statistics: the pages
    its rows would fill at its fill factor, against the pages it has."""
    name, table, _, method, size, reltuples, block_size, fillfactor = row[:8]
    width, columns_with_stats, key_columns, has_expression = row[8:]
    estimate = IndexReading(str(name), str(table), int(size), None, "estimate")
    if method != "btree":
        return _unmeasured(estimate, f"a {method} index (only B-tree indexes are estimated)")
    if reltuples < 0 or width is None or has_expression or columns_with_stats < key_columns:
        return _unmeasured(estimate, "no statistics yet: ANALYZE its table")
    tuple_bytes = _maxalign(_TUPLE_HEADER + float(width)) + _LINE_POINTER
    usable = (int(block_size) - _PAGE_OVERHEAD) * int(fillfactor) / 100
    leaf_pages = math.ceil(float(reltuples) * tuple_bytes / usable)
    # The metapage, the leaves, and the inner pages above them (one entry per leaf).
    expected = 1 + max(leaf_pages, 1) + math.ceil(leaf_pages * tuple_bytes / usable)
    pages = max(int(size) // int(block_size), 1)
    return IndexReading(str(name), str(table), int(size), _clamp(1 - expected / pages), "estimate")


def _unmeasured(reading: IndexReading, why: str) -> IndexReading:
    return IndexReading(reading.name, reading.table, reading.size_bytes, None, reading.method, why)


def _session(row: Any) -> SessionReading:
    pid, user, application, state, age, idle_age, holds, query = row
    return SessionReading(
        pid=int(pid),
        user=user,
        application=application or None,
        state=state,
        transaction_age=float(age or 0),
        idle_age=None if idle_age is None else float(idle_age),
        holds_horizon=bool(holds),
        query=query,
    )


def _slot(row: Any) -> SlotReading:
    name, kind, active, retained, holds_xmin, holds_catalog_xmin, database = row
    return SlotReading(
        name=name,
        kind=kind,
        active=bool(active),
        retained_wal=None if retained is None else max(int(retained), 0),
        holds_xmin=bool(holds_xmin),
        holds_catalog_xmin=bool(holds_catalog_xmin),
        database=database,
    )


def _maxalign(size: float) -> float:
    return math.ceil(size / 8) * 8


def _clamp(fraction: float) -> float:
    return min(max(fraction, 0.0), 1.0)
