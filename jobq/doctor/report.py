"""`jobq doctor`'s output: text for people, one JSON document for monitoring.

The document (stable; new keys may be added)::

    {"ok": bool,                   # false when any finding needs attention
     "checks": [NAME, ...],        # the checks that ran, in order
     "findings": [{"check", "subject", "ok", "value", "threshold", "unit",
                   "explanation", "advice" (null when ok), "details": {...}}, ...],
     "skipped": {NAME: REASON},    # checks that apply but could not read what they need
     "notes": {NAME: NOTE}}        # what a check could not see (other roles' sessions)

Findings list every subject a check judged (each table, index, slot), ok or not; checks
of sessions and prepared transactions list those over their threshold, or one ok finding
with the oldest age when there are none.
"""

from __future__ import annotations

import textwrap
from typing import Any

from jobq.doctor.findings import Diagnosis, Finding

#: Width the explanations are wrapped to.
WIDTH = 100


def document(diagnosis: Diagnosis) -> dict[str, Any]:
    """The JSON document of ``diagnosis`` (see the module docstring)."""
    return {
        "ok": diagnosis.ok,
        "checks": [check.name for check in diagnosis.checks],
        "findings": [
            finding_document(finding) for check in diagnosis.checks for finding in check.findings
        ],
        "skipped": dict(diagnosis.skipped),
        "notes": {check.name: check.note for check in diagnosis.checks if check.note},
    }


def finding_document(finding: Finding) -> dict[str, Any]:
    """One finding as a JSON object."""
    return {
        "check": finding.check,
        "subject": finding.subject,
        "ok": finding.ok,
        "value": finding.value,
        "threshold": finding.threshold,
        "unit": finding.unit,
        "explanation": finding.explanation,
        "advice": finding.advice,
        "details": dict(finding.details),
    }


def text(diagnosis: Diagnosis, database: str) -> str:
    """``diagnosis`` for people: a line per check (OK, ATTENTION or SKIPPED), then each
    finding that needs attention with its explanation and advice, then the verdict."""
    names = [check.name for check in diagnosis.checks] + list(diagnosis.skipped)
    width = max((len(name) for name in names), default=0)
    lines = [f"jobq doctor: {database}", ""]
    for check in diagnosis.checks:
        status = "OK" if check.ok else "ATTENTION"
        lines.append(f"{status:<9}  {check.name:<{width}}  {check.description}: {check.summary}")
        if check.note:
            lines.append(f"{'':<9}  {'':<{width}}  note: {check.note}")
    for name, reason in diagnosis.skipped.items():
        lines.append(f"{'SKIPPED':<9}  {name:<{width}}  {reason}")
    problems = diagnosis.problems
    for finding in problems:
        lines += ["", f"ATTENTION  {finding.check}: {finding.subject}"]
        lines += _wrapped(finding.explanation)
        if finding.advice:
            lines += _wrapped(f"What to do: {finding.advice}")
    lines.append("")
    if problems:
        count = len(problems)
        lines.append(f"{count} finding{'s need' if count != 1 else ' needs'} attention.")
    else:
        lines.append(f"All {len(diagnosis.checks)} checks OK.")
    # A terminal cannot print lone surrogates (undecodable bytes in a statement's text).
    return "\n".join(lines).encode("utf-8", "backslashreplace").decode("utf-8")


def _wrapped(paragraph: str) -> list[str]:
    return textwrap.wrap(
        paragraph,
        WIDTH,
        initial_indent="  ",
        subsequent_indent="  ",
        break_on_hyphens=False,
        break_long_words=False,
    )
