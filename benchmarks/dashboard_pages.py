#!/usr/bin/env python
"""How long the dashboard takes to render each page on PostgreSQL with a large table.

In a schema of its own (``--pg-schema``, created here and dropped at the end unless
``--keep``) it migrates jobq's tables and fills them with INSERT ... SELECT
generate_series: ``--finished`` finished rows (90% done, 5% failed for good with a
traceback, 5% cancelled; five task names; ``--queues`` queues) whose finished_at spread
evenly over the last 7 days, so that the last hour holds 1/168 of them (about 60,000 of
10M), and ``--waiting`` queued ones; then VACUUM ANALYZE (as autovacuum would have by
then). Three registered workers run a few tasks, two cron schedules and a mutex exist, so
that no page is empty.

It then renders each page in process, through Starlette's TestClient against
``create_app(store)`` (the whole ASGI app: middleware, queries, templates), one warm-up
request and then ``--repeat`` timed ones each, and prints a Markdown table of the median
and the slowest against the 100 ms target, and each page's slowest SQL statement.

The dashboard counts tasks in the background (jobq.observe.counting): the first count of the
finished rows (a scan of the whole table) is let to complete before any page is timed,
and its duration is printed; the app is made with ``finished_interval=3600`` so that the
next one does not run while pages are timed (the active rows are still recounted every
5 s, as they would be).

    .venv/bin/python benchmarks/dashboard_pages.py          # 10M + 100k rows: ~1-2 min to load
    .venv/bin/python benchmarks/dashboard_pages.py --finished 1000000 --keep

The server: ``$JOBQ_BENCH_POSTGRES_URL``, else postgresql+psycopg://root@127.0.0.1:5432/test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sqlalchemy as sa
from sqlalchemy import event

import jobq
from benchmarks.exporter_counts import CHUNK, loaded
from benchmarks.harness import (
    BENCH_POSTGRES_URL,
    TABLE,
    log,
    markdown_table,
)
from jobq import Cron, Mutex, Schedule
from jobq.observe.counting import FINISHED_PART
from jobq.web import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Starlette's note about httpx2
    from starlette.testclient import TestClient

#: Seconds the finished rows' finished_at spread over: a week.
SPAN = 7 * 24 * 3600
TARGET_MS = 100.0
#: How the names of the background counts' threads begin (jobq.observe.counting).
COUNTING_THREADS = "jobq-"
NAMES = (
    "ARRAY['emails.send', 'images.resize', 'reports.build', 'webhooks.deliver', 'billing.charge']"
)
TRACEBACK = (
    'Traceback (most recent call last):\\n  File "/srv/app/tasks.py", line 12, in run\\n'
    '    raise ValueError("bench")\\nValueError: bench'
)

# Finished rows, ids in the order they finished: row g finished (total - g) * span / total
# seconds ago (span: SPAN here; retention_10m.py spreads them over longer). Status by
# g % 20 (18 done, 1 failed for good, 1 cancelled).
FINISHED_ROWS = f"""
INSERT INTO {TABLE} (queue_id, name, args, status, priority, run_at, retries_left, attempt,
                     created_at, started_at, finished_at, error)
SELECT 'q' || ((g / 7) % :queues), ({NAMES})[1 + g % 5], '{{"n": 1}}',
       CASE g % 20 WHEN 0 THEN 'failed' WHEN 1 THEN 'cancelled' ELSE 'done' END,
       0, t - interval '2 seconds', 0, 1, t - interval '2 seconds', t - interval '1 second', t,
       CASE WHEN g % 20 = 0 THEN E'{TRACEBACK}' END
FROM generate_series(:first, :last) AS g,
     LATERAL (SELECT now() - make_interval(secs => (:total - g) * CAST(:span AS float8) / :total)
                     AS t) AS m
"""
# Waiting rows: queued, due a while ago except each tenth, due in an hour.
WAITING_ROWS = f"""
INSERT INTO {TABLE} (queue_id, name, args, status, priority, run_at, retries_left, attempt,
                     created_at)
SELECT 'q' || ((g / 7) % :queues), ({NAMES})[1 + g % 5], '{{"n": 1}}', 'queued', 0,
       CASE WHEN g % 10 = 0 THEN now() + interval '1 hour'
            ELSE now() - make_interval(secs => g % 3600) END,
       3, 0, now() - make_interval(secs => g % 3600)
FROM generate_series(1, :rows) AS g
"""


def fill(store: jobq.Store, finished: int, waiting: int, queues: int, span: float = SPAN) -> float:
    """The rows, loaded and vacuumed, and a few workers, schedules and a lock; seconds.

    The finished rows' finished_at spread evenly over the last ``span`` seconds."""
    started = time.perf_counter()
    for first in range(1, finished + 1, CHUNK):
        last = min(first + CHUNK - 1, finished)
        params = {"queues": queues, "first": first, "last": last, "total": finished, "span": span}
        with store.engine.begin() as conn:
            conn.execute(sa.text(FINISHED_ROWS), params)
        log(f"  {last:,} finished rows ({time.perf_counter() - started:.0f} s)")
    with store.engine.begin() as conn:
        conn.execute(sa.text(WAITING_ROWS), {"queues": queues, "rows": waiting})
    log(f"  {waiting:,} waiting rows; VACUUM ANALYZE")
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f"VACUUM ANALYZE {TABLE}")
    for n in range(3):
        worker = f"bench-worker-{n}:{1000 + n}"
        store.register_worker(worker, host=f"bench-{n}", pid=1000 + n, queues=None, concurrency=8)
        store.capture(4, queues=f"q{n}", worker_id=worker, lease=3600)
    store.sync_schedules([
        Schedule("nightly", Cron("0 3 * * *"), "reports.build", "q0"),
        Schedule("hourly", Cron("5 * * * *"), "emails.send", "q1"),
    ])  # fmt: skip
    Mutex(store, "deploy").acquire()
    return time.perf_counter() - started


@contextmanager
def statements(engine: sa.Engine) -> Iterator[list[tuple[float, str]]]:
    """(seconds, SQL) of every statement a page runs on ``engine`` while inside (not the
    background counts')."""
    seen: list[tuple[float, str]] = []

    def before(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
        conn.info["bench_started"] = time.perf_counter()

    def after(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
        took = time.perf_counter() - conn.info.pop("bench_started")
        if not threading.current_thread().name.startswith(COUNTING_THREADS):
            seen.append((took, sql))

    event.listen(engine, "before_cursor_execute", before)
    event.listen(engine, "after_cursor_execute", after)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", before)
        event.remove(engine, "after_cursor_execute", after)


def pages(store: jobq.Store) -> list[str]:
    """The paths timed: every page, and the list under each filter."""
    with store.engine.connect() as conn:
        failed = conn.exec_driver_sql(
            f"SELECT max(id) FROM {TABLE} WHERE status = 'failed'"
        ).scalar_one()
    return [
        "/", "/tasks", "/tasks?status=failed", "/tasks?status=cancelled", "/tasks?queue=q3",
        "/tasks?name=reports.build", "/tasks?name=webhooks.*", "/tasks?queue=q3&status=failed",
        f"/tasks/{failed}", "/queues", "/cron", "/locks", "/workers",
    ]  # fmt: skip


def measure(store: jobq.Store, repeat: int) -> list[tuple[str, list[float], tuple[float, str]]]:
    app = create_app(store, finished_interval=3600)
    results = []
    with TestClient(app, headers={"accept": "text/html"}) as client:
        started = time.perf_counter()
        assert client.get("/").status_code == 200  # starts the background counts
        while app.state.counts.finished() is None:
            time.sleep(0.05)
        log(f"first finished count done {time.perf_counter() - started:.1f} s after the first page")
        refreshed = time.perf_counter()
        app.state.counts.refresh(FINISHED_PART)
        log(f"a finished count (in this thread): {time.perf_counter() - refreshed:.2f} s")
        for path in pages(store):
            assert client.get(path).status_code == 200, path  # warm-up
            times = []
            with statements(store.engine) as seen:
                for _ in range(repeat):
                    begun = time.perf_counter()
                    response = client.get(path)
                    times.append(time.perf_counter() - begun)
                    assert response.status_code == 200, path
            slowest = max(seen, default=(0.0, ""))
            results.append((path, times, slowest))
            log(f"  {path}: median {statistics.median(times) * 1000:.1f} ms")
    app.state.counts.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres-url", default=BENCH_POSTGRES_URL)
    parser.add_argument("--pg-schema", default="jobq_dashboard_bench")
    parser.add_argument("--finished", type=int, default=10_000_000)
    parser.add_argument("--waiting", type=int, default=100_000)
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--keep", action="store_true", help="Leave the schema and its rows.")
    args = parser.parse_args()
    with loaded(args, fill) as store:
        with store.engine.connect() as conn:
            hour = conn.exec_driver_sql(
                f"SELECT count(*) FROM {TABLE} WHERE finished_at >= now() - interval '1 hour'"
            ).scalar()
        log(f"{hour:,} rows finished in the last hour")
        results = measure(store, args.repeat)
    print(f"\n{args.finished:,} finished + {args.waiting:,} waiting rows, {args.repeat} runs each")
    rows = []
    for path, times, (seconds, sql) in results:
        median, worst = statistics.median(times) * 1000, max(times) * 1000
        ok = "yes" if median <= TARGET_MS else "**no**"
        head = " ".join(sql.split())[:60].replace("|", "\\|")
        statement = f"{seconds * 1000:.1f} ms `{head}…`"
        rows.append((f"`{path}`", f"{median:.1f} ms", f"{worst:.1f} ms", ok, statement))
    header = ("page", "median", "max", f"under {TARGET_MS:.0f} ms", "slowest statement")
    print("\n" + markdown_table(header, "lrrcl", rows))


if __name__ == "__main__":
    main()
