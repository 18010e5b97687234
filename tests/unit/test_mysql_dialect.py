"""The MySQL dialect's pure helpers: SET order, multi-row inserts, DATETIME parsing.

Everything that touches a server runs in the conformance suite on MariaDB; these pin down
the pieces whose mistakes a server might not show on every run.
"""

from __future__ import annotations

import graphlib
from datetime import datetime

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from jobq.db.prepared import Prepared
from jobq.dialects.mysql import MySQLDialect, _pymysql_conversions
from jobq.dialects.mysql_inserts import Rows as _Rows
from jobq.dialects.mysql_updates import ordered_update as _ordered_update
from jobq.dialects.schema import locks, tasks

c = tasks.c


def set_order(update: sa.Update) -> list[str]:
    sql = str(update.compile(dialect=mysql.dialect()))
    assignments = sql.split(" SET ", 1)[1].split(" WHERE ", 1)[0]
    return [part.split("=", 1)[0].strip().split(".")[-1] for part in assignments.split(", ")]


def test_capture_sets_retries_left_before_status() -> None:
    """MySQL assigns left to right: retries_left reads the status the row had, so status
    must be assigned after it (else a queued row would spend a retry on capture)."""
    values = MySQLDialect().capture_values(named_leases=None, now=sa.func.now())
    order = set_order(_ordered_update(sa.update(tasks), values))
    assert order.index("retries_left") < order.index("status")


def test_a_lease_takeover_reads_owner_and_expiry_before_setting_them() -> None:
    still_ours = sa.and_(locks.c.owner == "me", locks.c.expires_at >= sa.func.now())
    takeover = {
        "owner": sa.literal("me"),
        "expires_at": sa.func.now(),
        "acquired_at": sa.case((still_ours, locks.c.acquired_at), else_=sa.func.now()),
    }
    order = set_order(_ordered_update(sa.update(locks), takeover))
    assert order.index("acquired_at") < order.index("owner")
    assert order.index("acquired_at") < order.index("expires_at")


def test_assignments_that_read_each_other_are_refused() -> None:
    swap = {"owner": locks.c.locked_by, "locked_by": locks.c.owner}
    with pytest.raises(graphlib.CycleError):
        _ordered_update(sa.update(locks), swap)


def one_row_insert(positional: bool) -> Prepared:
    dialect = mysql.dialect(paramstyle="format" if positional else "pyformat")
    return Prepared(MySQLDialect().insert_many_statement("now"), dialect)


@pytest.mark.parametrize("positional", [False, True], ids=["named (PyMySQL)", "positional"])
def test_a_multi_row_insert_repeats_the_row_with_its_own_arguments(positional: bool) -> None:
    insert = one_row_insert(positional)
    shared = {
        "new_name": "t", "new_queue_id": "q", "new_priority": 0, "new_retries_left": 3,
        "new_lease": 30.0, "new_timeout": None, "new_unique_key": None, "new_lock_key": None,
    }  # fmt: skip
    rows = _Rows(insert, 3)
    params = rows.parameters({**shared, "args_list": ['{"a":1}', '{"a":2}', '{"a":3}']})
    head, _, row = insert.sql.partition(" VALUES ")
    if positional:
        assert rows.sql == f"{head} VALUES {row}, {row}, {row}"
        per_row = len(params) // 3
        assert [params[i * per_row : (i + 1) * per_row] for i in range(3)] == [
            insert.parameters({**shared, "new_args": f'{{"a":{i}}}'}) for i in (1, 2, 3)
        ]
    else:
        own = [row.replace("%(new_args)s", f"%(new_args_{i})s") for i in range(3)]
        assert rows.sql == f"{head} VALUES {', '.join(own)}"
        assert [params[f"new_args_{i}"] for i in range(3)] == ['{"a":1}', '{"a":2}', '{"a":3}']
        assert params["new_queue_id"] == "q"


def test_datetimes_parse_as_pymysql_parses_them() -> None:
    pytest.importorskip("pymysql")
    from pymysql import converters
    from pymysql.constants import FIELD_TYPE

    parse = _pymysql_conversions()[FIELD_TYPE.DATETIME]
    for text in ("2026-11-22 14:31:17", "2026-11-22 14:31:17.966411", "1970-01-01 00:00:00.000001"):
        assert parse(text) == converters.convert_datetime(text)
        assert isinstance(parse(text), datetime)
    # What fromisoformat refuses goes to PyMySQL's own parser (a zero date stays text).
    assert parse("0000-00-00 00:00:00") == converters.convert_datetime("0000-00-00 00:00:00")
