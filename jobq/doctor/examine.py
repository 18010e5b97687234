"""Reading a database's upkeep and judging it: the one call `jobq doctor` makes."""

from __future__ import annotations

from jobq.db.errors import SchemaNotMigrated
from jobq.dialects.schema import metadata
from jobq.doctor.checks import diagnose
from jobq.doctor.findings import Diagnosis, Thresholds
from jobq.engine.database import Database

#: jobq's tables, by the names its statements use.
TABLES = tuple(sorted(metadata.tables))


def examine(database: Database, thresholds: Thresholds | None = None) -> Diagnosis:
    """Every check that applies to ``database``, judged by ``thresholds`` (the defaults
    when None); SchemaNotMigrated when none of jobq's tables are there.

    Reads only: statistics views and catalogs, in one read-only transaction. Driver errors
    that mean the database cannot be reached come out as DatabaseUnavailable.
    """
    thresholds = thresholds or Thresholds()
    with database.unit(atomic=True, read_only=True) as conn:
        readings = database.dialect.health_readings(conn, TABLES, thresholds.min_index_bytes)
    if not readings.tables_found:
        raise SchemaNotMigrated(database=database.shown_database)
    return diagnose(readings, thresholds)
