"""What PostgreSQL says about one table: its sizes, its rows live and dead, its vacuums.

Read from pg_stat_user_tables, pg_stat_user_indexes and the size functions, on a plain
psycopg connection of its own (never the Store's pool). The statistics views lag the
sessions that write: a backend flushes its counts at most once a second while busy, and
all of them when it exits, so ``read_table`` after ``Store.dispose()`` sees every write.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks.harness import connect_postgres

MB = 1024 * 1024

_TABLE = """
SELECT s.n_live_tup, s.n_dead_tup, s.n_tup_ins, s.n_tup_upd, s.n_tup_hot_upd, s.n_tup_del,
       s.autovacuum_count, s.autoanalyze_count, s.vacuum_count, s.analyze_count,
       pg_relation_size(s.relid), pg_indexes_size(s.relid), pg_total_relation_size(s.relid),
       c.reloptions
FROM pg_stat_user_tables AS s JOIN pg_class AS c ON c.oid = s.relid
WHERE s.relname = %s AND s.schemaname = current_schema()
"""
_INDEXES = """
SELECT indexrelname, pg_relation_size(indexrelid)
FROM pg_stat_user_indexes WHERE relname = %s AND schemaname = current_schema()
ORDER BY indexrelname
"""


@dataclass
class TableStats:
    """One reading of a table's statistics; sizes in bytes."""

    live: int
    dead: int
    inserted: int
    updated: int
    hot_updated: int
    deleted: int
    autovacuums: int
    autoanalyzes: int
    vacuums: int
    analyzes: int
    heap: int
    indexes: int
    total: int
    reloptions: list[str]
    index_sizes: dict[str, int] = field(default_factory=dict)

    @property
    def hot_share(self) -> float:
        """The share of updates that were HOT (no index entry written), 0 with no update."""
        return self.hot_updated / self.updated if self.updated else 0.0


def read_table(url: str, table: str = "jobq_tasks") -> TableStats:
    """``table``'s statistics and sizes now, in the database (and schema) of ``url``."""
    with connect_postgres(url, autocommit=True) as conn:
        row = conn.execute(_TABLE, (table,)).fetchone()
        if row is None:
            raise LookupError(f"no table {table} in {url}")
        indexes = dict(conn.execute(_INDEXES, (table,)).fetchall())
    return TableStats(*row[:13], reloptions=list(row[13] or []), index_sizes=indexes)


def mb(size: int) -> str:
    """``size`` bytes in MB, one decimal."""
    return f"{size / MB:,.1f} MB"
