"""`jobq doctor`: whether the database under jobq is being kept up, in words an operator
can act on.

Each check judges something the database reports (dead rows, vacuums, long or idle
transactions, replication slots, prepared transactions, index bloat, a WAL file, purge
lag) against a threshold and explains what it found and what to do. The readings come
from the database's own statistics, read by jobq/dialects/health*.py, the only code that
knows which database it is. Here: findings.py (what a check finds; the thresholds),
checks.py (every check in its order; the checks themselves, no SQL, in tables.py,
horizon.py and storage.py, worded with wording.py), report.py (text and JSON), and
examine.py (the one call that reads a database and judges it).
"""

from __future__ import annotations

from jobq.doctor.examine import examine
from jobq.doctor.findings import CheckResult, Diagnosis, Finding, Thresholds

__all__ = ["CheckResult", "Diagnosis", "Finding", "Thresholds", "examine"]
