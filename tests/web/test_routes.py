"""Every page of the dashboard on a real database: what it shows, its filters and keyset
pages, the refresh fragments, and that no value from the database reaches it unescaped."""

from __future__ import annotations

import re

import pytest
from starlette.testclient import TestClient

import jobq
from jobq import Status
from jobq.web import queries
from tests.helpers import set_columns
from tests.web.conftest import TRACEBACK, WORKER, Rows, client_of

XSS = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
PAGES = ["/", "/tasks", "/queues", "/cron", "/locks", "/workers"]


def ids_on(page: str) -> list[int]:
    """The task ids of the tasks table's rows, in order."""
    return [int(found) for found in re.findall(r'<tr data-task-id="(\d+)"', page)]


def test_every_page_renders_the_rows(client: TestClient, rows: Rows) -> None:
    for path in [*PAGES, f"/tasks/{rows.failed}"]:
        page = client.get(path)
        assert page.status_code == 200, path
        assert page.headers["content-type"].startswith("text/html")
        assert '<main id="main">' in page.text
    overview = client.get("/").text
    for queue in ("mail", "reports"):
        assert f'data-queue="{queue}"' in overview
    assert 'id="throughput"' in overview
    assert f'data-worker="{WORKER}"' in overview
    assert "1 / 4" in overview  # the worker's busy slots
    tasks = client.get("/tasks").text
    assert set(ids_on(tasks)) >= {rows.queued, rows.running, rows.done, rows.failed}
    for status in ("queued", "in_progress", "done", "failed", "cancelled"):
        assert f'data-status="{status}"' in tasks
    cron = client.get("/cron").text
    assert 'data-schedule="nightly-cleanup"' in cron and "0 3 * * *" in cron
    locks = client.get("/locks").text
    assert 'data-lock="deploy"' in locks and 'data-lock="report:daily"' in locks
    workers = client.get("/workers").text
    assert f'data-worker="{WORKER}"' in workers
    assert f'data-task-id="{rows.running}"' in workers


def test_a_failed_task_shows_its_traceback_and_why(client: TestClient, rows: Rows) -> None:
    page = client.get(f"/tasks/{rows.failed}").text
    assert 'data-status="failed"' in page
    assert "ValueError: no data for 2026-11-24" in page
    assert TRACEBACK.splitlines()[1].replace('"', "&#34;") in page
    assert 'data-reason="finished"' in page
    assert "1 made, 0 retries left" in page
    assert f'action="/tasks/{rows.failed}/retry"' in page
    assert "/cancel" not in page  # ended: nothing to cancel


def test_a_running_task_shows_progress_lock_key_and_worker(client: TestClient, rows: Rows) -> None:
    page = client.get(f"/tasks/{rows.running}").text
    assert 'data-reason="running"' in page
    assert '<progress max="10" value="3">' in page and "page 3 of 10" in page
    assert 'id="lock-key">report:daily<' in page
    assert WORKER in page
    assert f'action="/tasks/{rows.running}/cancel"' in page
    assert "/retry" not in page


def test_a_done_task_shows_its_arguments_and_result(client: TestClient, rows: Rows) -> None:
    page = client.get(f"/tasks/{rows.done}").text
    assert "&#34;n&#34;: 1" in page
    assert re.search(r'<pre id="result" class="code">\{\s+&#34;sent&#34;: true\s+\}</pre>', page)


def test_a_missing_task_is_404(client: TestClient, rows: Rows) -> None:
    assert client.get("/tasks/987654321").status_code == 404
    assert client.get("/tasks/0").status_code == 404


def test_finished_counts_come_from_the_background_count(
    store: jobq.Store, client: TestClient, rows: Rows
) -> None:
    counts = client.app.state.counts  # type: ignore[attr-defined]
    assert counts.refresh("finished") and counts.refresh("active")
    page = client.get("/queues").text
    row = page[page.index('data-queue="reports"') :].split("</tr>")[0]
    # Queued 0, running 1, retrying 0, done 0, failed 1, cancelled 0.
    cells = re.findall(r'<td class="num">(.*?)</td>', row)
    assert [re.sub(r"<[^>]+>", "", cell) for cell in cells[:6]] == ["0", "1", "0", "0", "1", "0"]
    assert "finished counts as of" in page


def test_the_chart_counts_the_last_hours_ends(client: TestClient, rows: Rows) -> None:
    data = queries.throughput(client.app.state.store)  # type: ignore[attr-defined]
    assert sum(data.done["mail"]) == 1 and sum(data.failed["reports"]) == 1
    assert data.done["mail"][0] == 1  # the last minute
    page = client.get("/").text
    assert "1 done, 0 failed" in page  # a bar's tooltip
    assert re.search(r'<rect class="failed" [^>]*height="28', page)  # reports' sparkline


def test_old_ends_are_left_out_of_the_chart(store: jobq.Store, rows: Rows) -> None:
    set_columns(store, rows.done, finished_at=store.get(rows.done).created_at.replace(year=2020))  # type: ignore[union-attr]
    data = queries.throughput(store)
    assert sum(data.done.get("mail", [0])) == 0


def test_filters(client: TestClient, store: jobq.Store, rows: Rows) -> None:
    assert set(ids_on(client.get("/tasks?queue=mail").text)) == {
        rows.queued, rows.done, rows.retrying, rows.cancelled,
    }  # fmt: skip
    assert ids_on(client.get("/tasks?status=failed&queue=reports").text) == [rows.failed]
    assert ids_on(client.get("/tasks?name=reports.build").text) == [rows.failed, rows.running]
    assert ids_on(client.get("/tasks?name=reports").text) == []  # exact unless it ends in *
    assert ids_on(client.get("/tasks?name=reports.*").text) == [rows.failed, rows.running]
    # The prefix's own wildcards are literal: _ matches only _.
    odd = store.enqueue("a_b.task", queue="odd")
    store.enqueue("axb.task", queue="odd")
    assert ids_on(client.get("/tasks?name=a_b*").text) == [odd]
    assert ids_on(client.get("/tasks?name=%25*").text) == []
    page = client.get("/tasks?status=nonsense")
    assert page.status_code == 200 and "unknown status" in page.text


def test_find_by_id_goes_to_the_task(client: TestClient, rows: Rows) -> None:
    found = client.get(f"/tasks?id={rows.done}", follow_redirects=False)
    assert found.status_code == 303 and found.headers["location"] == f"/tasks/{rows.done}"
    assert "is not a task id" in client.get("/tasks?id=abc").text
    for odd in ["²", "-1", "0", str(2**63), "1e3"]:
        assert "is not a task id" in client.get("/tasks", params={"id": odd}).text, odd
        assert client.get("/tasks", params={"before": odd}).status_code == 200


def test_keyset_pages_newest_first(client: TestClient, store: jobq.Store) -> None:
    ids = store.enqueue_many("bulk.task", [{"i": i} for i in range(120)], queue="bulk")
    newest_first = sorted(ids, reverse=True)
    first = client.get("/tasks").text
    assert ids_on(first) == newest_first[:50]
    older = re.search(r'id="older" class="btn" href="/tasks\?before=(\d+)"', first)
    assert older and int(older.group(1)) == newest_first[49]
    second = client.get(f"/tasks?before={older.group(1)}").text
    assert ids_on(second) == newest_first[50:100]
    third = client.get(f"/tasks?before={newest_first[99]}").text
    assert ids_on(third) == newest_first[100:]
    assert 'id="older"' not in third and 'id="newest"' in third


def test_a_filtered_page_searches_one_window_of_ids(
    client: TestClient, store: jobq.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queries, "WINDOW", 10)
    rare = store.enqueue("rare.task", queue="rare")
    store.enqueue_many("bulk.task", [{"i": i} for i in range(25)], queue="bulk")
    first = client.get("/tasks?queue=rare").text
    assert ids_on(first) == [] and 'id="searched"' in first
    link = re.search(r'id="older" class="btn" href="(/tasks\?queue=rare&amp;before=\d+)"', first)
    assert link
    pages = [link.group(1).replace("&amp;", "&")]
    found: list[int] = []
    while pages:
        page = client.get(pages.pop()).text
        found += ids_on(page)
        more = re.search(r'id="older" class="btn" href="([^"]+)"', page)
        if more:
            pages.append(more.group(1).replace("&amp;", "&"))
    assert found == [rare]


def test_a_fragment_is_the_main_content_only(client: TestClient, rows: Rows) -> None:
    for path in PAGES:
        fragment = client.get(path, headers={"x-jobq-fragment": "1"})
        assert fragment.status_code == 200
        assert "<html" not in fragment.text and 'id="nav"' not in fragment.text
        assert "<h1>" in fragment.text
    full = client.get("/tasks").text
    assert "<html" in full and 'id="nav"' in full


def test_values_from_the_database_are_escaped(store: jobq.Store) -> None:
    task_id = store.enqueue(XSS, {"html": XSS}, queue=XSS, retries=0)
    [run] = store.capture(1, worker_id="w")
    store.set_status(run.id, run.attempt, Status.FAILED, error=XSS)
    Lock = jobq.Mutex
    assert Lock(store, XSS).acquire()
    store.pause_queue(XSS)
    for client in client_of(store):
        for path in [*PAGES, f"/tasks/{task_id}", f"/tasks?queue={XSS}&name={XSS}"]:
            page = client.get(path).text
            assert "<script>alert" not in page, path
        assert ESCAPED in client.get(f"/tasks/{task_id}").text
        assert ESCAPED in client.get("/locks").text
        assert ESCAPED in client.get("/queues").text


def test_static_files_are_served(client: TestClient) -> None:
    script = client.get("/static/app.js")
    assert script.status_code == 200 and "X-Jobq-Fragment" in script.text
    assert client.get("/static/app.css").status_code == 200


def test_the_dom_contract_of_the_browser_tests(client: TestClient, rows: Rows) -> None:
    """The ids and attributes that browser tests and benchmarks find elements by."""
    overview = client.get("/").text
    for piece in ['id="main"', 'id="nav"', 'id="throughput"', 'id="queue-overview"',
                  'id="worker-overview"', 'id="refresh-toggle"', 'name="jobq-csrf"',
                  'data-refresh="5"']:  # fmt: skip
        assert piece in overview, piece
    tasks = client.get("/tasks").text
    for piece in ['<form id="task-filter"', 'name="queue"', 'name="status"', 'name="name"',
                  'name="id"', 'id="task-table"', 'data-task-id=']:  # fmt: skip
        assert piece in tasks, piece
    failed = client.get(f"/tasks/{rows.failed}").text
    for piece in ['id="task"', 'id="why"', 'id="args"', 'id="error"', 'id="lock-key"',
                  'id="unique-key"', f'action="/tasks/{rows.failed}/retry"',
                  'data-action="retry"']:  # fmt: skip
        assert piece in failed, piece
    queued = client.get(f"/tasks/{rows.queued}").text
    assert 'data-action="cancel" data-confirm="' in queued
    queues = client.get("/queues").text
    assert 'id="queue-table"' in queues and 'data-queue="mail" data-paused="false"' in queues
    assert 'action="/queues/pause" class="action" data-action="pause" data-confirm=' in queues
    assert 'data-action="retry_failed"' in queues
    cron = client.get("/cron").text
    assert 'id="cron-table"' in cron
    for action in ("run_now", "disable"):
        assert f'data-action="{action}"' in cron
    locks = client.get("/locks").text
    assert 'id="lock-table"' in locks and 'data-action="release"' in locks
    assert 'id="worker-table"' in client.get("/workers").text


def test_the_queues_page_shows_limits_and_their_use(
    client: TestClient, store: jobq.Store, rows: Rows
) -> None:
    store.set_limit("reports", concurrency=2, rate="10/1m")
    store.pause_queue("idle")  # a queue with no task: known by its pause
    page = client.get("/queues").text
    row = page[page.index('data-queue="reports"') :].split("</tr>")[0]
    assert "1 / 2 running" in row
    assert "started, at most 10/1m" in row
    assert 'data-queue="idle" data-paused="true"' in page


def test_the_queues_page_shows_a_fair_queue_and_its_keys_with_work(
    client: TestClient, store: jobq.Store, rows: Rows
) -> None:
    store.fair_queues.make_fair("tenants", default_weight=2, max_running_per_key=3)
    for key in ("acme", "globex"):
        store.enqueue("report", {}, queue="tenants", fair_key=key)
    client.app.state.counts.refresh("active")  # type: ignore[attr-defined]
    page = client.get("/queues").text
    row = page[page.index('data-queue="tenants"') :].split("</tr>")[0]
    assert "weight 2" in row and "3 per key" in row and "2 keys" in row
    other = page[page.index('data-queue="reports"') :].split("</tr>")[0]
    assert '<td class="fair">' in other and ">no<" in other
