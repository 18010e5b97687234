"""Portable column types, table options and index helpers whose spelling differs per database.

schema.py and the Alembic revisions build the tables from these, so that no dialect name
appears outside jobq/dialects/.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

# Also registers the DDL that emulates partial indexes on MySQL.
from jobq.dialects.mysql_ddl import EXACT_COLLATION

_MYSQL = ("mysql", "mariadb")

#: A 64-bit primary key that still autoincrements on SQLite, where only INTEGER
#: PRIMARY KEY is an alias of the rowid.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


class _UTCDateTime(mysql.DATETIME):
    """MySQL's DATETIME holds no time zone: jobq stores UTC there, to the microsecond."""

    cache_ok = True

    def bind_processor(self, dialect: Any) -> Any:
        def naive_utc(value: datetime | None) -> datetime | None:
            if value is not None and value.tzinfo is not None:
                return value.astimezone(UTC).replace(tzinfo=None)
            return value

        return naive_utc


#: A moment in time: timestamptz on PostgreSQL, microsecond DATETIME in UTC on MySQL
#: (its default keeps whole seconds only), text on SQLite.
Moment = sa.DateTime(timezone=True).with_variant(_UTCDateTime(fsp=6), *_MYSQL)

#: A double-precision number: MySQL's FLOAT is single precision (0.3 would read 0.30000001).
Double = sa.Float().with_variant(mysql.DOUBLE(asdecimal=False), *_MYSQL)

#: Seconds, as a Double.
Seconds = Double

#: Text of any length: MySQL's TEXT stops at 64 KiB, shorter than a long traceback.
LongText = sa.Text().with_variant(mysql.LONGTEXT(), *_MYSQL)


def table_options() -> dict[str, Any]:
    """Keyword arguments for every jobq table: on MySQL, InnoDB with 4-byte UTF-8.

    Its collation is binary (chosen per server by mysql_ddl), so that names and keys
    compare exactly as on PostgreSQL and SQLite: 'Emails' is not 'emails'.
    """
    options: dict[str, Any] = {"info": {EXACT_COLLATION: True}}
    for name in _MYSQL:  # a mariadb:// engine reads only options spelt mariadb_
        options.update({f"{name}_engine": "InnoDB", f"{name}_charset": "utf8mb4"})
    return options


def partial_index_options(where: sa.ColumnElement[bool]) -> dict[str, Any]:
    """Index keyword arguments restricting it to rows matching ``where``.

    PostgreSQL and SQLite have partial indexes; MySQL gets an emulation (mysql_ddl): a
    generated column that is 1 where ``where`` holds and NULL elsewhere, leading the index.
    """
    return {"postgresql_where": where, "sqlite_where": where, "mysql_partial_where": where}


def partial_index(
    name: str, *columns: Any, where: sa.ColumnElement[bool], unique: bool = False
) -> sa.Index:
    """An index over only the rows matching ``where`` (emulated on MySQL, see mysql_ddl)."""
    return sa.Index(name, *columns, unique=unique, **partial_index_options(where))


def partial_index_where_native(name: str, *columns: Any, where: sa.ColumnElement[bool]) -> sa.Index:
    """An index over only the rows matching ``where`` where the database has partial
    indexes (PostgreSQL, SQLite), and over every row elsewhere (MySQL): for a table
    without the flag column that the emulation of partial_index needs."""
    return sa.Index(name, *columns, postgresql_where=where, sqlite_where=where)
