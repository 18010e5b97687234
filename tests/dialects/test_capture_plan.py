"""Capture walks a partial index in its own order and stops at its LIMIT.

It must neither read the finished rows (the table may hold millions) nor sort the whole
backlog of queued rows, whichever queues it is asked for; and it must stay so once
psycopg prepares the statement and PostgreSQL plans it generically.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy import event

import jobq
from jobq.db.tasks import Completion, Status
from jobq.dialects.schema import WAITING, tasks

FINISHED = 30_000
BACKLOG = 20_000
QUEUE_CHOICES = {"all queues": None, "one queue": ["default"], "two queues": ["default", "q"]}

# The planner's statistics of a fresh table (keep_unanalysed): never a reused one.
pytestmark = pytest.mark.fresh_database


def fill(store: jobq.Store) -> None:
    """Many finished rows, a large backlog in 'default', a few tasks in 'q'."""
    store.enqueue_many("old", [{"i": i} for i in range(FINISHED)])
    with store.engine.begin() as conn:
        conn.execute(
            sa.update(tasks).values(status="done", finished_at=store.dialect.now(), attempt=1)
        )
    store.enqueue_many("backlog", [{"i": i} for i in range(BACKLOG)])
    store.enqueue_many("new", [{"i": i} for i in range(50)], queue="q")
    with store.engine.begin() as conn:
        mysql = conn.dialect.name in ("mysql", "mariadb")
        conn.exec_driver_sql("ANALYZE TABLE jobq_tasks" if mysql else "ANALYZE")


def sent_sql(store: jobq.Store, call: Callable[[], Any]) -> tuple[str, Any]:
    """The statement and parameters ``call`` sends about jobq_tasks; it is aborted there,
    and nothing is written."""
    seen: list[tuple[str, Any]] = []

    class Seen(Exception):
        pass

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        first = statement.lstrip().upper().startswith(("WITH", "UPDATE"))
        if "jobq_tasks" in statement and (first or "FOR UPDATE SKIP LOCKED" in statement):
            seen.append((statement, parameters))
            raise Seen  # abort: nothing is written

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        with pytest.raises(Seen):
            call()
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    assert len(seen) == 1, seen
    return seen[0]


def captured_sql(store: jobq.Store, queues: list[str] | None) -> tuple[str, Any]:
    """The statement and parameters the Store sends for one capture (which is rolled back);
    where capture takes steps (MySQL), the first: the SELECT ... FOR UPDATE SKIP LOCKED."""
    return sent_sql(store, lambda: store.capture(10, queues=queues, worker_id="explain", lease=30))


def sqlite_plan(store: jobq.Store, statement: str, parameters: Any) -> str:
    with store.engine.connect() as conn:
        plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).all()
    return "\n".join(str(row[-1]) for row in plan)


def sqlite_branch(store: jobq.Store, statement: str, parameters: Any, name: str) -> str:
    """The lines of SQLite's plan under CO-ROUTINE ``name`` (a member of capture's UNION)."""
    with store.engine.connect() as conn:
        rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).all()
    (top,) = [row[0] for row in rows if row[-1] == f"CO-ROUTINE {name}"]
    under, lines = {top}, []
    for node, parent, _, detail in rows:
        if parent in under:
            under.add(node)
            lines.append(detail)
    return "\n".join(lines)


def postgres_branch(plan: str, name: str) -> str:
    """The lines of a PostgreSQL plan under ``CTE name`` (a member of capture's UNION)."""
    lines = plan.splitlines()
    (start,) = [i for i, line in enumerate(lines) if line.strip() == f"CTE {name}"]
    indent = len(lines[start]) - len(lines[start].lstrip())
    branch = []
    for line in lines[start + 1 :]:
        if len(line) - len(line.lstrip()) <= indent:
            break
        branch.append(line)
    return "\n".join(branch)


def mysql_plan(store: jobq.Store, statement: str, parameters: Any) -> list[dict[str, Any]]:
    with store.engine.connect() as conn:
        return [
            dict(row._mapping) for row in conn.exec_driver_sql("EXPLAIN " + statement, parameters)
        ]


def postgres_plans(store: jobq.Store, statement: str, parameters: Any) -> list[str]:
    """The custom plan, and the generic plan a prepared statement gets."""
    url = store.engine.url.set(drivername="postgresql")
    conninfo = url.render_as_string(hide_password=False)
    with psycopg.connect(conninfo, cursor_factory=psycopg.ClientCursor) as conn:
        custom = "\n".join(r[0] for r in conn.execute("EXPLAIN " + statement, parameters))
        names = list(parameters)
        positional = re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m.group(1)) + 1}", statement)
        conn.execute("PREPARE jobq_capture AS " + positional)
        conn.execute("SET plan_cache_mode = force_generic_plan")
        placeholders = ", ".join(["%s"] * len(names))
        generic = "\n".join(
            r[0]
            for r in conn.execute(
                f"EXPLAIN EXECUTE jobq_capture({placeholders})", [parameters[n] for n in names]
            )
        )
        conn.rollback()
    return [custom, generic]


@pytest.mark.slow
def test_capture_walks_a_partial_index_in_order(store: jobq.Store, backend: str) -> None:
    fill(store)
    for label, queues in QUEUE_CHOICES.items():
        if backend != "sqlite":
            assert_walks_capture_index(store, backend, label)
            continue
        # With statistics (fill analyses), SQLite sorts no waiting row at all: only the
        # expired runs (read from their own index) and the merge of the two short lists.
        statement, parameters = captured_sql(store, queues)
        plan = sqlite_plan(store, statement, parameters)
        waiting = sqlite_branch(store, statement, parameters, "waiting")
        assert "USING INDEX jobq_tasks_capture" in waiting, (label, plan)
        assert "TEMP B-TREE FOR ORDER BY" not in waiting, (label, plan)
        expired = sqlite_branch(store, statement, parameters, "expired")
        assert "USING INDEX jobq_tasks_lease_expiry" in expired, (label, plan)
        assert "SCAN jobq_tasks" not in plan, (label, plan)


@pytest.mark.slow
def test_recording_ends_looks_each_row_up_by_primary_key(store: jobq.Store, backend: str) -> None:
    """set_statuses reads its batch of ends once and finds each row by its id, whatever
    the table holds; it must not read every end for each row (on SQLite that cost 75 us a
    task at 100 ends a batch), nor scan the table."""
    fill(store)
    captured = store.capture(100, worker_id="explain")
    ends = [Completion(task.id, task.attempt, Status.DONE) for task in captured]
    statement, parameters = sent_sql(store, lambda: store.set_statuses(ends))
    if backend == "sqlite":
        plan = sqlite_plan(store, statement, parameters).splitlines()
        scans = [line for line in plan if "SCAN" in line or "SEARCH" in line]
        # The ends (json_each, a virtual table) are the outer loop, read once.
        assert "VIRTUAL TABLE" in scans[0], plan
        assert sum("VIRTUAL TABLE" in line for line in scans) == 1, plan
        assert scans[1:] == ["SEARCH jobq_tasks USING INTEGER PRIMARY KEY (rowid=?)"], plan
    elif backend == "mysql":
        steps = mysql_plan(store, statement, parameters)
        (row,) = [step for step in steps if step["table"] == "jobq_tasks"]
        assert row["key"] == "PRIMARY" and row["type"] in ("eq_ref", "const"), steps
    else:
        # By primary key, or (while statistics say few tasks run) through the index of the
        # running tasks' leases: never a scan of the table.
        for plan in postgres_plans(store, statement, parameters):
            index = re.search(
                r"Index Scan using jobq_tasks_(pkey|lease_expiry) on jobq_tasks", plan
            )
            assert index and "Seq Scan on jobq_tasks" not in plan, plan
    store.set_statuses(ends)


#: Tasks bulk-loaded, as `jobq enqueue --file` loads them, into a table nobody analyses.
#: Before jobq refreshed the statistics after such loads, PostgreSQL planned capture from
#: all queues (and from two) as a bitmap scan of every waiting row and a sort after loads
#: of 500 to 2,000 tasks, of 12,500 and of 20,000, though not of 5,000 to 11,000 (found by
#: trying; its choice turns on the table's and the indexes' page counts). 12,500 is the
#: smallest of those at or above the 10,000 tasks after which jobq refreshes the
#: statistics (PostgresDialect.bulk_load_rows).
BULK = 12_500
#: Tasks per enqueue_many call, as `jobq enqueue --file` sends its lines.
FILE_CHUNK = 5000


def keep_unanalysed(store: jobq.Store, backend: str) -> None:
    """Keep the database from analysing jobq_tasks by itself, whatever the server's settings."""
    with store.engine.begin() as conn:
        if backend == "postgresql":
            conn.exec_driver_sql(
                "ALTER TABLE jobq_tasks SET (autovacuum_enabled = false,"
                " toast.autovacuum_enabled = false)"
            )
        elif backend == "mysql":
            # InnoDB would recompute its persistent statistics once a tenth of the rows
            # changed (innodb_stats_auto_recalc): they stay those of the empty table.
            conn.exec_driver_sql("ALTER TABLE jobq_tasks STATS_AUTO_RECALC = 0")


def assert_walks_capture_index(store: jobq.Store, backend: str, label: str) -> None:
    """The Store's capture statement reads a capture index in its order, up to its LIMIT."""
    statement, parameters = captured_sql(store, QUEUE_CHOICES[label])
    if backend == "sqlite":
        plan = sqlite_plan(store, statement, parameters)
        # A SCAN of the partial index itself (no sqlite_stat1 says where the due rows end)
        # walks the waiting rows in order, as a SEARCH in it does.
        waiting = sqlite_branch(store, statement, parameters, "waiting")
        walk = re.search(r"(SCAN|SEARCH) jobq_tasks USING INDEX jobq_tasks_capture", waiting)
        table_scan = re.search(r"SCAN jobq_tasks(?! USING INDEX jobq_tasks_capture)", plan)
        assert walk and not table_scan, (label, plan)
        # Without statistics SQLite reads each queue named from jobq_tasks_capture, in order,
        # into a sorter that keeps LIMIT rows and leaves a queue at its first row that would
        # not make it: 0.3 ms a capture from two queues of 200,000 tasks each. Any other sort
        # would read every due row.
        per_queue = "SEARCH jobq_tasks USING INDEX jobq_tasks_capture (queue_id=?)" in waiting
        assert per_queue or "TEMP B-TREE FOR ORDER BY" not in waiting, (label, plan)
        return
    if backend == "mysql":
        steps = mysql_plan(store, statement, parameters)
        # The first member of the UNION: the emulated partial index of the waiting rows,
        # read in its order (no sort) up to the LIMIT. The second reads the expired runs
        # from theirs, and the few rows of the two are sorted together.
        waiting, expired = [step for step in steps if step["table"] == "jobq_tasks"]
        assert waiting["key"].startswith("jobq_tasks_capture"), (label, steps)
        assert "filesort" not in (waiting["Extra"] or ""), (label, steps)
        assert expired["key"] == "jobq_tasks_lease_expiry", (label, steps)
        assert all(step["type"] != "ALL" for step in steps if step["table"] != "<derived2>"), (
            label,
            steps,
        )
        return
    for plan in postgres_plans(store, statement, parameters):
        waiting = postgres_branch(plan, "waiting")
        assert "Index Scan using jobq_tasks_capture" in waiting, (label, plan)
        assert "Bitmap Index Scan on jobq_tasks_capture" not in plan, (label, plan)
        assert "Seq Scan on jobq_tasks" not in plan, (label, plan)
        assert not re.search(r"->\s+Sort\b", waiting), (label, plan)
        assert "Index Scan using jobq_tasks_lease_expiry" in postgres_branch(plan, "expired")


#: Runs in flight when the capture below is explained: 16 workers of 32 slots hold 512.
RUNNING = 512


def test_capture_steps_over_no_running_row(store: jobq.Store, backend: str) -> None:
    """The capture indexes hold the waiting rows only: a capture reads as many index
    entries as it takes, however many runs are in flight (before revision 0014 it read
    every one of them first, and throughput fell as workers were added)."""
    store.enqueue_many("t", [{"i": i} for i in range(RUNNING + 50)])
    assert len(store.capture(RUNNING, worker_id="busy")) == RUNNING
    with store.engine.begin() as conn:
        mysql = conn.dialect.name in ("mysql", "mariadb")
        conn.exec_driver_sql("ANALYZE TABLE jobq_tasks" if mysql else "ANALYZE")
    for label, queues in QUEUE_CHOICES.items():
        statement, parameters = captured_sql(store, queues)
        if backend == "sqlite":
            # SQLite counts no rows in its plans; its partial index is the proof.
            with store.engine.connect() as conn:
                where = WAITING.compile(conn, compile_kwargs={"literal_binds": True})
                indexed = conn.exec_driver_sql(
                    "SELECT count(*) FROM jobq_tasks INDEXED BY jobq_tasks_capture_any_queue"
                    f" WHERE {where}"
                ).scalar()
            assert indexed == 50, label
            continue
        with store.engine.connect() as conn:
            if backend == "mysql":
                # MariaDB's ANALYZE runs the statement (a SELECT ... FOR UPDATE here) and
                # counts the rows each step read (r_rows).
                found = conn.exec_driver_sql(
                    "ANALYZE FORMAT=JSON " + statement, parameters
                ).scalar()
                read = [float(n) for n in re.findall(r'"r_rows":\s*([0-9.]+)', found)]
            else:
                found = "\n".join(
                    row[0]
                    for row in conn.exec_driver_sql(
                        "EXPLAIN (ANALYZE, COSTS OFF) " + statement, parameters
                    )
                )
                waiting = postgres_branch(found, "waiting")
                read = [float(n) for n in re.findall(r"Rows Removed by Filter: (\d+)", waiting)]
                read += [float(n) for n in re.findall(r"actual .*rows=(\d+)", waiting)]
            conn.rollback()
        assert read and max(read) <= 10, (label, found)


@pytest.mark.parametrize("load", ["one transaction", "one call", "calls of 1,000"])
def test_capture_walks_the_index_right_after_a_bulk_load(
    store: jobq.Store, backend: str, load: str
) -> None:
    """A bulk load into a table nobody analyses, neither by hand nor by autovacuum: capture
    still walks its index in order, rather than read every waiting row and sort them."""
    keep_unanalysed(store, backend)
    rows = [{"i": i} for i in range(BULK)]
    if load == "one transaction":  # as `jobq enqueue --file`
        with store.engine.begin() as conn:
            for first in range(0, BULK, FILE_CHUNK):
                store.enqueue_many("bulk", rows[first : first + FILE_CHUNK], connection=conn)
    elif load == "one call":
        store.enqueue_many("bulk", rows)
    else:  # each call committed on its own
        for first in range(0, BULK, 1000):
            store.enqueue_many("bulk", rows[first : first + 1000])
    for label in QUEUE_CHOICES:
        assert_walks_capture_index(store, backend, label)


def test_a_failed_statistics_refresh_loses_no_task(
    store: jobq.Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The refresh after a bulk load only helps the planner: should the database refuse it,
    the tasks are enqueued all the same, and the caller's transaction goes on."""

    def refuse(conn: sa.Connection) -> None:
        conn.exec_driver_sql("this is not SQL")

    monkeypatch.setattr(store.dialect, "bulk_load_rows", 10)
    monkeypatch.setattr(store.dialect, "refresh_statistics", refuse)
    assert len(store.enqueue_many("alone", [{"i": i} for i in range(10)])) == 10
    with store.engine.begin() as conn:
        store.enqueue_many("caller", [{"i": i} for i in range(10)], connection=conn)
        store.enqueue("caller", {"i": 10}, connection=conn)  # still usable after the refusal
    counts = store.counts()
    assert sum(counts.values()) == 21, counts
    refusals = [r for r in caplog.records if "could not refresh the statistics" in r.message]
    assert len(refusals) == 2, caplog.records


def test_prepared_unique_enqueue_keeps_working(store: jobq.Store) -> None:
    """Past psycopg's prepare threshold the ON CONFLICT arbiter must still be found."""
    first = store.enqueue("t", {}, unique_key="same")
    for _ in range(12):
        assert store.enqueue("t", {}, unique_key="same") == first
    for i in range(12):
        store.enqueue("t", {}, unique_key=f"k{i}")
        assert len(store.capture(1, worker_id="w")) == 1


def test_jobqs_own_postgresql_connections_use_generic_plans_in_utc(
    store: jobq.Store, backend: str
) -> None:
    """A generic plan is made once per prepared statement: without it PostgreSQL planned
    every worker turn anew. An engine the application passes in keeps its own setting."""
    if backend != "postgresql":
        pytest.skip("plan_cache_mode is PostgreSQL's")
    own = jobq.Store(store.engine.url)
    given = jobq.Store(sa.create_engine(store.engine.url))
    try:
        for each, expected in ((own, "force_generic_plan"), (given, "auto")):
            with each.engine.connect() as conn:
                assert conn.exec_driver_sql("SHOW plan_cache_mode").scalar() == expected
        # Its own sessions are in UTC by name: psycopg then gives datetime.UTC itself.
        task = own.get(own.enqueue("t", {}))
        assert task is not None and task.created_at.tzinfo is UTC
        with own.engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW TimeZone").scalar() == "UTC"
            # Generic plans are costed high: JIT would compile every capture.
            assert conn.exec_driver_sql("SHOW jit").scalar() == "off"
    finally:
        own.dispose()
        given.dispose()
