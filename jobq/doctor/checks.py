"""Judging a database's readings against the thresholds: every check, in its order.

A check whose readings the database does not have (None) is not run. No SQL in the
checks, and no database named: the readings, and the statements an operator runs
(Remedies), come from jobq/dialects/health*.py. The checks live by subject in tables.py,
horizon.py and storage.py.
"""

from __future__ import annotations

from collections.abc import Callable

from jobq.dialects.health import Readings
from jobq.doctor.findings import CheckResult, Diagnosis, Thresholds
from jobq.doctor.horizon import (
    QUERY_CHARACTERS,
    idle_in_transaction,
    long_transactions,
    prepared_transactions,
    replication_slots,
    shown_query,
)
from jobq.doctor.storage import free_pages, purge_lag, wal_size
from jobq.doctor.tables import dead_tuples, index_bloat, never_analyzed, vacuum_age

__all__ = ["CHECKS", "QUERY_CHARACTERS", "diagnose", "shown_query"]

Check = Callable[[Readings, Thresholds], CheckResult | None]

#: Every check, in the order they are reported.
CHECKS: tuple[Check, ...] = (
    dead_tuples, vacuum_age, never_analyzed, index_bloat, long_transactions,
    idle_in_transaction, replication_slots, prepared_transactions, wal_size, free_pages,
    purge_lag,
)  # fmt: skip


def diagnose(readings: Readings, thresholds: Thresholds) -> Diagnosis:
    """Every check that applies to ``readings``, in CHECKS' order, and those that could
    not read what they need."""
    results = [check(readings, thresholds) for check in CHECKS]
    return Diagnosis(
        checks=tuple(result for result in results if result is not None),
        skipped=dict(readings.unreadable),
    )
