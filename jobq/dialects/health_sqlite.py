"""SQLite's state for `jobq doctor`: the size of the write-ahead log beside the database
file, and the pages of the file that hold nothing.

SQLite keeps no statistics of dead rows or sessions: a reader that stays in a
transaction shows instead as a WAL that checkpoints cannot empty, so it keeps growing.
Only PRAGMAs that read, no input in any of them; an in-memory database has no file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.dialects.health import FileReading, FreeSpaceReading, Readings, Remedies

REMEDIES = Remedies(checkpoint="PRAGMA wal_checkpoint(TRUNCATE)", reclaim="VACUUM")

_TABLES = sa.text("SELECT name FROM sqlite_master WHERE type = 'table' AND name IN :names")


def readings(conn: Connection, tables: Sequence[str], inspect_index_bytes: int) -> Readings:
    """What `jobq doctor` checks on a SQLite database (see the module docstring)."""
    statement = _TABLES.bindparams(sa.bindparam("names", expanding=True))
    found = tuple(sorted(conn.execute(statement, {"names": list(tables)}).scalars()))
    path = _main_file(conn)
    if path is None:
        return Readings(tables_found=found)
    wal = None
    if str(conn.exec_driver_sql("PRAGMA journal_mode").scalar()).lower() == "wal":
        try:
            size = os.path.getsize(f"{path}-wal")
        except FileNotFoundError:  # the last connection to close checkpoints and removes it
            size = 0
        wal = FileReading(f"{path}-wal", size)
    free_space = FreeSpaceReading(
        path=path,
        free_pages=int(conn.exec_driver_sql("PRAGMA freelist_count").scalar() or 0),
        pages=int(conn.exec_driver_sql("PRAGMA page_count").scalar() or 0),
        page_size=int(conn.exec_driver_sql("PRAGMA page_size").scalar() or 0),
    )
    return Readings(tables_found=found, wal=wal, free_space=free_space, remedies=REMEDIES)


def _main_file(conn: Connection) -> str | None:
    """The file of the connection's main database; None for one in memory."""
    for _, name, path in conn.exec_driver_sql("PRAGMA database_list"):
        if name == "main":
            return str(path) or None
    return None
