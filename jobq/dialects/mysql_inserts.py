"""MySQL's multi-row INSERT ... VALUES of enqueue_many, and the driver cursor that reads
the step between the ids it allocates.

InnoDB allocates the ids of one multi-row INSERT ... VALUES together, so the first id
(LAST_INSERT_ID) and @@auto_increment_increment give them all (MySQLDialect.inserted_ids).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobq.db.prepared import Prepared


class Rows:
    """A multi-row INSERT ... VALUES: the one-row ``insert``'s VALUES tuple ``count`` times,
    each with its own ``new_args`` (from the parameter ``args_list``)."""

    def __init__(self, insert: Prepared, count: int) -> None:
        head, values, row = insert.sql.partition(" VALUES ")
        self._insert = insert
        if insert.positional:
            self.sql = head + values + ", ".join([row] * count)
        else:
            marker = "%(new_args)s"
            assert row.count(marker) == 1, row
            self.sql = (
                head
                + values
                + ", ".join(row.replace(marker, f"%(new_args_{i})s") for i in range(count))
            )

    def parameters(self, values: Mapping[str, Any]) -> Any:
        """The driver's parameters of the statement: the shared ones of each row, and each
        row's own arguments from ``values["args_list"]``."""
        args_list = values["args_list"]
        shared = self._insert.parameters({**values, "new_args": _ARGS})
        if not self._insert.positional:
            shared.update({f"new_args_{i}": args for i, args in enumerate(args_list)})
            return shared
        slot = shared.index(_ARGS)
        rows: list[Any] = []
        row = list(shared)
        for args in args_list:
            row[slot] = args
            rows.extend(row)
        return tuple(rows)


#: Stands for a row's arguments while the shared parameters of Rows are bound.
_ARGS = object()


def driver_cursor(cursor: Any) -> Any:
    """A new driver cursor on the connection ``cursor`` (a cursor or a CursorResult) ran on."""
    if hasattr(cursor, "execute"):
        return cursor.connection.cursor()
    return cursor.context.root_connection.connection.dbapi_connection.cursor()
