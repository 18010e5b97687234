"""The dashboard in a real Chromium with what operators met: a task whose argument is
tens of megabytes, a workflow, the task list's error column and bulk actions, and a
database name longer than the header's room."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jobq
from jobq import Status
from tests.browser.conftest import TRACEBACK, Dashboard, failed_task
from tests.helpers import set_columns

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails, when required) every test
    expect = None

#: A page's bytes at most, whatever the rows hold.
MOST_BYTES = 1_000_000


def huge_size(backend: str) -> int:
    """The argument's size: 50 MB, or on MySQL / MariaDB under its default 16 MB packet
    (max_allowed_packet), the most one statement of it takes."""
    return 15_000_000 if backend == "mysql" else 50_000_000


def test_a_task_with_a_huge_argument_opens_at_once(
    page: Any, store: jobq.Store, dashboard: Dashboard, screenshots: Path, backend: str
) -> None:
    """Its page is under 1 MB and rendered within Playwright's wait (the whole argument
    made 50 MB of HTML Chromium had not rendered in 90 s); the whole is a download."""
    size = huge_size(backend)
    task_id = store.enqueue("imports.load", {"rows": "r" * size, "source": "s3://bucket/x"})
    answer = page.goto(f"{dashboard.url}/tasks/{task_id}")
    assert answer is not None and answer.ok
    assert len(answer.body()) < MOST_BYTES
    expect(page.locator("#args-cut")).to_contain_text(f"of {size / 1e6:.1f} MB")
    expect(page.locator("#args")).to_be_visible()
    shoot_to = screenshots / f"{backend}-task-huge-argument.png"
    page.screenshot(path=str(shoot_to), full_page=True)
    with page.expect_download() as download:
        page.click("#args-cut a")
    saved = download.value
    assert saved.suggested_filename == f"task-{task_id}-args.json"
    path = saved.path()
    assert path is not None and Path(path).stat().st_size >= size


def test_the_workflow_page(
    page: Any, app: jobq.App, dashboard: Dashboard, screenshots: Path, backend: str
) -> None:
    """From a node's page to its workflow's page: each node, its status and parents."""

    @app.task(name="reports.fetch")
    def fetch(month: str) -> int:
        return 1

    @app.task(name="reports.merge")
    def merge() -> int:
        return 2

    handle = jobq.chord(
        jobq.group(fetch.s(month="2026-09"), fetch.s(month="2026-10")), merge.s()
    ).enqueue()
    first, second, callback = (t.id for t in handle.tasks)
    store = app.store
    for task_id, ok in ((first, True), (second, False)):
        set_columns(store, task_id, queue_id=f"staging-{task_id}", retries_left=0)
        [run] = store.capture(1, queues=f"staging-{task_id}", worker_id="worker-a")
        status, outcome = (
            (Status.DONE, {"result": 1}) if ok else (Status.FAILED, {"error": TRACEBACK})
        )
        assert store.set_status(run.id, run.attempt, status, **outcome)
    page.goto(f"{dashboard.url}/tasks/{callback}")
    expect(
        page.locator(f'#parents li[data-task-id="{first}"] [data-status="done"]')
    ).to_be_visible()
    page.click("#workflow-link")
    expect(page).to_have_url(f"{dashboard.url}/workflows/{handle.id}")
    rows = page.locator("#workflow-table tbody tr")
    expect(rows).to_have_count(3)
    expect(page.locator(f'tr[data-task-id="{callback}"]')).to_have_attribute(
        "data-status", "cancelled"
    )
    expect(page.locator(f'tr[data-task-id="{callback}"] [data-parent="{second}"]')).to_be_visible()
    expect(page.locator(f'tr[data-task-id="{second}"] .error-cell')).to_contain_text(
        "ValueError: no data for account 4711"
    )
    page.screenshot(path=str(screenshots / f"{backend}-workflow.png"), full_page=True)


def test_the_error_column_and_bulk_retry(
    page: Any, store: jobq.Store, dashboard: Dashboard, screenshots: Path, backend: str
) -> None:
    """The list shows each error's last line; two ticked failed tasks are retried by one
    click, and the database says so."""
    failed = [failed_task(store, worker=f"worker-{n}") for n in range(2)]
    store.enqueue("emails.send", {"to": "ada@example.com"}, queue="mail")
    page.goto(f"{dashboard.url}/tasks")
    for task_id in failed:
        row = page.locator(f'#task-table tr[data-task-id="{task_id}"]')
        expect(row.locator(".error-cell")).to_have_text(
            "ValueError: no data for account 4711 in 2026-10"
        )
    page.screenshot(path=str(screenshots / f"{backend}-task-list.png"), full_page=True)
    for task_id in failed:
        page.check(f'#task-table tr[data-task-id="{task_id}"] input[type=checkbox]')
    page.click("#bulk-retry")
    expect(page.locator(".flash-ok")).to_have_text("2 tasks retried.")
    for task_id in failed:
        task = store.get(task_id)
        assert task is not None and task.status is Status.QUEUED


def test_the_database_name_is_never_cut(page: Any, store: jobq.Store, dashboard: Dashboard) -> None:
    """However long the database's name, the header shows all of it (it wraps)."""
    page.set_viewport_size({"width": 900, "height": 700})
    page.goto(f"{dashboard.url}/tasks")
    name = page.locator("header .database")
    expect(name).to_be_visible()
    text = name.inner_text()
    assert len(text) > 40, text  # longer than the old header's 22rem showed
    width, scrolled = name.evaluate("e => [e.clientWidth, e.scrollWidth]")
    assert scrolled <= width, (scrolled, width)
    box = name.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 900
