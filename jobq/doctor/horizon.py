"""The checks of what holds back the cleanup of old row versions: long and idle
transactions, replication slots, prepared transactions."""

from __future__ import annotations

import re

from jobq.dialects.health import Readings, SessionReading
from jobq.doctor.findings import CheckResult, Finding, Thresholds
from jobq.doctor.wording import duration, judged, size

#: How much of a session's statement a finding shows.
QUERY_CHARACTERS = 80
# A password literal in a statement (ALTER ROLE ... PASSWORD '...', IDENTIFIED BY '...').
_SECRET = re.compile(r"((?:PASSWORD|IDENTIFIED\s+BY)\s*(?:=\s*)?)('(?:[^']|'')*'?|\S+)", re.I)


def long_transactions(readings: Readings, limits: Thresholds) -> CheckResult | None:
    """The sessions whose transaction has been open over max_transaction_age."""
    if readings.sessions is None:
        return None
    limit = limits.max_transaction_age
    old = [s for s in readings.sessions if s.transaction_age > limit]
    findings = []
    for session in old:
        explanation = (
            f"Session {session.pid} ({_who(session)}) has had a transaction open for "
            f"{duration(session.transaction_age)} (more than {duration(limit)}). "
            f"{_holding(session)}"
        )
        advice = (
            "Find out what it waits for, and end it if it is stuck: "
            f"{readings.remedies.end_session.format(pid=session.pid)}. Keep transactions short: "
            "commit before slow work, not after."
        )
        age = session.transaction_age
        findings.append(
            _session_finding("long_transactions", session, age, limit, explanation, advice)
        )
    if not old:
        oldest = max((s.transaction_age for s in readings.sessions), default=None)
        findings.append(_none_over("long_transactions", "transaction", oldest, limit))
    description = f"transactions open longer than {duration(limit)}"
    note = readings.sessions_limited
    return judged("long_transactions", description, findings, "session", note, every_subject=False)


def idle_in_transaction(readings: Readings, limits: Thresholds) -> CheckResult | None:
    """The sessions idle inside a transaction for over max_idle_in_transaction."""
    if readings.sessions is None:
        return None
    limit = limits.max_idle_in_transaction
    idle = [s for s in readings.sessions if s.idle_age is not None and s.idle_age > limit]
    remedies = readings.remedies
    findings = []
    for session in idle:
        assert session.idle_age is not None
        explanation = (
            f"Session {session.pid} ({_who(session)}) has sat idle inside its transaction for "
            f"{duration(session.idle_age)} (more than {duration(limit)}): it "
            f"began a transaction and has neither committed nor rolled back. "
            f"{_holding(session)} It also keeps its locks, which may hold up jobq's workers."
        )
        advice = (
            "Fix the code that leaves the transaction open (a missing commit, an error caught "
            f"before its rollback); end this one with "
            f"{remedies.end_session.format(pid=session.pid)}."
        )
        if remedies.idle_timeout:
            advice += f" The server can end such sessions by itself: set {remedies.idle_timeout}."
        age = session.idle_age
        findings.append(
            _session_finding("idle_in_transaction", session, age, limit, explanation, advice)
        )
    if not idle:
        longest = max(
            (s.idle_age for s in readings.sessions if s.idle_age is not None), default=None
        )
        findings.append(_none_over("idle_in_transaction", "idle transaction", longest, limit))
    description = f"sessions idle in a transaction longer than {duration(limit)}"
    note = readings.sessions_limited
    return judged(
        "idle_in_transaction", description, findings, "session", note, every_subject=False
    )


def _holding(session: SessionReading) -> str:
    """What an open transaction of ``session`` holds back, in a sentence."""
    if session.holds_horizon is None:
        return "The old row versions it may still read cannot be purged meanwhile, in any table."
    if session.holds_horizon:
        return (
            "It holds back the horizon: VACUUM cannot remove any row deleted or updated "
            "since it began, in any table of this database, so dead rows pile up."
        )
    return "It holds no snapshot now, so it does not hold back VACUUM."


def _who(session: SessionReading) -> str:
    """``session`` in a few words: its user, application, state and statement."""
    parts = [f"user {session.user or '?'}"]
    if session.application:
        parts.append(f"application {session.application}")
    if session.state:
        parts.append(session.state)
    statement = shown_query(session.query)
    if statement:
        parts.append(f"last statement: {statement}")
    return ", ".join(parts)


def shown_query(query: str | None) -> str | None:
    """The first line of ``query``, passwords masked, cut to QUERY_CHARACTERS."""
    lines = [line.strip() for line in (query or "").splitlines() if line.strip()]
    if not lines:
        return None
    line = _SECRET.sub(lambda m: f"{m.group(1)}'***'", lines[0])
    more = len(line) > QUERY_CHARACTERS or len(lines) > 1
    return line[:QUERY_CHARACTERS] + ("..." if more else "")


def _session_finding(
    check: str,
    session: SessionReading,
    value: float,
    threshold: float,
    explanation: str,
    advice: str,
) -> Finding:
    """A session over a check's threshold, with what it is and does."""
    details = {
        "pid": session.pid,
        "user": session.user,
        "application": session.application,
        "state": session.state,
        "transaction_age": session.transaction_age,
        "idle_age": session.idle_age,
        "holds_horizon": session.holds_horizon,
        "query": shown_query(session.query),
    }
    return Finding(
        check=check,
        subject=f"session {session.pid}",
        ok=False,
        value=value,
        threshold=threshold,
        unit="seconds",
        explanation=explanation,
        advice=advice,
        details=details,
    )


def _none_over(check: str, what: str, oldest: float | None, limit: float) -> Finding:
    """The one finding of a check of sessions that found none over its threshold."""
    text = f"no {what} open longer than {duration(limit)}"
    if oldest is not None:
        text += f"; the oldest: {duration(oldest)}"
    return Finding(check, "sessions", True, oldest, limit, "seconds", text + ".")


def replication_slots(readings: Readings, limits: Thresholds) -> CheckResult | None:
    """Each replication slot: is it inactive, or keeping over max_slot_retained_wal?"""
    if readings.slots is None:
        return None
    limit = limits.max_slot_retained_wal
    findings = []
    for slot in readings.slots:
        kept = slot.retained_wal or 0
        ok = slot.active and kept <= limit
        keeps = f"{size(kept)} of WAL"
        if slot.holds_xmin:
            keeps += ", and the row versions its xmin protects (VACUUM cannot remove them)"
        if slot.holds_catalog_xmin:
            keeps += ", and old catalog rows"
        if ok:
            explanation = f"active; keeps {keeps}."
        elif not slot.active:
            explanation = (
                f"Replication slot {slot.name} ({slot.kind}) is inactive: no client reads from "
                f"it, yet the server keeps for it {keeps}, more with every write, until the "
                "client comes back or the disk fills."
            )
        else:
            explanation = (
                f"Replication slot {slot.name} ({slot.kind}) keeps {keeps} (more than "
                f"{size(limit)}): its client reads more slowly than the server writes."
            )
        advice = None
        if not ok:
            advice = (
                "If its client (a standby, a logical subscriber) is gone for good, drop the slot: "
                f"{readings.remedies.drop_slot.format(name=slot.name)}; otherwise bring the "
                "client back, or up to speed, before the disk fills."
            )
        findings.append(
            Finding(
                check="replication_slots",
                subject=f"slot {slot.name}",
                ok=ok,
                value=slot.retained_wal,
                threshold=limit,
                unit="bytes",
                explanation=explanation,
                advice=advice,
                details={
                    "kind": slot.kind,
                    "active": slot.active,
                    "holds_xmin": slot.holds_xmin,
                    "holds_catalog_xmin": slot.holds_catalog_xmin,
                    "database": slot.database,
                },
            )
        )
    description = f"replication slots inactive, or keeping more than {size(limit)} of WAL"
    if not findings:
        none = Finding("replication_slots", "slots", True, None, limit, "bytes", "no slots.")
        return CheckResult("replication_slots", description, (none,), "no slots")
    return judged("replication_slots", description, findings, "slot")


def prepared_transactions(readings: Readings, limits: Thresholds) -> CheckResult | None:
    """The prepared transactions older than max_transaction_age."""
    if readings.prepared is None:
        return None
    limit = limits.max_transaction_age
    findings = []
    for prepared in readings.prepared:
        if prepared.age <= limit:
            continue
        explanation = (
            f"Prepared transaction '{prepared.gid}' (database {prepared.database or '?'}, owner "
            f"{prepared.owner or '?'}) has waited {duration(prepared.age)} to be "
            f"committed or rolled back (more than {duration(limit)}): until then it "
            "keeps its locks and holds back VACUUM like an open transaction, even across "
            "restarts."
        )
        advice = (
            "Have the transaction manager that prepared it finish it; if that is gone, decide "
            f"and run {readings.remedies.finish_prepared.format(name=prepared.gid)}."
        )
        findings.append(
            Finding(
                check="prepared_transactions",
                subject=f"prepared transaction {prepared.gid}",
                ok=False,
                value=prepared.age,
                threshold=limit,
                unit="seconds",
                explanation=explanation,
                advice=advice,
                details={
                    "gid": prepared.gid,
                    "database": prepared.database,
                    "owner": prepared.owner,
                },
            )
        )
    if not findings:
        oldest = max((p.age for p in readings.prepared), default=None)
        findings.append(_none_over("prepared_transactions", "prepared transaction", oldest, limit))
    description = f"prepared transactions older than {duration(limit)}"
    noun = "prepared transaction"
    return judged("prepared_transactions", description, findings, noun, every_subject=False)
