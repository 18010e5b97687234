"""What `jobq doctor` reads of a database's upkeep, in words that name no database.

Each database reads its own statistics views (health_postgresql.py, health_sqlite.py,
health_mysql.py) into one Readings; jobq.doctor judges them against its thresholds. A
part of Readings left None is something that database does not have (SQLite keeps no
dead-row counts, PostgreSQL no WAL file of a database's own): its checks are not run.

Ages are seconds by the database's own clock; sizes are bytes.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy.engine import Connection

#: The module that reads each dialect's statistics (Dialect.name -> module).
_READERS = {
    "postgresql": "jobq.dialects.health_postgresql",
    "sqlite": "jobq.dialects.health_sqlite",
    "mysql": "jobq.dialects.health_mysql",
}


@dataclass(frozen=True)
class TableReading:
    """The row counts and upkeep of one of jobq's tables."""

    name: str
    #: Rows the statistics count as live, and as dead (left by updates and deletes).
    live_rows: int
    dead_rows: int
    #: Seconds since the table was last vacuumed (by hand or by autovacuum); None: never
    #: (since the statistics were last reset).
    vacuum_age: float | None
    #: Whether it was ever analysed (by hand or by autovacuum), since the statistics were
    #: last reset.
    analyzed: bool
    #: The planner's idea of its size: rows (negative: never counted) and pages.
    estimated_rows: float
    pages: int
    #: Whether autovacuum runs on the server, and whether this table's own option lets it
    #: visit the table: autovacuum vacuums the table only when both are true.
    autovacuum_server: bool
    autovacuum_table: bool

    @property
    def autovacuum(self) -> bool:
        """Whether autovacuum visits this table at all."""
        return self.autovacuum_server and self.autovacuum_table


@dataclass(frozen=True)
class IndexReading:
    """How much of one of jobq's indexes holds nothing."""

    name: str
    table: str
    size_bytes: int
    #: The estimated fraction of its pages that hold nothing (0 to 1); None when it
    #: could not be estimated (see ``why_unmeasured``).
    wasted: float | None
    #: How ``wasted`` was found: "pgstatindex" (read from the index itself) or
    #: "estimate" (from the planner's statistics).
    method: str
    why_unmeasured: str | None = None


@dataclass(frozen=True)
class SessionReading:
    """A session with a transaction open."""

    pid: int
    user: str | None
    application: str | None
    state: str | None
    #: Seconds since its transaction began.
    transaction_age: float
    #: Seconds it has been idle inside that transaction; None while it is running a
    #: statement.
    idle_age: float | None
    #: Whether it holds back the cleanup of old row versions (a snapshot or a
    #: transaction id of its own); None where the database does not say.
    holds_horizon: bool | None
    #: The statement it runs, or ran last, as the database shows it.
    query: str | None


@dataclass(frozen=True)
class SlotReading:
    """A replication slot."""

    name: str
    kind: str
    active: bool
    #: Bytes of WAL the server keeps for it; None when it reserves none.
    retained_wal: int | None
    #: Whether it keeps old row versions (xmin) or old catalog rows (catalog_xmin).
    holds_xmin: bool
    holds_catalog_xmin: bool
    #: The database of a logical slot (None: physical).
    database: str | None


@dataclass(frozen=True)
class PreparedReading:
    """A prepared transaction (two-phase commit) waiting for its COMMIT or ROLLBACK PREPARED."""

    gid: str
    database: str | None
    owner: str | None
    age: float


@dataclass(frozen=True)
class FileReading:
    """A file of the database on this machine and its size."""

    path: str
    size_bytes: int


@dataclass(frozen=True)
class FreeSpaceReading:
    """Pages of a database file that hold nothing and wait to be reused."""

    path: str
    free_pages: int
    pages: int
    page_size: int


@dataclass(frozen=True)
class PurgeLagReading:
    """Undo records of committed transactions the server has not yet purged."""

    history_length: int
    #: Where the number was read.
    source: str


@dataclass(frozen=True)
class Remedies:
    """What an operator runs to act on a finding, as this database spells it; ``{name}``
    and ``{pid}`` stand for the table, index, slot, prepared transaction or session."""

    vacuum: str = ""
    analyze: str = ""
    reindex: str = ""
    #: Turns autovacuum back on: for table {name}, and on the server.
    autovacuum_table_on: str = ""
    autovacuum_server_on: str = ""
    #: Makes autovacuum visit table {name} sooner.
    vacuum_sooner: str = ""
    end_session: str = ""
    #: The setting that ends sessions idle in a transaction, if the database has one.
    idle_timeout: str = ""
    drop_slot: str = ""
    #: How to end prepared transaction {name}.
    finish_prepared: str = ""
    #: Empties the write-ahead log and shrinks its file.
    checkpoint: str = ""
    #: Gives a file's free pages back to the file system.
    reclaim: str = ""
    #: Lets purge keep up.
    faster_purge: str = ""


@dataclass(frozen=True)
class Readings:
    """Everything `jobq doctor` judges; None: this database has no such thing."""

    #: Which of jobq's tables exist (none: the database was never migrated).
    tables_found: tuple[str, ...]
    tables: tuple[TableReading, ...] | None = None
    indexes: tuple[IndexReading, ...] | None = None
    #: Sessions with a transaction open, the reader's own left out.
    sessions: tuple[SessionReading, ...] | None = None
    #: Whether ``sessions`` holds the sessions of every user; where it may not, why.
    sessions_limited: str | None = None
    slots: tuple[SlotReading, ...] | None = None
    prepared: tuple[PreparedReading, ...] | None = None
    wal: FileReading | None = None
    free_space: FreeSpaceReading | None = None
    purge_lag: PurgeLagReading | None = None
    #: Checks that apply to this database but could not read what they need: why.
    unreadable: Mapping[str, str] = field(default_factory=dict)
    remedies: Remedies = field(default_factory=Remedies)


def read(
    dialect: str, conn: Connection, tables: Sequence[str], inspect_index_bytes: int
) -> Readings:
    """The Readings of ``dialect``'s database on ``conn`` for jobq's ``tables``.

    Indexes of ``inspect_index_bytes`` or more may be read whole (pgstatindex, where the
    database has it); smaller ones are only estimated. Reads only, in ``conn``'s transaction.
    """
    reader = importlib.import_module(_READERS[dialect])
    readings: Readings = reader.readings(conn, tables, inspect_index_bytes)
    return readings
