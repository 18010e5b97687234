"""The dashboard in a real browser: a `jobq dashboard` process serving a real database
(SQLite, PostgreSQL, MySQL / MariaDB), driven by headless Chromium as an operator would:
pages, filters, the retry and pause buttons (with their confirm() dialogs), the
refreshing script, and markup from the database shown as text, never run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import jobq
from jobq import Cron, Mutex, Schedule, Status
from jobq.db.tasks import as_utc
from jobq.dialects.schema import tasks
from tests import shared_database
from tests.apps.limited import RUNS
from tests.browser.conftest import TRACEBACK, Dashboard, done_task, failed_task, start_dashboard
from tests.worker_processes import Workers

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails, when required) every test
    expect = None

TOKEN = "browser-token-7f3a"

# One database per backend for the module, every jobq row deleted before each test.
backend, shared_url, db_url = shared_database.FIXTURES


@pytest.fixture(scope="module")
def shared_dashboard(
    shared_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Dashboard]:
    """One dashboard of the module's database per backend, for the tests of tasks' pages
    and lists, which read the database at each request. Not for the overview's or the
    queues page's counts: a dashboard keeps those up to 5 s (finished ones 60 s), so their
    tests take a dashboard of their own (``dashboard``), started on the test's rows."""
    started = start_dashboard(shared_url, tmp_path_factory.mktemp("dashboard"))
    yield started
    started.stop()


def accept_next_dialog(page: Any) -> list[str]:
    """Answer the next confirm() with OK; its question lands in the list returned."""
    questions: list[str] = []

    def answer(dialog: Any) -> None:
        questions.append(dialog.message)
        dialog.accept()

    page.once("dialog", answer)
    return questions


def shoot(page: Any, directory: Path, name: str) -> None:
    """A full-page PNG of ``page`` as ``name``.png."""
    page.screenshot(path=str(directory / f"{name}.png"), full_page=True)


def some_of_everything(store: jobq.Store) -> dict[str, int]:
    """Tasks in several queues and states, a schedule, a lock and a live worker."""
    store.register_worker("worker-a", host="host-a", pid=4242, queues=None, concurrency=4)
    ids = {
        "queued": store.enqueue("emails.send", {"to": "ada@example.com"}, queue="mail"),
        "failed": failed_task(store),
        "done": done_task(store, "mail", "emails.send"),
    }
    for n in range(3):
        store.enqueue("images.resize", {"image": n}, queue="images")
    store.sync_schedules([Schedule("nightly-cleanup", Cron("0 3 * * *"), "cleanup", "maintenance")])
    assert Mutex(store, "deploy").acquire()
    return ids


PAGES = [
    ("/", "Overview", "#queue-overview"),
    ("/tasks", "Tasks", "#task-table"),
    ("/queues", "Queues", "#queue-table"),
    ("/cron", "Cron schedules", "#cron-table"),
    ("/locks", "Locks", "#lock-table"),
    ("/workers", "Workers", "#worker-table"),
]


def test_every_page_opens(
    page: Any, store: jobq.Store, dashboard: Dashboard, screenshots: Path, backend: str
) -> None:
    """Each page of the navigation opens from the one before, with its table, and a
    screenshot of it is kept; the failed task's page shows its traceback."""
    ids = some_of_everything(store)
    page.goto(dashboard.url + "/")
    for path, heading, table in PAGES:
        if path != "/":
            page.click(f'#nav a[href="{path}"]')
        expect(page).to_have_url(dashboard.url + path)
        expect(page.locator("main h1")).to_have_text(heading)
        expect(page.locator(table)).to_be_visible()
        expect(page.locator(f'#nav a[href="{path}"]')).to_have_class("active")
        shoot(page, screenshots, f"{backend}-{path.strip('/') or 'overview'}")
    page.goto(f"{dashboard.url}/tasks/{ids['failed']}")
    expect(page.locator("#error")).to_contain_text("ValueError: no data for account 4711")
    shoot(page, screenshots, f"{backend}-task-failed")


def test_overview_shows_the_counts(page: Any, store: jobq.Store, dashboard: Dashboard) -> None:
    """The overview's cards and queue rows show the database's tasks, and the chart
    has bars for the last hour's finished ones."""
    some_of_everything(store)
    page.goto(dashboard.url + "/")
    expect(page.locator("#total-queued")).to_have_text("4")  # 1 mail + 3 images
    images = page.locator('#queue-overview tr[data-queue="images"] td')
    expect(images.nth(1)).to_have_text("3")
    expect(page.locator("#throughput rect.done")).to_have_count(1)
    expect(page.locator("#throughput rect.failed")).to_have_count(1)
    expect(page.locator('#worker-overview tr[data-worker="worker-a"]')).to_be_visible()


def test_filter_tasks(page: Any, store: jobq.Store, shared_dashboard: Dashboard) -> None:
    """The filter form narrows the list by queue, status and name prefix, and its id
    field goes to that task's page."""
    ids = some_of_everything(store)
    page.goto(shared_dashboard.url + "/tasks")
    rows = page.locator("#task-table tbody tr")
    expect(rows).to_have_count(7)  # and the schedule's row

    form = page.locator("form#task-filter")
    form.locator("input[name=queue]").fill("images")
    form.locator("button[type=submit]").click()
    expect(page).to_have_url(f"{shared_dashboard.url}/tasks?queue=images&status=&name=&id=")
    expect(rows).to_have_count(3)
    for text in rows.locator("td:nth-child(3)").all_inner_texts():
        assert text == "images"

    form.locator("input[name=queue]").fill("")
    form.locator("select[name=status]").select_option("failed")
    form.locator("button[type=submit]").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-task-id", str(ids["failed"]))

    form.locator("select[name=status]").select_option("")
    form.locator("input[name=name]").fill("emails.*")
    form.locator("button[type=submit]").click()
    expect(rows).to_have_count(2)
    page.click("#clear-filters")
    expect(rows).to_have_count(7)  # and the schedule's row

    form.locator("input[name=id]").fill(str(ids["queued"]))
    form.locator("button[type=submit]").click()
    expect(page).to_have_url(f"{shared_dashboard.url}/tasks/{ids['queued']}")
    expect(page.locator("#task")).to_have_attribute("data-status", "queued")


def test_retry_a_failed_task(page: Any, store: jobq.Store, shared_dashboard: Dashboard) -> None:
    """From the list to a failed task's page, whose traceback is shown; Retry queues it
    again, in the database."""
    failed = failed_task(store)
    page.goto(shared_dashboard.url + "/tasks?status=failed")
    page.click(f'#task-table tr[data-task-id="{failed}"] a[href$="/tasks/{failed}"]')
    expect(page.locator("#task")).to_have_attribute("data-status", "failed")
    expect(page.locator("#error")).to_have_text(TRACEBACK)
    page.locator('form[action$="/retry"] button').click()
    expect(page.locator(".flash-ok")).to_have_text(f"Task {failed} is queued again.")
    expect(page.locator("#task")).to_have_attribute("data-status", "queued")
    task = store.get(failed)
    assert task is not None and task.status is Status.QUEUED
    expect(page.locator('form[action$="/retry"]')).to_have_count(0)


def test_cancel_asks_first(page: Any, store: jobq.Store, shared_dashboard: Dashboard) -> None:
    """Cancel asks with confirm(): dismissed, nothing happens; accepted, the task is
    cancelled in the database."""
    queued = store.enqueue("emails.send", {"to": "ada@example.com"}, queue="mail")
    page.goto(f"{shared_dashboard.url}/tasks/{queued}")
    button = page.locator('form[action$="/cancel"] button')
    page.once("dialog", lambda dialog: dialog.dismiss())
    button.click()
    expect(page.locator("#task")).to_have_attribute("data-status", "queued")
    task = store.get(queued)
    assert task is not None and task.status is Status.QUEUED
    questions = accept_next_dialog(page)
    button.click()
    expect(page.locator(".flash-ok")).to_have_text(f"Task {queued} is cancelled.")
    assert questions == [f"Cancel task {queued}? A running task is asked to stop."]
    task = store.get(queued)
    assert task is not None and task.status is Status.CANCELLED


def _started(store: jobq.Store, queue: str) -> tuple[int, Any]:
    """How many tasks of ``queue`` were captured, and the latest started_at of them."""
    c = tasks.c
    stmt = sa.select(sa.func.count(), sa.func.max(c.started_at)).where(
        c.queue_id == queue, c.started_at.is_not(None)
    )
    with store.engine.connect() as conn:
        n, latest = conn.execute(stmt).one()
    return n, as_utc(latest)


def _database_now(store: jobq.Store) -> Any:
    with store.engine.connect() as conn:
        return as_utc(conn.execute(sa.select(store.dialect.now())).scalar_one())


def _wait(condition: Callable[[], bool], page: Any, what: str, seconds: float = 90.0) -> None:
    """Wait for ``condition`` (a database read), polling every 100 ms, for ``seconds``."""
    for _ in range(int(seconds * 10)):
        if condition():
            return
        page.wait_for_timeout(100)
    raise AssertionError(f"timed out waiting for {what}")


def test_pause_stops_a_real_worker(
    page: Any, store: jobq.Store, dashboard: Dashboard, db_url: str, tmp_path: Path
) -> None:
    """Paused from the queues page, a queue gets no new run from a real worker process
    (none starts later than 1 s after the pause), while the other queue keeps draining
    well past that; Resume lets the worker take it again."""
    RUNS.create(store.engine, checkfirst=True)
    per_queue, batch = 200, 10
    for _ in range(0, per_queue, batch):  # interleaved: the worker drains both together
        store.enqueue_many("work", [{"seconds": 0.1}] * batch, queue="limited")
        store.enqueue_many("free", [{"seconds": 0.1}] * batch, queue="free")
    workers = Workers("tests.apps.limited:app", db_url, tmp_path, ["--concurrency", "4"])
    workers.start()
    try:
        _wait(lambda: _started(store, "limited")[0] >= 5, page, "the worker to start tasks")
        page.goto(dashboard.url + "/queues")
        row = page.locator('#queue-table tr[data-queue="limited"]')
        expect(row).to_have_attribute("data-paused", "false")
        questions = accept_next_dialog(page)
        row.locator('form[action$="/queues/pause"] button').click()
        expect(page.locator(".flash-ok")).to_contain_text("Queue 'limited' is paused")
        paused_at = _database_now(store)
        assert questions == ["Pause queue limited? Workers stop taking its tasks."]
        expect(row).to_have_attribute("data-paused", "true")
        expect(row.locator(".badge-paused")).to_have_text("paused")

        # The other queue keeps draining: every one of its tasks is run, after the pause.
        _wait(lambda: _started(store, "free")[0] == per_queue, page, "queue free to drain")
        n, latest = _started(store, "limited")
        assert n < per_queue, "queue limited drained before the pause: nothing proven"
        assert latest <= paused_at + timedelta(seconds=1), (latest, paused_at)
        free_latest = _started(store, "free")[1]
        assert free_latest > paused_at + timedelta(seconds=1), "the worker stopped altogether"
        assert store.paused_queues() == ["limited"]

        row.locator('form[action$="/queues/resume"] button').click()
        expect(page.locator(".flash-ok")).to_have_text("Queue 'limited' is resumed.")
        # The worker takes it again: 20 more of its tasks start, past the paused time
        # (not all: the rest, some 180, would take 5 s more and prove nothing more).
        _wait(lambda: _started(store, "limited")[0] >= n + 20, page, "limited to be taken")
        assert _started(store, "limited")[1] > paused_at + timedelta(seconds=1)
    finally:
        workers.kill_all()


def test_refresh_without_reload(page: Any, store: jobq.Store, dashboard: Dashboard) -> None:
    """The overview's counts follow the database (refreshed by the page's script within
    seconds) while the page itself is not reloaded: a value set on window stays."""
    store.enqueue_many("emails.send", [{"n": n} for n in range(3)], queue="mail")
    page.goto(dashboard.url + "/")
    expect(page.locator("#total-queued")).to_have_text("3")
    page.evaluate("window.__still_here = 'yes'")
    store.enqueue_many("emails.send", [{"n": n} for n in range(1234)], queue="mail")
    # The counts are taken every 5 s, the page asks every 5 s: within 60 s on a busy machine.
    expect(page.locator("#total-queued")).to_have_text("1,237", timeout=60_000)
    expect(page.locator('#queue-overview tr[data-queue="mail"] td').nth(1)).to_have_text("1,237")
    assert page.evaluate("window.__still_here") == "yes"


def test_markup_from_the_database_is_text(
    page: Any, store: jobq.Store, shared_dashboard: Dashboard
) -> None:
    """Markup in a task's arguments is shown as text on its page, and in the filter
    form's echo of a name; no script of theirs runs, no element of theirs is made."""
    script = "<script>window.__xss=1</script>"
    image = "<img src=x onerror=window.__xss=2>"
    task_id = store.enqueue("emails.send", {"note": script, "alt": image}, queue="mail")
    page.goto(f"{shared_dashboard.url}/tasks/{task_id}")
    expect(page.locator("#args")).to_contain_text(script)
    expect(page.locator("#args")).to_contain_text(image)
    assert page.locator("#args script, #args img").count() == 0
    page.goto(f"{shared_dashboard.url}/tasks?name={script}")
    expect(page.locator("form#task-filter input[name=name]")).to_have_value(script)
    page.goto(f"{shared_dashboard.url}/tasks")
    expect(page.locator("#task-table")).to_be_visible()
    assert page.evaluate("typeof window.__xss") == "undefined"


def test_sign_in_with_a_token(
    page: Any, store: jobq.Store, dashboards: Callable[..., Dashboard], screenshots: Path,
    backend: str,
) -> None:  # fmt: skip
    """With --token, a browser is sent to the sign-in form; a wrong token is refused, the
    right one leads to the page asked for; Sign out leads back to the form."""
    store.enqueue("emails.send", {"to": "ada@example.com"}, queue="mail")
    served = dashboards("--token", TOKEN)
    page.goto(served.url + "/queues")
    expect(page).to_have_url(served.url + "/login?next=%2Fqueues")
    shoot(page, screenshots, f"{backend}-login")
    page.fill("#login-form input[name=token]", "not-the-token")
    page.click("#login-form button[type=submit]")
    expect(page.locator("#login-error")).to_be_visible()
    page.fill("#login-form input[name=token]", TOKEN)
    page.click("#login-form button[type=submit]")
    expect(page).to_have_url(served.url + "/queues")
    expect(page.locator('#queue-table tr[data-queue="mail"]')).to_be_visible()
    page.click("#logout-form button")
    expect(page).to_have_url(served.url + "/login")


def test_read_only_has_no_buttons(
    page: Any, store: jobq.Store, dashboards: Callable[..., Dashboard]
) -> None:
    """--read-only: the pages say so and show no action at all."""
    failed = failed_task(store)
    served = dashboards("--read-only")
    page.goto(f"{served.url}/tasks/{failed}")
    expect(page.locator("#read-only")).to_be_visible()
    expect(page.locator("#error")).to_be_visible()
    expect(page.locator("form.action")).to_have_count(0)
    page.goto(served.url + "/queues")
    expect(page.locator('#queue-table tr[data-queue="reports"]')).to_be_visible()
    expect(page.locator("form.action")).to_have_count(0)
