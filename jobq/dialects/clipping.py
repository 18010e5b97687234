"""Parts of long stored values, cut by the database: the first or last characters of a
JSON or text column, and its whole size in bytes, so that a reader that shows 16 KB of a
50 MB argument never fetches the other 50 MB (the dashboard's pages; jobq.web.values).

Each database spells these differently: PostgreSQL casts its json columns to text and
counts with octet_length; MySQL casts JSON to CHAR (utf8mb4) and LENGTH counts bytes;
SQLite's JSON is text already, and LENGTH of it as a BLOB counts bytes.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from jobq.dialects.base import Dialect


def as_text(column: sa.ColumnElement[Any]) -> sa.ColumnElement[str]:
    """``column`` (JSON or text) as the text the database stores (MySQL: CAST AS CHAR)."""
    return sa.cast(column, sa.Text)


def head(column: sa.ColumnElement[Any], chars: int) -> sa.ColumnElement[str]:
    """The first ``chars`` characters of ``column`` as text (NULL stays NULL)."""
    return sa.func.substr(as_text(column), 1, _count(chars), type_=sa.Text)


def tail(dialect: Dialect, column: sa.ColumnElement[Any], chars: int) -> sa.ColumnElement[str]:
    """The last ``chars`` characters of ``column`` as text (NULL stays NULL)."""
    text = as_text(column)
    if dialect.name == "sqlite":
        # SQLite's substr counts a negative start from the end; it has no RIGHT().
        return sa.func.substr(text, -_count(chars), type_=sa.Text)
    return sa.func.right(text, _count(chars), type_=sa.Text)


def size_in_bytes(dialect: Dialect, column: sa.ColumnElement[Any]) -> sa.ColumnElement[int]:
    """How many bytes ``column``'s text takes, UTF-8 encoded (NULL stays NULL)."""
    text = as_text(column)
    if dialect.name == "postgresql":
        return sa.func.octet_length(text, type_=sa.BigInteger)
    if dialect.name == "sqlite":
        return sa.func.length(sa.cast(text, sa.LargeBinary), type_=sa.BigInteger)
    return sa.func.length(text, type_=sa.BigInteger)  # MySQL: LENGTH counts bytes


def _count(chars: int) -> sa.ColumnElement[int]:
    """A character count as an inline integer: jobq's own constant, never a user's."""
    if not isinstance(chars, int) or isinstance(chars, bool) or chars < 1:
        raise ValueError(f"a count of characters must be a positive int, not {chars!r}")
    return sa.literal_column(str(chars), sa.Integer)
