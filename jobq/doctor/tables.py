"""The checks of jobq's tables and indexes: dead rows, vacuums, statistics, bloat."""

from __future__ import annotations

from jobq.dialects.health import Readings, Remedies, TableReading
from jobq.doctor.findings import CheckResult, Finding, Thresholds
from jobq.doctor.wording import duration, judged, size


def dead_tuples(readings: Readings, limits: Thresholds) -> CheckResult | None:
    """Each of jobq's tables: are its dead rows over max_dead_ratio of its rows (and
    min_dead_rows)?"""
    if readings.tables is None:
        return None
    findings = []
    for table in readings.tables:
        total = table.live_rows + table.dead_rows
        ratio = table.dead_rows / total if total else 0.0
        ok = table.dead_rows < limits.min_dead_rows or ratio <= limits.max_dead_ratio
        share = f"{table.dead_rows:,} dead rows, {ratio:.0%} of its {total:,} rows"
        explanation = f"{table.name} holds {share}."
        if not ok:
            explanation = (
                f"{table.name} holds {share} (more than {limits.max_dead_ratio:.0%}): the space "
                "left by updated and deleted rows, which every scan of the table and its "
                "indexes still steps over until VACUUM makes it reusable."
            )
        findings.append(
            Finding(
                check="dead_tuples",
                subject=f"table {table.name}",
                ok=ok,
                value=ratio,
                threshold=limits.max_dead_ratio,
                unit="ratio",
                explanation=explanation,
                advice=None if ok else _vacuum_advice(table, readings.remedies),
                details={
                    "live_rows": table.live_rows,
                    "dead_rows": table.dead_rows,
                    "min_dead_rows": limits.min_dead_rows,
                    "autovacuum": table.autovacuum,
                },
            )
        )
    description = (
        f"dead rows over {limits.max_dead_ratio:.0%} of a table (and {limits.min_dead_rows:,} rows)"
    )
    return judged("dead_tuples", description, findings, "table")


def vacuum_age(readings: Readings, limits: Thresholds) -> CheckResult | None:
    """Each table with min_dead_rows dead rows: was it vacuumed within max_vacuum_age?"""
    if readings.tables is None:
        return None
    findings = []
    for table in readings.tables:
        age, dead = table.vacuum_age, table.dead_rows
        needs_it = dead >= limits.min_dead_rows
        ok = not needs_it or (age is not None and age <= limits.max_vacuum_age)
        last = "never vacuumed" if age is None else f"last vacuumed {duration(age)} ago"
        if not needs_it:
            explanation = f"{dead:,} dead rows, fewer than {limits.min_dead_rows:,}; {last}."
        elif ok:
            explanation = f"{last}; {dead:,} dead rows."
        else:
            over = "" if age is None else f" (more than {duration(limits.max_vacuum_age)})"
            explanation = (
                f"{table.name} holds {dead:,} dead rows and was {last}{over}: until VACUUM "
                "runs, their space is not reused, so the table and its indexes keep growing."
            )
        findings.append(
            Finding(
                check="vacuum_age",
                subject=f"table {table.name}",
                ok=ok,
                value=age,
                threshold=limits.max_vacuum_age,
                unit="seconds",
                explanation=explanation,
                advice=None if ok else _vacuum_advice(table, readings.remedies),
                details={
                    "dead_rows": dead,
                    "min_dead_rows": limits.min_dead_rows,
                    "autovacuum": table.autovacuum,
                },
            )
        )
    description = (
        f"tables with {limits.min_dead_rows:,}+ dead rows not vacuumed for "
        f"{duration(limits.max_vacuum_age)}"
    )
    return judged("vacuum_age", description, findings, "table")


def _vacuum_advice(table: TableReading, remedies: Remedies) -> str:
    """What to do about a table whose dead rows vacuum has not dealt with."""
    name = table.name
    where, how = [], []
    if not table.autovacuum_server:
        where.append("on the server")
        how.append(remedies.autovacuum_server_on)
    if not table.autovacuum_table:
        where.append("for this table")
        how.append(remedies.autovacuum_table_on.format(name=name))
    if where:
        return (
            f"Autovacuum is off {' and '.join(where)}: turn it back on ({'; '.join(how)}), "
            f"or run {remedies.vacuum.format(name=name)} yourself, regularly."
        )
    return (
        "Autovacuum has not kept up. VACUUM cannot remove rows that a transaction still "
        "open may see: look at the checks of long and idle transactions, replication slots "
        f"and prepared transactions. Run {remedies.vacuum.format(name=name)} now; a queue's "
        f"table churns, so have autovacuum visit it sooner: "
        f"{remedies.vacuum_sooner.format(name=name)}."
    )


def never_analyzed(readings: Readings, limits: Thresholds) -> CheckResult | None:
    """Each table of min_analyze_rows or more: was it ever analysed?"""
    if readings.tables is None:
        return None
    findings = []
    least = limits.min_analyze_rows
    for table in readings.tables:
        rows: float | None
        if table.live_rows > 0:
            rows, evidence = table.live_rows, f"the statistics count {table.live_rows:,} live rows"
        elif table.estimated_rows > 0:
            rows = table.estimated_rows
            evidence = f"the planner estimates {table.estimated_rows:,.0f} rows"
        elif table.pages > 0:
            rows, evidence = None, f"it takes {table.pages:,} pages on disk"
        else:
            rows, evidence = 0, ""
        # Rows not counted: every page in use holds one row at least.
        big = (table.pages if rows is None else rows) >= least
        ok = table.analyzed or not evidence or not big
        if table.analyzed:
            explanation = "analysed."
        elif not evidence:
            explanation = "empty: nothing to analyse yet."
        elif ok:
            explanation = (
                f"never analysed, but {evidence}: fewer than {least:,} rows, too few for a "
                "plan to go far wrong."
            )
        else:
            explanation = (
                f"{table.name} has never been analysed, though {evidence}: the planner "
                "knows nothing of what it holds and may plan jobq's statements badly (a scan "
                "of every waiting row where an index walk would do)."
            )
        advice = None
        if not ok:
            advice = f"Run {readings.remedies.analyze.format(name=table.name)}."
            if not table.autovacuum:
                advice += " Autovacuum is off, so nothing else will."
        findings.append(
            Finding(
                check="never_analyzed",
                subject=f"table {table.name}",
                ok=ok,
                value=rows,
                threshold=least,
                unit="rows",
                explanation=explanation,
                advice=advice,
                details={
                    "live_rows": table.live_rows,
                    "estimated_rows": table.estimated_rows,
                    "pages": table.pages,
                    "analyzed": table.analyzed,
                    "min_analyze_rows": least,
                },
            )
        )
    description = f"tables of {least:,}+ rows never analysed"
    return judged("never_analyzed", description, findings, "table")


def index_bloat(readings: Readings, limits: Thresholds) -> CheckResult | None:
    """Each index of min_index_bytes or more: is over max_index_bloat of it empty?"""
    if readings.indexes is None:
        return None
    findings = []
    for index in readings.indexes:
        index_bytes, wasted = index.size_bytes, index.wasted
        big = index_bytes >= limits.min_index_bytes
        ok = wasted is None or not big or wasted <= limits.max_index_bloat
        how = (
            "measured by pgstatindex"
            if index.method == "pgstatindex"
            else "estimated from the planner's statistics; the pgstattuple extension measures it"
        )
        if wasted is None:
            explanation = f"{size(index_bytes)}; not measured: {index.why_unmeasured}."
        elif ok:
            small = "" if big else f", smaller than {size(limits.min_index_bytes)}"
            explanation = f"{size(index_bytes)}, about {wasted:.0%} empty{small}."
        else:
            explanation = (
                f"About {wasted:.0%} of {index.name} ({size(index_bytes)}, on {index.table}) holds "
                f"nothing (more than {limits.max_index_bloat:.0%}; {how}): pages emptied by "
                "deleted rows that the index keeps, and that its scans still read."
            )
        advice = None
        if not ok:
            advice = (
                f"Rebuild it without blocking jobq: "
                f"{readings.remedies.reindex.format(name=index.name)}. It bloats again as fast "
                "as rows are deleted, so also check that vacuum keeps up with its table."
            )
        findings.append(
            Finding(
                check="index_bloat",
                subject=f"index {index.name}",
                ok=ok,
                value=wasted,
                threshold=limits.max_index_bloat,
                unit="ratio",
                explanation=explanation,
                advice=advice,
                details={
                    "table": index.table,
                    "size_bytes": index_bytes,
                    "method": index.method,
                    "min_index_bytes": limits.min_index_bytes,
                },
            )
        )
    description = (
        f"indexes of {size(limits.min_index_bytes)}+ over {limits.max_index_bloat:.0%} empty"
    )
    return judged("index_bloat", description, findings, "index")
