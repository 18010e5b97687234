"""The checks of a database's files and undo: the write-ahead log, free pages, purge lag."""

from __future__ import annotations

from jobq.dialects.health import Readings
from jobq.doctor.findings import CheckResult, Finding, Thresholds
from jobq.doctor.wording import size


def wal_size(readings: Readings, limits: Thresholds) -> CheckResult | None:
    """Is the write-ahead log file over max_wal_bytes?"""
    wal = readings.wal
    if wal is None:
        return None
    limit = limits.max_wal_bytes
    ok = wal.size_bytes <= limit
    explanation = f"{size(wal.size_bytes)}."
    advice = None
    if not ok:
        explanation = (
            f"The write-ahead log {wal.path} is {size(wal.size_bytes)} (more than "
            f"{size(limit)}). A checkpoint copies it into the database and starts it over, "
            "but cannot pass a reader still in a transaction begun before: while one stays, "
            "the log only grows, and every read gets slower."
        )
        advice = (
            "Find the process that keeps a read transaction open (a connection left in a "
            "transaction, a long report); once none does, the next checkpoint starts the log "
            f"over, and {readings.remedies.checkpoint} also shrinks the file."
        )
    finding = Finding(
        "wal_size", f"file {wal.path}", ok, wal.size_bytes, limit, "bytes", explanation, advice
    )
    description = f"a write-ahead log over {size(limit)}"
    return CheckResult("wal_size", description, (finding,), size(wal.size_bytes))


def free_pages(readings: Readings, limits: Thresholds) -> CheckResult | None:
    """Are over max_free_ratio of the database file's pages free (and min_free_bytes)?"""
    space = readings.free_space
    if space is None:
        return None
    ratio = space.free_pages / space.pages if space.pages else 0.0
    free_bytes = space.free_pages * space.page_size
    ok = ratio <= limits.max_free_ratio or free_bytes < limits.min_free_bytes
    share = f"{space.free_pages:,} of its {space.pages:,} pages ({size(free_bytes)}, {ratio:.0%})"
    explanation = f"{share} free."
    advice = None
    if not ok:
        explanation = (
            f"{share} of {space.path} hold nothing (more than {limits.max_free_ratio:.0%}): "
            "space left by deleted rows, reused by later writes but never given back to the "
            "file system."
        )
        advice = (
            f"If the disk space matters, {readings.remedies.reclaim} rewrites the file without "
            "them (it needs as much free disk again, and holds up writers while it runs); "
            "otherwise there is nothing to do: new rows reuse them."
        )
    finding = Finding(
        check="free_pages",
        subject=f"file {space.path}",
        ok=ok,
        value=ratio,
        threshold=limits.max_free_ratio,
        unit="ratio",
        explanation=explanation,
        advice=advice,
        details={
            "free_pages": space.free_pages,
            "pages": space.pages,
            "free_bytes": free_bytes,
            "min_free_bytes": limits.min_free_bytes,
        },
    )
    description = (
        f"free pages over {limits.max_free_ratio:.0%} of the file "
        f"(and {size(limits.min_free_bytes)})"
    )
    return CheckResult("free_pages", description, (finding,), f"{ratio:.0%} free")


def purge_lag(readings: Readings, limits: Thresholds) -> CheckResult | None:
    """Is the history of undo not yet purged over max_purge_lag transactions?"""
    lag = readings.purge_lag
    if lag is None:
        return None
    limit = limits.max_purge_lag
    ok = lag.history_length <= limit
    explanation = f"{lag.history_length:,} transactions not yet purged."
    advice = None
    if not ok:
        explanation = (
            f"The undo of {lag.history_length:,} committed transactions is not yet purged "
            f"(more than {limit:,}; the history list length, from {lag.source}): old row "
            "versions that every read must step over, which also grow the undo space."
        )
        advice = (
            "Purge cannot pass a transaction that is still open: end long transactions (see "
            "that check). If none is long, purge cannot keep up with the writes: "
            f"{readings.remedies.faster_purge}."
        )
    finding = Finding(
        "purge_lag", "server", ok, lag.history_length, limit, "transactions", explanation,
        advice, {"source": lag.source},
    )  # fmt: skip
    description = f"a purge history over {limit:,} transactions"
    return CheckResult("purge_lag", description, (finding,), f"{lag.history_length:,}")
