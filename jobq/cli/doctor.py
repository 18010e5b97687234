"""`jobq doctor`: whether the database under jobq is kept up, and what to do where not."""

from __future__ import annotations

import sys

import click

from jobq.cli.common import database_url_option, store_for
from jobq.cli.json_output import dumps
from jobq.cli.params import Duration
from jobq.doctor import Thresholds, examine
from jobq.doctor.findings import MB
from jobq.doctor.report import document, text

_DEFAULTS = Thresholds()
RATIO = click.FloatRange(0, 1)
MEGABYTES = click.FloatRange(min=0)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead (see above).")
@click.option(
    "--max-dead-ratio", type=RATIO, default=_DEFAULTS.max_dead_ratio, show_default=True,
    help="Dead rows a table may hold, as a fraction of its rows ...",
)  # fmt: skip
@click.option(
    "--min-dead-tuples", type=click.IntRange(min=0), default=_DEFAULTS.min_dead_rows,
    show_default=True, help="... once it holds this many; also the dead rows from which a "
    "table must have been vacuumed within --max-vacuum-age.",
)  # fmt: skip
@click.option(
    "--max-vacuum-age", type=Duration(), default=_DEFAULTS.max_vacuum_age, show_default=True,
    help="Seconds (or 12h, 2d) since the last vacuum of a table holding dead rows.",
)  # fmt: skip
@click.option(
    "--min-analyze-rows", type=click.IntRange(min=0), default=_DEFAULTS.min_analyze_rows,
    show_default=True, help="Rows from which a table never analysed needs attention "
    "(autovacuum analyses a table only once 50 rows and 10% of it changed).",
)  # fmt: skip
@click.option(
    "--max-index-bloat", type=RATIO, default=_DEFAULTS.max_index_bloat, show_default=True,
    help="The estimated fraction of an index's pages that may hold nothing ...",
)  # fmt: skip
@click.option(
    "--min-index-size", type=MEGABYTES, default=_DEFAULTS.min_index_bytes / MB,
    show_default=True, metavar="MB", help="... for indexes of this many MB or more.",
)  # fmt: skip
@click.option(
    "--max-transaction-age", type=Duration(), default=_DEFAULTS.max_transaction_age,
    show_default=True, help="Seconds (or 5m) a transaction, or a prepared one, may stay open.",
)  # fmt: skip
@click.option(
    "--max-idle-in-transaction", type=Duration(),
    default=_DEFAULTS.max_idle_in_transaction, show_default=True,
    help="Seconds (or 1m) a session may sit idle inside a transaction.",
)  # fmt: skip
@click.option(
    "--max-slot-retained-wal", type=MEGABYTES, default=_DEFAULTS.max_slot_retained_wal / MB,
    show_default=True, metavar="MB", help="MB of WAL an active replication slot may keep.",
)  # fmt: skip
@click.option(
    "--max-wal-size", type=MEGABYTES, default=_DEFAULTS.max_wal_bytes / MB, show_default=True,
    metavar="MB", help="MB a SQLite database's write-ahead log (its -wal file) may take.",
)  # fmt: skip
@click.option(
    "--max-free-ratio", type=RATIO, default=_DEFAULTS.max_free_ratio, show_default=True,
    help="Free pages a SQLite database file may hold, as a fraction of its pages ...",
)  # fmt: skip
@click.option(
    "--min-free-size", type=MEGABYTES, default=_DEFAULTS.min_free_bytes / MB,
    show_default=True, metavar="MB", help="... once they take this many MB.",
)  # fmt: skip
@click.option(
    "--max-purge-lag", type=click.IntRange(min=0), default=_DEFAULTS.max_purge_lag,
    show_default=True, help="MySQL/MariaDB: committed transactions whose undo InnoDB has "
    "not yet purged (its history list length).",
)  # fmt: skip
@database_url_option
def doctor(
    as_json: bool,
    max_dead_ratio: float,
    min_dead_tuples: int,
    max_vacuum_age: float,
    min_analyze_rows: int,
    max_index_bloat: float,
    min_index_size: float,
    max_transaction_age: float,
    max_idle_in_transaction: float,
    max_slot_retained_wal: float,
    max_wal_size: float,
    max_free_ratio: float,
    min_free_size: float,
    max_purge_lag: int,
    database_url: str,
) -> None:
    """Check that the database under jobq is kept up; exit 1 if something needs attention.

    \b
    Each check that applies to the database runs (the output lists them):
      dead_tuples, vacuum_age, never_analyzed, index_bloat (jobq's tables and indexes,
        PostgreSQL): dead rows, the last vacuum, statistics never gathered (of a table of
        --min-analyze-rows or more), empty index
        pages (pgstatindex if the pgstattuple extension is installed, else an estimate);
      long_transactions, idle_in_transaction (PostgreSQL: this database's sessions;
        MySQL/MariaDB: the server's): what holds back the cleanup of old rows;
      replication_slots, prepared_transactions (PostgreSQL, the whole server);
      wal_size, free_pages (SQLite): the -wal file, pages that hold nothing;
      purge_lag (MySQL/MariaDB): InnoDB's history list length.
    Each finding that needs attention comes with an explanation and what to do. It only
    reads: statistics views and catalogs, never a write, never a CREATE EXTENSION.

    \b
    Exit status: 0 when all is well, 1 when something needs attention (or, with one
    "error:" line on stderr and nothing on stdout, when the database cannot be read).

    \b
    With --json, one object:
    {"ok": bool, "checks": [names of the checks that ran],
     "findings": [{"check", "subject", "ok", "value", "threshold", "unit" (ratio,
                   seconds, bytes, rows, transactions), "explanation", "advice" (null
                   when ok), "details": {...}}],
     "skipped": {check: why it could not run}, "notes": {check: what it could not see}}
    Findings list every table, index and slot judged; for sessions and prepared
    transactions, those over the threshold (or one ok finding when there are none).
    """
    thresholds = Thresholds(
        max_dead_ratio=max_dead_ratio,
        min_dead_rows=min_dead_tuples,
        max_vacuum_age=max_vacuum_age,
        min_analyze_rows=min_analyze_rows,
        max_index_bloat=max_index_bloat,
        min_index_bytes=round(min_index_size * MB),
        max_transaction_age=max_transaction_age,
        max_idle_in_transaction=max_idle_in_transaction,
        max_slot_retained_wal=round(max_slot_retained_wal * MB),
        max_wal_bytes=round(max_wal_size * MB),
        max_free_ratio=max_free_ratio,
        min_free_bytes=round(min_free_size * MB),
        max_purge_lag=max_purge_lag,
    )
    with store_for(database_url, read_only=True) as store:
        diagnosis = examine(store.db, thresholds)
        shown = repr(store.db)
    click.echo(dumps(document(diagnosis)) if as_json else text(diagnosis, shown))
    if not diagnosis.ok:
        sys.exit(1)
