"""Vacuum between autovacuum's passes: jobq_tasks' dead rows, and VACUUM (PostgreSQL).

Every capture and every end leaves a dead version of its row, and a dead entry in the
indexes whose rows changed; in the capture index the dead entries gather at its head,
where each capture's scan begins (the rows it took), and each capture walks all of them
until a vacuum clears them. Autovacuum visits a table at most once a minute
(``autovacuum_naptime``): at 8,000 tasks a second that is a million dead rows, and a
capture that took 0.02 ms after a vacuum takes milliseconds before the next
(benchmarks/sustained_load.py, issue 42). jobq.upkeep.vacuum reads the dead rows here and
vacuums the table itself when they pile up. MySQL's InnoDB purges old row versions on
its own, and SQLite keeps none: there is nothing to do on either.
"""

from __future__ import annotations

from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection


class DeadRows(NamedTuple):
    """What the statistics say of jobq_tasks: its dead and live row versions, and
    whether this session's role may vacuum it (owns it, or is a member of its owner)."""

    dead: int
    live: int
    may_vacuum: bool


# The table by the name jobq's statements use, resolved by the search_path; a superuser
# passes pg_has_role. The counts are the statistics' (a second or so behind).
_DEAD_ROWS = sa.text("""
    SELECT s.n_dead_tup, s.n_live_tup, pg_has_role(t.relowner, 'USAGE')
    FROM pg_class t JOIN pg_stat_user_tables s ON s.relid = t.oid
    WHERE t.oid = to_regclass('jobq_tasks')
""")


def postgresql_dead_rows(conn: Connection) -> DeadRows | None:
    """jobq_tasks' dead and live rows on PostgreSQL; None if it has no statistics yet."""
    row = conn.execute(_DEAD_ROWS).first()
    return None if row is None else DeadRows(int(row[0]), int(row[1]), bool(row[2]))


def postgresql_vacuum(conn: Connection) -> None:
    """VACUUM jobq_tasks on ``conn`` (in autocommit: VACUUM runs outside a transaction).
    SKIP_LOCKED: if a vacuum of it runs already (autovacuum's), there is nothing to add,
    and waiting for its lock would hold this connection for as long."""
    conn.exec_driver_sql("VACUUM (SKIP_LOCKED) jobq_tasks")
