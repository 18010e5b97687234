"""The README's screenshots of the dashboard, taken in headless Chromium:

    .venv/bin/python -m tests.browser.make_screenshots [OUTPUT_DIRECTORY]

A SQLite database in a temporary directory is filled with a day's worth of a small
application's work (five queues, an hour of finished tasks for the chart, a backlog, a
paused queue, three workers with tasks running, a failed report), a real `jobq dashboard`
process serves it, and the overview and a failed task's page are saved as overview.png
and task.png in OUTPUT_DIRECTORY (default: docs/screenshots). Needs the playwright
package and a Chromium ($JOBQ_TEST_CHROMIUM, else `chromium` on PATH).
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

import jobq
from jobq import Cron, Mutex, Schedule, Status
from jobq.dialects.schema import tasks
from tests.browser.conftest import ROOT, chromium_path, start_dashboard

TRACEBACK = """\
Traceback (most recent call last):
  File "/srv/shop/jobq_app.py", line 88, in build_monthly_report
    rows = ledger.fetch(account_id=account_id, month=month)
  File "/srv/shop/ledger.py", line 143, in fetch
    cursor.execute(QUERY, {"account": account_id, "start": start, "end": end})
  File "/srv/shop/.venv/lib/python3.12/site-packages/psycopg/cursor.py", line 97, in execute
    raise ex.with_traceback(None)
psycopg.errors.QueryCanceled: canceling statement due to statement timeout
"""

#: queue: (task name, finished per minute at the busiest, share failed)
QUEUES = {
    "emails": ("emails.send_receipt", 38, 0.004),
    "images": ("images.make_thumbnails", 14, 0.01),
    "reports": ("reports.build_monthly", 3, 0.08),
    "webhooks": ("webhooks.deliver", 22, 0.03),
    "billing": ("billing.charge_subscription", 6, 0.0),
}
#: queue: tasks waiting now
WAITING = {"emails": 46, "images": 12, "reports": 2, "webhooks": 1_340, "billing": 87}
WORKERS = [
    ("shop-worker-1:2231", "shop-worker-1", ["emails", "images", "webhooks"], 8),
    ("shop-worker-2:2245", "shop-worker-2", ["emails", "images", "webhooks"], 8),
    ("shop-reports:918", "shop-reports", ["reports", "billing"], 2),
]


def per_minute(queue: str, minute: int, busiest: int, rng: random.Random) -> int:
    """How many tasks of ``queue`` finished ``minute`` minutes ago: a daily swell, noise."""
    wave = 0.65 + 0.35 * ((minute * 7 + len(queue) * 13) % 60) / 60
    return max(0, round(busiest * wave * rng.uniform(0.75, 1.0)))


def finish(store: jobq.Store, rng: random.Random, now: datetime) -> int:
    """An hour of finished tasks in every queue: their ids' finished_at spread over it."""
    moments: list[dict[str, Any]] = []
    for queue, (name, busiest, failing) in QUEUES.items():
        counts = [per_minute(queue, m, busiest, rng) for m in range(60)]
        if queue == "webhooks":  # a partner's endpoint was down for a while
            for m in range(18, 24):
                counts[m] = counts[m] // 3
        total = sum(counts)
        store.enqueue_many(name, [{"n": n} for n in range(total)], queue=queue, retries=0)
        runs = []
        while len(runs) < total:
            runs += store.capture(500, queues=queue, worker_id=WORKERS[0][0])
        runs.sort(key=lambda run: run.id)
        i = 0
        for minute, n in enumerate(counts):
            for _ in range(n):
                run = runs[i]
                i += 1
                failed = rng.random() < failing or (queue == "webhooks" and 18 <= minute < 24
                                                     and rng.random() < 0.4)  # fmt: skip
                if failed:
                    store.set_status(run.id, run.attempt, Status.FAILED, error="HTTP 502")
                else:
                    store.set_status(run.id, run.attempt, Status.DONE, result={"ok": True})
                ended = now - timedelta(minutes=minute, seconds=rng.uniform(0.5, 59.5))
                took = timedelta(seconds=rng.uniform(0.05, 4.0))
                moments.append({"i": run.id, "f": ended, "s": ended - took, "c": ended - 2 * took})
    update = (
        sa.update(tasks)
        .where(tasks.c.id == sa.bindparam("i"))
        .values(finished_at=sa.bindparam("f"), started_at=sa.bindparam("s"),
                created_at=sa.bindparam("c"), run_at=sa.bindparam("c"))
    )  # fmt: skip
    with store.engine.begin() as conn:
        conn.execute(update, moments)
    return len(moments)


def populate(store: jobq.Store) -> int:
    """The workload; returns the failed report's id."""
    rng = random.Random(20261125)
    now = datetime.now(UTC)
    for worker_id, host, queues, concurrency in WORKERS:
        store.register_worker(worker_id, host=host, pid=int(worker_id.rsplit(":", 1)[1]),
                              queues=queues, concurrency=concurrency)  # fmt: skip
    finish(store, rng, now)
    failed_id = store.enqueue(
        "reports.build_monthly", {"account_id": 4711, "month": "2026-10", "format": "pdf"},
        queue="reports", retries=2,
    )  # fmt: skip
    for _ in range(3):
        [run] = store.capture(1, queues="reports", worker_id=WORKERS[2][0])
        assert run.id == failed_id
        store.set_status(run.id, run.attempt, Status.FAILED, error=TRACEBACK, retry_delay=0)
    for queue, n in WAITING.items():
        name = QUEUES[queue][0]
        store.enqueue_many(name, [{"n": k} for k in range(n)], queue=queue)
    # Running now: on each worker, some of its queues' tasks.
    running = {"shop-worker-1:2231": ("emails", 5), "shop-worker-2:2245": ("webhooks", 7),
               "shop-reports:918": ("reports", 1)}  # fmt: skip
    for worker_id, (queue, n) in running.items():
        store.capture(n, queues=queue, worker_id=worker_id, lease=600)
    # A few retrying, and the backlog's oldest waiting for a while.
    for _ in range(3):
        [run] = store.capture(1, queues="webhooks", worker_id=WORKERS[1][0])
        store.set_status(run.id, run.attempt, Status.FAILED, error="HTTP 503", retry_delay=120)
    with store.engine.begin() as conn:
        conn.execute(
            sa.update(tasks)
            .where(tasks.c.queue_id == "webhooks", tasks.c.status == "queued")
            .values(run_at=now - timedelta(minutes=4, seconds=12))
        )
    assert store.pause_queue("billing")
    store.sync_schedules([
        Schedule("nightly-invoices", Cron("0 2 * * *"), "billing.send_invoices", "billing"),
        Schedule("hourly-cleanup", Cron("5 * * * *"), "maintenance.cleanup", "reports"),
    ])  # fmt: skip
    assert Mutex(store, "deploy:shop").acquire()
    return failed_id


def main(argv: list[str]) -> None:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=60_000)

    output = Path(argv[0]) if argv else ROOT / "docs" / "screenshots"
    output.mkdir(parents=True, exist_ok=True)
    executable = chromium_path()
    if executable is None:
        raise SystemExit("no Chromium: apt-get install chromium, or set JOBQ_TEST_CHROMIUM")
    with tempfile.TemporaryDirectory(prefix="jobq-") as directory:
        url = f"sqlite:///{directory}/shop.db"
        store = jobq.Store(url)
        store.migrate()
        failed_id = populate(store)
        store.dispose()
        served = start_dashboard(url, Path(directory))
        try:
            args = ["--no-sandbox"] if os.geteuid() == 0 else []
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=executable, headless=True, args=args
                )
                page = browser.new_page(viewport={"width": 1360, "height": 900})
                page.set_default_timeout(60_000)
                page.goto(served.url + "/")
                # Once the finished rows are counted (in the background), the table has them.
                expect(page.locator("#counted")).to_contain_text("finished counts as of")
                page.screenshot(path=str(output / "overview.png"), full_page=True)
                page.goto(f"{served.url}/tasks/{failed_id}")
                page.wait_for_selector("#error")
                page.screenshot(path=str(output / "task.png"), full_page=True)
                browser.close()
        finally:
            served.stop()
    print(f"wrote {output / 'overview.png'} and {output / 'task.png'}")


if __name__ == "__main__":
    main(sys.argv[1:])
