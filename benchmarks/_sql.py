"""Capture the SQL a Store sends, for the benchmarks that replay it with the raw drivers.

The Store's statements are never written out by hand here. ``capture_statement`` runs a
Store method with a ``before_cursor_execute`` listener on its engine, records the exact
statement text and parameters SQLAlchemy hands to the DBAPI cursor, then aborts the
Store's transaction so nothing is written. The benchmarks replay that text with psycopg
or sqlite3 directly.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event

import jobq

# Store.enqueue_many sends at most this many rows per statement (jobq.core.store._BATCH).
ENQUEUE_BATCH = 5000


class _Stop(Exception):
    """Raised from the listener to abort the Store's transaction once the SQL is seen."""


@dataclass(frozen=True)
class Statement:
    """One statement exactly as SQLAlchemy passed it to ``cursor.execute``.

    ``transactional`` says whether the Store ran it inside a transaction it opened
    (psycopg with autocommit off / SQLite after BEGIN), or on its own in autocommit.
    """

    sql: str
    params: dict[str, Any] | tuple[Any, ...]
    transactional: bool

    def slot_of(self, value: Any) -> str | int:
        """The dict key or tuple index of the one parameter equal to ``value``."""
        items = self.params.items() if isinstance(self.params, dict) else enumerate(self.params)
        slots = [k for k, v in items if type(v) is type(value) and v == value]
        if len(slots) != 1:
            raise LookupError(f"{value!r} is bound {len(slots)} times in {self.sql[:80]!r}...")
        return slots[0]

    def slots_containing(self, needle: str) -> list[str | int]:
        """The dict keys or tuple indexes of every string parameter containing ``needle``.

        A parameter may be bound more than once (SQLite's set_statuses reads its JSON
        array twice); at least one slot must hold it.
        """
        items = self.params.items() if isinstance(self.params, dict) else enumerate(self.params)
        slots = [k for k, v in items if isinstance(v, str) and needle in v]
        if not slots:
            raise LookupError(f"{needle!r} is in no parameter of {self.sql[:80]!r}...")
        return slots

    def binder(self, *slots: str | int) -> Callable[..., Any]:
        """A fast function returning the parameters with ``slots`` replaced, in order."""
        if isinstance(self.params, dict):
            base = dict(self.params)

            def bind_named(*values: Any) -> dict[str, Any]:
                params = base.copy()
                for slot, value in zip(slots, values, strict=True):
                    params[slot] = value  # type: ignore[index]
                return params

            return bind_named
        template = list(self.params)

        def bind_positional(*values: Any) -> list[Any]:
            params = template.copy()
            for slot, value in zip(slots, values, strict=True):
                params[slot] = value  # type: ignore[index]
            return params

        return bind_positional


def capture_statement(store: jobq.Store, action: Callable[[], Any]) -> Statement:
    """The first statement (other than BEGIN) ``action`` makes ``store`` send; nothing runs."""
    seen: list[Statement] = []

    def listener(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("BEGIN"):
            return
        if executemany:
            raise AssertionError("expected a single execute, got executemany")
        params = dict(parameters) if isinstance(parameters, dict) else tuple(parameters)
        dbapi_conn = cursor.connection
        if isinstance(dbapi_conn, sqlite3.Connection):
            transactional = dbapi_conn.in_transaction
        else:
            transactional = not dbapi_conn.autocommit
        seen.append(Statement(statement, params, transactional))
        raise _Stop

    # Capture reads the queues' limits first when its copy is older than a second.
    store.limited_queues()
    event.listen(store.engine, "before_cursor_execute", listener)
    try:
        action()
    except _Stop:
        pass
    finally:
        event.remove(store.engine, "before_cursor_execute", listener)
    if len(seen) != 1:
        raise RuntimeError(f"expected to capture one statement, got {len(seen)}")
    return seen[0]
