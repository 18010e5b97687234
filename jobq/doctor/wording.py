"""How `jobq doctor`'s findings are worded: durations, sizes, counts, and a check's summary."""

from __future__ import annotations

from collections.abc import Sequence

from jobq.db.durations import format_duration
from jobq.doctor.findings import CheckResult, Finding


def judged(
    name: str,
    description: str,
    findings: Sequence[Finding],
    noun: str,
    note: str | None = None,
    *,
    every_subject: bool = True,
) -> CheckResult:
    """A check judging many subjects, summed up by how many need attention: "2 of 9
    tables"; "2 sessions" where only those over the threshold are listed
    (``every_subject`` False)."""
    problems = sum(not finding.ok for finding in findings)
    if not every_subject:
        summary = count(problems, noun) if problems else "none"
    elif not problems:
        summary = f"none of {count(len(findings), noun)}"
    else:
        summary = f"{problems} of {count(len(findings), noun)}"
    return CheckResult(name, description, tuple(findings), summary, note)


def count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless one: "1 table", "24 indexes"."""
    plural = "indexes" if noun == "index" else f"{noun}s"
    return f"{n} {noun if n == 1 else plural}"


def duration(seconds: float) -> str:
    """``seconds`` as format_duration writes them, to a tenth under ten seconds: 1.2s."""
    if seconds < 10:
        return f"{seconds:.1f}".rstrip("0").rstrip(".") + "s"
    return format_duration(seconds)


def size(nbytes: float) -> str:
    """A number of bytes as people read it: 900 bytes, 12 kB, 3.4 MB, 2.1 GB."""
    for unit, scale in (("GB", 1024**3), ("MB", 1024**2), ("kB", 1024)):
        if nbytes >= scale:
            value = nbytes / scale
            shown = f"{value:.1f}".removesuffix(".0") if value < 10 else f"{value:.0f}"
            return f"{shown} {unit}"
    return f"{nbytes:.0f} bytes"
