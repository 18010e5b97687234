"""What `jobq doctor`'s checks find, and the thresholds they judge by."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

#: Bytes in a megabyte, as jobq's size options count them.
MB = 1024 * 1024


@dataclass(frozen=True)
class Thresholds:
    """Where each check starts to ask for attention; `jobq doctor`'s options, same defaults."""

    #: Dead rows as a fraction of a table's rows (live + dead) ...
    max_dead_ratio: float = 0.2
    #: ... once there are at least this many of them (a small table churns harmlessly).
    min_dead_rows: int = 1000
    #: Seconds since a table with at least min_dead_rows dead rows was last vacuumed.
    max_vacuum_age: float = 86400.0
    #: Rows from which a table never analysed needs attention. Autovacuum analyses a table
    #: once 50 rows and 10% of it have changed (autovacuum_analyze_threshold and
    #: _scale_factor), so a table it never analysed is one that stayed below that, or one
    #: it does not reach; below this many rows no plan of jobq's can go far wrong.
    min_analyze_rows: int = 1000
    #: The estimated fraction of an index's pages that hold nothing ...
    max_index_bloat: float = 0.5
    #: ... for indexes of at least this many bytes.
    min_index_bytes: int = 10 * MB
    #: Seconds a transaction (or a prepared transaction) may stay open.
    max_transaction_age: float = 300.0
    #: Seconds a session may sit idle inside a transaction.
    max_idle_in_transaction: float = 60.0
    #: Bytes of WAL an active replication slot may keep the server from recycling.
    max_slot_retained_wal: int = 1024 * MB
    #: Bytes of a SQLite database's write-ahead log file.
    max_wal_bytes: int = 64 * MB
    #: Free pages as a fraction of a SQLite database file ...
    max_free_ratio: float = 0.5
    #: ... once they take at least this many bytes.
    min_free_bytes: int = 10 * MB
    #: Committed transactions whose undo InnoDB has not purged (its history list length).
    max_purge_lag: int = 100_000


@dataclass(frozen=True)
class Finding:
    """One thing a check measured: a table, an index, a session, a slot, a file.

    ``value`` is what was measured and ``threshold`` what it was judged against, both in
    ``unit`` ("ratio", "seconds", "bytes", "rows", "transactions"; "" for a yes or no);
    either may be None (never vacuumed; nothing to compare). ``explanation`` says in a
    sentence or two what was found and why it matters; ``advice`` what to do, when it
    needs attention. ``details`` holds the facts behind it (a session's pid and user, a
    table's row counts) under stable keys.
    """

    check: str
    subject: str
    ok: bool
    value: float | None
    threshold: float | None
    unit: str
    explanation: str
    advice: str | None = None
    details: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckResult:
    """One check that ran: what it looks for, with its threshold, and what it found."""

    name: str
    #: What the check looks for, one line with its thresholds: "dead rows over 20% ...".
    description: str
    #: Every subject it judged (for checks of sessions: those over a threshold, or one
    #: finding saying there are none).
    findings: tuple[Finding, ...]
    #: What it found, in a few words: "none of 9 tables", "2 sessions", "12 MB".
    summary: str
    #: What the reading could not see (other roles' sessions), or None.
    note: str | None = None

    @property
    def ok(self) -> bool:
        return all(finding.ok for finding in self.findings)


@dataclass(frozen=True)
class Diagnosis:
    """Every check that ran on one database, and those that could not run, with why."""

    checks: tuple[CheckResult, ...]
    skipped: Mapping[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether nothing needs attention (checks that could not run do not count)."""
        return all(check.ok for check in self.checks)

    @property
    def problems(self) -> list[Finding]:
        """The findings that need attention, check by check."""
        return [finding for check in self.checks for finding in check.findings if not finding.ok]
