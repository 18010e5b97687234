"""MySQL / MariaDB DDL for what jobq's schema needs and these databases lack.

- Partial indexes. An index made with ``mysql_partial_where`` (types.partial_index_options)
  becomes a generated column, 1 where the condition holds and NULL elsewhere, leading
  the index: ``(<name>_on, columns...)``. A unique one then behaves as a partial unique
  index, since rows whose key has a NULL never conflict; a query uses one by naming its
  column (``<name>_on = 1``; see partial_index_column).
- Exact string comparison. jobq's tables get a binary NO PAD collation, so that keys
  compare as on PostgreSQL and SQLite ('a' is neither 'A' nor 'a '); its name differs
  between MariaDB and MySQL, so it is chosen for the server the DDL runs on.

Both apply only to what jobq itself marks; other tables and indexes compile as usual.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import CreateIndex, CreateTable, DropIndex

_MYSQL = ("mysql", "mariadb")
for _name in _MYSQL:
    sa.Index.argument_for(_name, "partial_where", None)

#: Table.info key that asks for the exact collation.
EXACT_COLLATION = "jobq_exact_collation"


def partial_index_column(index_name: str) -> str:
    """The generated column that emulates partial index ``index_name`` on MySQL."""
    return f"{index_name}_on"


def _partial_where(index: sa.Index) -> sa.ColumnElement[bool] | None:
    options = index.dialect_options
    where = options["mysql"]["partial_where"]
    return options["mariadb"]["partial_where"] if where is None else where


@compiles(CreateIndex, *_MYSQL)
def _create_index(create: CreateIndex, compiler: Any, **kw: Any) -> str:
    index = create.element
    where = _partial_where(index)
    if where is None:
        return compiler.visit_create_index(create, **kw)
    sql = compiler.sql_compiler
    assert index.name is not None, "jobq names every index it marks partial"
    flag = compiler.preparer.quote(partial_index_column(index.name))
    condition = sql.process(where, include_table=False, literal_binds=True)
    columns = [
        sql.process(expr, include_table=False, literal_binds=True) for expr in index.expressions
    ]
    unique = "UNIQUE " if index.unique else ""
    # One statement, so the column never exists without its index.
    return (
        f"ALTER TABLE {compiler.preparer.format_table(index.table)} "
        f"ADD COLUMN {flag} TINYINT GENERATED ALWAYS AS (CASE WHEN {condition} THEN 1 END) "
        f"STORED, ADD {unique}INDEX {compiler.preparer.quote(index.name)} "
        f"({', '.join([flag, *columns])})"
    )


@compiles(DropIndex, *_MYSQL)
def _drop_index(drop: DropIndex, compiler: Any, **kw: Any) -> str:
    index = drop.element
    if _partial_where(index) is None:
        return compiler.visit_drop_index(drop, **kw)
    assert index.name is not None, "jobq names every index it marks partial"
    flag = compiler.preparer.quote(partial_index_column(index.name))
    return (
        f"ALTER TABLE {compiler.preparer.format_table(index.table)} "
        f"DROP INDEX {compiler.preparer.quote(index.name)}, DROP COLUMN {flag}"
    )


@compiles(CreateTable, *_MYSQL)
def _create_table(create: CreateTable, compiler: Any, **kw: Any) -> str:
    text = compiler.visit_create_table(create, **kw)
    if not create.element.info.get(EXACT_COLLATION):
        return text
    # MariaDB 10.2+ and MySQL 8.0.17+ name their binary NO PAD collations differently.
    exact = "utf8mb4_nopad_bin" if compiler.dialect.is_mariadb else "utf8mb4_0900_bin"
    return f"{text.rstrip()} COLLATE {exact}"


def autogenerate_filter(metadata: sa.MetaData) -> Callable[..., bool]:
    """An Alembic ``include_object`` for MySQL that leaves out the emulated partial indexes
    and their generated columns, which autogenerate cannot match to the metadata (the
    migration tests compare their DDL instead)."""
    partial = {
        index.name
        for table in metadata.tables.values()
        for index in table.indexes
        if _partial_where(index) is not None
    }
    flags = {partial_index_column(str(name)) for name in partial}

    def include(_object: Any, name: str | None, type_: str, *_: Any) -> bool:
        if type_ == "index":
            return name not in partial
        if type_ == "column":
            return name not in flags
        return True

    return include
