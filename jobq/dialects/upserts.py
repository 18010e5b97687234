"""INSERT ... ON CONFLICT, where the database has it (PostgreSQL's and SQLite's share a shape).

Dialect.insert_unique and Dialect.upsert_statement build theirs here from the dialect's
own INSERT construct (Dialect.upsert_insert); MySQL, which has none, overrides both.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from jobq.dialects.schema import HOLDS_UNIQUE_KEY, tasks

c = tasks.c


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
    key: sa.Column[Any],
    values: dict[str, Any],
    update: dict[str, Any] | None = None,
    where: sa.ColumnElement[bool] | None = None,
) -> sa.Insert:
    """Insert a row of ``values`` into ``table``, or, where a row has the same ``key``
    (and ``where`` holds for it), update it with ``update`` (default: ``values``), with
    the dialect's ``upsert_insert``; one atomic statement."""
    if update is None:
        update = {name: value for name, value in values.items() if name != key.name}
    statement: sa.Insert = (
        upsert_insert(table)
        .values(**values)
        .on_conflict_do_update(index_elements=[key], set_=update, where=where)
    )
    return statement
