"""INSERT ... ON CONFLICT, where the database has it (PostgreSQL's and SQLite's share a shape).

Dialect.insert_unique and Dialect.upsert_statement build theirs here from the dialect's
own INSERT construct (Dialect.upsert_insert); MySQL, which has none, overrides both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from jobq.dialects.schema import HOLDS_UNIQUE_KEY, tasks

c = tasks.c

#: The column, or columns, of the unique key an upsert is arbitrated by.
UpsertKey = sa.Column[Any] | Sequence[sa.Column[Any]]


def key_columns(key: UpsertKey) -> list[sa.Column[Any]]:
    """The columns of ``key``, as a list."""
    return [key] if isinstance(key, sa.Column) else list(key)


def insert_unique_statement(upsert_insert: Any, values: dict[str, Any]) -> Any:
    """INSERT of one task of ``values`` (new_row_values'), plus ``new_args``, that does
    nothing where a row holds its unique key, returning the new id (no row on conflict)."""
    return (
        upsert_insert(tasks)
        .values(**values, args=sa.bindparam("new_args", type_=c.args.type))
        .on_conflict_do_nothing(index_elements=[c.unique_key], index_where=HOLDS_UNIQUE_KEY)
        .returning(c.id)
    )


def upsert(
    upsert_insert: Any,
    table: sa.Table,
    key: UpsertKey,
    values: dict[str, Any],
    update: dict[str, Any] | None = None,
    where: sa.ColumnElement[bool] | None = None,
) -> sa.Insert:
    """Insert a row of ``values`` into ``table``, or, where a row has the same ``key``
    (a column or several; and ``where`` holds for it), update it with ``update`` (default:
    ``values``), with the dialect's ``upsert_insert``; one atomic statement."""
    columns = key_columns(key)
    if update is None:
        names = {column.name for column in columns}
        update = {name: value for name, value in values.items() if name not in names}
    statement: sa.Insert = (
        upsert_insert(table)
        .values(**values)
        .on_conflict_do_update(index_elements=columns, set_=update, where=where)
    )
    return statement
