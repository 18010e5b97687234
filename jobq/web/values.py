"""Stored values (arguments, results, errors, progress) as pages show them: cut by the
database to a readable size, their whole size stated, the whole one a download away.

A page never fetches a whole value: its query selects the first (or, for an error, the
last) characters of the column and the column's size in bytes (jobq.dialects.clipping),
so a task with a 50 MB argument costs a page 16 KB of it. A value that fits is shown as
before (JSON indented); a longer one as its stored text's first part, said to be cut.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from jobq.dialects import clipping
from jobq.dialects.base import Dialect
from jobq.dialects.schema import tasks

c = tasks.c

#: Characters of a value the task page shows.
PAGE_CHARS = 16_000
#: Characters of a value a table cell shows (the end of an error: its last line).
CELL_CHARS = 300
#: The values a task page shows and offers whole as downloads, by name.
FIELDS: dict[str, sa.Column[Any]] = {
    "args": c.args,
    "result": c.result,
    "error": c.error,
    "progress": c.progress,
}


@dataclass(frozen=True)
class Shown:
    """One stored value as a page shows it: ``text`` (the whole of it, or the part kept),
    the whole value's ``size`` in bytes, and whether the text is ``cut``."""

    text: str
    size: int
    cut: bool
    #: The value decoded, when it was whole and JSON (progress is shown from it).
    decoded: Any = None


def clipped(
    dialect: Dialect, column: sa.ColumnElement[Any], chars: int, name: str, *, end: bool = False
) -> list[sa.Label[Any]]:
    """Two columns to select for ``column``: ``<name>_text`` (its first ``chars``
    characters, or its last with ``end``) and ``<name>_size`` (its bytes)."""
    part = clipping.tail(dialect, column, chars) if end else clipping.head(column, chars)
    return [
        part.label(f"{name}_text"),
        clipping.size_in_bytes(dialect, column).label(f"{name}_size"),
    ]


def shown(row: Any, name: str, chars: int, *, is_json: bool) -> Shown | None:
    """The value ``name`` of ``row`` (selected through ``clipped`` with ``chars``) as a
    page shows it; None for a NULL. A whole JSON value is indented for reading."""
    text: str | None = getattr(row, f"{name}_text")
    size: int | None = getattr(row, f"{name}_size")
    if text is None or size is None:
        return None
    # Whole when the part holds every byte: a character is at least one byte.
    whole = len(text.encode("utf-8", "surrogatepass")) >= size or len(text) < chars
    if not whole:
        return Shown(text, int(size), cut=True)
    if not is_json:
        return Shown(text, int(size), cut=False)
    try:
        decoded = json.loads(text)
    except ValueError as error:
        return Shown(f"(not JSON: {error})\n{text}", int(size), cut=False)
    indented = json.dumps(decoded, indent=2, ensure_ascii=False, default=str)
    return Shown(indented, int(size), cut=False, decoded=decoded)


def last_line(text: str | None) -> str:
    """The last non-blank line of an error's end (a traceback's is the exception)."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def size_text(size: int) -> str:
    """A size in bytes as people read it: '812 bytes', '48.2 KB', '50.0 MB', '1.2 GB'."""
    if size < 1000:
        return f"{size:,} bytes"
    if size < 1000**2:
        return f"{size / 1000:,.1f} KB"
    if size < 1000**3:
        return f"{size / 1000**2:,.1f} MB"
    return f"{size / 1000**3:,.1f} GB"


def whole_value(store: Any, task_id: int, name: str) -> tuple[bool, bytes | None]:
    """Value ``name`` of task ``task_id`` whole, as a JSON document's bytes: (whether the
    task exists, the bytes or None for a NULL). An error, plain text, is a JSON string."""
    column = FIELDS[name]
    stmt = sa.select(clipping.as_text(column)).where(c.id == task_id)
    with store.db.unit(read_only=True) as conn:
        found = conn.execute(stmt).first()
    if found is None:
        return False, None
    text: str | None = found[0]
    if text is None:
        return True, None
    if name == "error":
        text = json.dumps(text, ensure_ascii=False)
    return True, text.encode("utf-8", "backslashreplace")
