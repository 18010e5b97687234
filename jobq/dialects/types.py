"""Portable column types and index helpers whose spelling differs per database.

schema.py builds the tables from these, so that no dialect name appears outside
jobq/dialects/.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

#: A 64-bit primary key that still autoincrements on SQLite, where only INTEGER
#: PRIMARY KEY is an alias of the rowid.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def partial_index_options(where: sa.ColumnElement[bool]) -> dict[str, Any]:
    """Index keyword arguments restricting it to rows matching ``where``, where supported."""
    return {"postgresql_where": where, "sqlite_where": where}


def partial_index(
    name: str, *columns: Any, where: sa.ColumnElement[bool], unique: bool = False
) -> sa.Index:
    """An index over only the rows matching ``where``, on the databases that have them."""
    return sa.Index(name, *columns, unique=unique, **partial_index_options(where))
