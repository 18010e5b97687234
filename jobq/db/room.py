"""Room: how many bytes the parameters of one statement may take on a database.

Checked before a statement is sent, so that an argument or a result too large for the
database is a clear error (or a failed run) instead of a dropped connection (MySQL closes
it on a packet over max_allowed_packet) retried as if the server were down.
"""

from __future__ import annotations

from dataclasses import dataclass

# What PyMySQL escapes when it writes a string parameter into the statement.
_ESCAPED = ("\\", "'", '"', "\x00", "\n", "\r", "\x1a")


@dataclass(frozen=True)
class Room:
    """``limit`` bytes for one statement's parameters, set by what ``why`` says."""

    limit: int
    why: str
    #: Whether the driver escapes strings into the statement text, so that quotes and
    #: backslashes take two bytes each.
    escaped: bool = False

    def size(self, text: str) -> int:
        """Bytes ``text`` takes in a statement sent to this database."""
        size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        if self.escaped:
            size += sum(text.count(char) for char in _ESCAPED)
        return size

    def fits(self, text: str) -> bool:
        """Whether ``text`` fits as a statement's parameter."""
        # No character takes more than 4 bytes, escaped or not: most texts need no count.
        return len(text) * 4 <= self.limit or self.size(text) <= self.limit


#: PostgreSQL and SQLite hold values of up to about 1 GB.
GIGABYTE = Room(1_000_000_000, "the database's limit of 1,000,000,000 bytes on one value")
