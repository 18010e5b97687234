"""Which dialects jobq has, and the one for a SQLAlchemy backend name."""

from __future__ import annotations

from jobq.dialects.base import Dialect
from jobq.dialects.mysql import MySQLDialect
from jobq.dialects.postgresql import PostgresDialect
from jobq.dialects.sqlite import SQLiteDialect

__all__ = ["MySQLDialect", "PostgresDialect", "SQLiteDialect", "dialect_named", "supported"]


def supported() -> list[str]:
    """The database backends jobq runs on."""
    return sorted(Dialect.registry)


def dialect_named(backend: str) -> Dialect | None:
    """The Dialect for a SQLAlchemy backend name ('postgresql', 'sqlite', ...), if supported."""
    cls = Dialect.registry.get(backend)
    return cls() if cls else None
