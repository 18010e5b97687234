"""MySQL's and MariaDB's state for `jobq doctor`: InnoDB's purge lag and its open
transactions.

InnoDB keeps the old versions of updated and deleted rows (undo records) until no
transaction may still read them; the history list length counts the committed
transactions whose undo is not yet purged. It is read from
information_schema.INNODB_METRICS (``trx_rseg_history_len``) when that counter is
enabled, else from SHOW ENGINE INNODB STATUS. Open transactions come from
information_schema.INNODB_TRX, with their connection's user and command from
PROCESSLIST: the whole server's, since purge is the whole server's. Both need the
PROCESS privilege; without it a check says so and is not run.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.db.errors import first_line
from jobq.dialects.health import PurgeLagReading, Readings, Remedies, SessionReading

_TABLES = sa.text(
    "SELECT TABLE_NAME FROM information_schema.TABLES"
    " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN :names"
).bindparams(sa.bindparam("names", expanding=True))

_METRIC = sa.text(
    "SELECT * FROM information_schema.INNODB_METRICS WHERE NAME = 'trx_rseg_history_len'"
)
_HISTORY = re.compile(r"History list length\s+(\d+)")

_TRANSACTIONS = sa.text("""
    SELECT t.trx_mysql_thread_id, p.USER, t.trx_state,
           TIMESTAMPDIFF(MICROSECOND, t.trx_started, NOW(6)) / 1000000,
           p.COMMAND, p.TIME, COALESCE(t.trx_query, p.INFO)
    FROM information_schema.INNODB_TRX t
    LEFT JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
    WHERE t.trx_mysql_thread_id <> CONNECTION_ID()
    ORDER BY t.trx_started
""")

REMEDIES = Remedies(
    end_session="KILL {pid}",
    # MariaDB 10.3+; MySQL has no such setting (wait_timeout ends any idle session).
    idle_timeout="idle_transaction_timeout (MariaDB)",
    faster_purge="raise innodb_purge_threads (and innodb_purge_batch_size)",
)

#: The checks each reading serves, for saying which could not be run.
_PURGE_CHECKS = ("purge_lag",)
_SESSION_CHECKS = ("long_transactions", "idle_in_transaction")


def readings(conn: Connection, tables: Sequence[str], inspect_index_bytes: int) -> Readings:
    """What `jobq doctor` checks on a MySQL or MariaDB database (see the module docstring)."""
    found = tuple(sorted(conn.execute(_TABLES, {"names": list(tables)}).scalars()))
    unreadable: dict[str, str] = {}
    purge_lag = sessions = None
    try:
        purge_lag = _purge_lag(conn)
    except (sa.exc.DBAPIError, _Unreadable) as error:
        unreadable.update(dict.fromkeys(_PURGE_CHECKS, _why(error)))
    try:
        sessions = tuple(_session(row) for row in conn.execute(_TRANSACTIONS))
    except sa.exc.DBAPIError as error:
        unreadable.update(dict.fromkeys(_SESSION_CHECKS, _why(error)))
    return Readings(
        tables_found=found,
        sessions=sessions,
        purge_lag=purge_lag,
        unreadable=unreadable,
        remedies=REMEDIES,
    )


def _purge_lag(conn: Connection) -> PurgeLagReading:
    metric = conn.execute(_METRIC).mappings().first()
    # MariaDB says ENABLED (1 or 0), MySQL 8 STATUS ('enabled' or 'disabled').
    if metric is not None and (metric.get("ENABLED") == 1 or metric.get("STATUS") == "enabled"):
        return PurgeLagReading(int(metric["COUNT"]), "information_schema.INNODB_METRICS")
    status = conn.exec_driver_sql("SHOW ENGINE INNODB STATUS").first()
    found = _HISTORY.search(str(status[2]) if status is not None else "")
    if found is None:
        raise _Unreadable("SHOW ENGINE INNODB STATUS gives no history list length")
    return PurgeLagReading(int(found.group(1)), "SHOW ENGINE INNODB STATUS")


class _Unreadable(Exception):
    """The server gave no answer to read (SHOW ENGINE INNODB STATUS of another engine)."""


def _session(row: Any) -> SessionReading:
    thread, user, state, age, command, idle_seconds, query = row
    return SessionReading(
        pid=int(thread),
        user=user,
        application=None,
        state=None if state is None else str(state).lower(),
        transaction_age=float(age or 0),
        # A connection whose command is Sleep runs nothing: its transaction waits for it.
        idle_age=float(idle_seconds or 0) if command == "Sleep" else None,
        holds_horizon=None,
        query=query,
    )


def _why(error: Exception) -> str:
    """Why a reading failed, for the check it served: a missing privilege named as such."""
    code = getattr(getattr(error, "orig", None), "args", (None,))[0]
    if code in (1227, 1142, 1044):  # access denied: specific, table, database
        return "needs the PROCESS privilege (GRANT PROCESS ON *.* TO ...)"
    return first_line(error)
