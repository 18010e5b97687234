"""Prepared: a Core statement compiled once, whose SQL and parameters go straight to the driver.

SQLAlchemy builds and compiles every statement, and its own type processors convert the
parameters and the rows; what Prepared skips is the per-call execution machinery (pool
checkout, Connection and transaction objects, execution context, result wrappers), which
on SQLite costs more than the statement itself. The hot, fixed-shape statements
(capture, set_status, enqueue, get) run this way; see Database.run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect as SQLAlchemyDialect

Processor = Callable[[Any], Any] | None


class Prepared:
    """``statement`` compiled for ``dialect``, with what it takes to bind and read it."""

    def __init__(self, statement: sa.Executable, dialect: SQLAlchemyDialect) -> None:
        compiled = statement.compile(dialect=dialect)  # type: ignore[attr-defined]
        if compiled.literal_execute_params or compiled.post_compile_params:
            raise ValueError("Prepared statements cannot have expanding or literal parameters")
        #: The SQL text the driver receives.
        self.sql: str = compiled.string
        # Values the statement carries itself (constants such as the 'queued' status).
        self._defaults = compiled.construct_params(_check=False)
        self._processors = [
            (name, processor)
            for bind, name in compiled.bind_names.items()
            if (processor := bind.type.dialect_impl(dialect).bind_processor(dialect)) is not None
        ]
        self._positions: Sequence[str] | None = compiled.positiontup if dialect.positional else None

    def parameters(self, values: Mapping[str, Any]) -> Any:
        """The driver's parameters for ``values`` (bind name -> Python value)."""
        params = {**self._defaults, **values}
        for name, processor in self._processors:
            params[name] = processor(params[name])
        if self._positions is not None:
            return tuple(params[name] for name in self._positions)
        return params


class RowReader:
    """Turns the driver's rows of ``columns`` into Python values with SQLAlchemy's processors."""

    def __init__(
        self, columns: Sequence[sa.ColumnElement[Any]], dialect: SQLAlchemyDialect
    ) -> None:
        self._processors: list[Processor] = [
            column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns
        ]

    def __call__(self, row: Sequence[Any]) -> list[Any]:
        return [
            value if processor is None or value is None else processor(value)
            for processor, value in zip(self._processors, row, strict=True)
        ]
