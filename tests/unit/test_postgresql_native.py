"""The PostgreSQL dialect's native statements: SQLAlchemy's %(name)s placeholders turned
into PostgreSQL's own $n, which Database.run sends through psycopg's RawCursor.

The conformance suite runs every statement this way on a server; these pin down the
conversion's corners, which the statements jobq has today may not all exercise.
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import psycopg

from jobq.db.prepared import Prepared
from jobq.dialects.postgresql import PostgresDialect
from jobq.dialects.schema import tasks

c = tasks.c


def test_each_bind_name_gets_one_number_in_order_of_first_use() -> None:
    native = PostgresDialect().native_statement(
        "SELECT %(b)s, %(a)s::INTEGER, %(b)s WHERE x LIKE 'a%%' AND %(weird name.1)s"
    )
    assert native == (
        "SELECT $1, $2::INTEGER, $1 WHERE x LIKE 'a%' AND $3",
        ("b", "a", "weird name.1"),
    )


def test_a_prepared_statement_binds_its_native_parameters_in_their_order() -> None:
    statement = (
        sa.update(tasks)
        .where(c.id == sa.bindparam("id"), c.attempt == sa.bindparam("attempt"))
        .values(status="done", error=sa.bindparam("error"))
        .returning(c.id)
    )
    dialect = psycopg.dialect()
    prepared = Prepared(statement, dialect, native=PostgresDialect().native_statement)
    assert prepared.native_sql is not None and "%(" not in prepared.native_sql
    params = prepared.native_parameters({"id": 7, "attempt": 2, "error": "boom"})
    # $1 is the first placeholder of the statement, $2 the next new one, and so on.
    compiled = statement.compile(dialect=dialect)
    first_uses = list(dict.fromkeys(re.findall(r"%\(([^)]+)\)s", compiled.string)))
    expected = {**compiled.construct_params(_check=False), "id": 7, "attempt": 2, "error": "boom"}
    assert params == tuple(expected[name] for name in first_uses)
    assert re.findall(r"\$(\d+)", prepared.native_sql) == [str(i + 1) for i in range(len(params))]
