"""Prepared: a Core statement compiled once, whose SQL and parameters go straight to the driver.

SQLAlchemy builds and compiles every statement, and its own type processors convert the
parameters and the rows; what Prepared skips is the per-call execution machinery (pool
checkout, Connection and transaction objects, execution context, result wrappers), which
on SQLite costs more than the statement itself. The hot, fixed-shape statements
(capture, set_status, enqueue, get) run this way; see Database.run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect as SQLAlchemyDialect

from jobq.db.tasks import Undecodable

Processor = Callable[[Any], Any] | None


#: A dialect's Dialect.native_statement: SQL in the server's own placeholders, and the bind
#: names in their order, or None.
Native = Callable[[str], tuple[str, tuple[str, ...]] | None]


class Prepared:
    """``statement`` compiled for ``dialect``, with what it takes to bind and read it."""

    def __init__(
        self, statement: sa.Executable, dialect: SQLAlchemyDialect, native: Native | None = None
    ) -> None:
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
        #: Whether parameters() gives a tuple (the driver's paramstyle), else a dict.
        self.positional: bool = bool(dialect.positional)
        self._positions: Sequence[str] | None = compiled.positiontup if dialect.positional else None
        #: The SQL in the server's own placeholders, for a driver cursor that sends it as it
        #: is (Dialect.raw_cursor), where the dialect has one; else None.
        self.native_sql: str | None = None
        self._native_names: tuple[str, ...] = ()
        if native is not None and (converted := native(self.sql)) is not None:
            self.native_sql, self._native_names = converted

    def parameters(self, values: Mapping[str, Any]) -> Any:
        """The driver's parameters for ``values`` (bind name -> Python value)."""
        params = self._processed(values)
        if self._positions is not None:
            return tuple(params[name] for name in self._positions)
        return params

    def native_parameters(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """The parameters of ``native_sql`` for ``values``, in its placeholders' order."""
        params = self._processed(values)
        return tuple(params[name] for name in self._native_names)

    def _processed(self, values: Mapping[str, Any]) -> dict[str, Any]:
        params = {**self._defaults, **values}
        for name, processor in self._processors:
            params[name] = processor(params[name])
        return params


class RowReader:
    """Turns the driver's rows of ``columns`` into final Python values.

    SQLAlchemy's result processor of each column does the work, unless the driver's
    values are ``final`` already; either way datetimes come out aware, in UTC, whatever
    the driver or the session's time zone gave. A dialect's ``read_moment`` reads the
    datetimes it knows the form of faster, returning None for any other.
    """

    def __init__(
        self,
        columns: Sequence[sa.ColumnElement[Any]],
        dialect: SQLAlchemyDialect,
        *,
        final: bool = False,
        read_moment: Callable[[Any], datetime | None] | None = None,
    ) -> None:
        # (position, processor) of the columns whose driver values need converting.
        self._processors: list[tuple[int, Callable[[Any], Any]]] = []
        for position, column in enumerate(columns):
            processor: Processor = (
                None if final else column.type.dialect_impl(dialect).result_processor(dialect, None)
            )
            if isinstance(column.type, sa.DateTime):
                fallback = _in_utc(processor)
                processor = fallback if read_moment is None else _or(read_moment, fallback)
            elif isinstance(column.type, sa.JSON) and processor is not None:
                processor = _lenient(processor)
            if processor is not None:
                self._processors.append((position, processor))

    def __call__(self, row: Sequence[Any]) -> list[Any]:
        values = list(row)
        for position, processor in self._processors:
            value = values[position]
            if value is not None:
                values[position] = processor(value)
        return values


def _lenient(processor: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``processor`` of a JSON column, giving Undecodable for a value that is not JSON."""

    def decode(value: Any) -> Any:
        try:
            return processor(value)
        except ValueError as error:  # json.JSONDecodeError, UnicodeDecodeError
            return Undecodable(str(value), str(error))

    return decode


def _or(
    fast: Callable[[Any], datetime | None], fallback: Callable[[Any], datetime]
) -> Callable[[Any], datetime]:
    """``fast(value)``, or ``fallback(value)`` where it gives None."""

    def read(value: Any) -> datetime:
        moment = fast(value)
        return fallback(value) if moment is None else moment

    return read


def _in_utc(processor: Processor) -> Callable[[Any], datetime]:
    """``processor`` followed by conversion to an aware UTC datetime (naive means UTC)."""

    def in_utc(value: Any) -> datetime:
        moment = value if processor is None else processor(value)
        if moment.tzinfo is None:
            return moment.replace(tzinfo=UTC)
        return moment if moment.tzinfo is UTC else moment.astimezone(UTC)

    return in_utc
