"""What operators asked of the dashboard: the upkeep lease apart from their locks (a real
worker holds it), workflow pages and a node's neighbours, and the task list's error
column with bulk retry and cancel of the tasks ticked."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

import jobq
from jobq import Mutex, Status
from jobq.upkeep import upkeep_holder
from tests.acceptance.test_worker_processes import wait_until
from tests.helpers import set_columns
from tests.web.conftest import Rows, client_of, csrf_of
from tests.worker_processes import Workers

XSS = "<script>alert(1)</script>"


@pytest.fixture
def workers(db_url: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers("tests.apps.mixed:app", db_url, tmp_path)
    yield started
    started.kill_all()


def section(page: str, element_id: str) -> str:
    """The HTML of the <section> whose id is ``element_id``."""
    found = re.search(rf'<section[^>]*id="{element_id}".*?</section>', page, re.S)
    assert found, f"no section {element_id}"
    return found.group(0)


def test_the_upkeep_lease_is_shown_apart_from_user_locks(
    store: jobq.Store, workers: Workers
) -> None:
    assert Mutex(store, "deploy").acquire()
    worker = workers.start()
    wait_until(lambda: worker.process.poll() is None and upkeep_holder(store) is not None, 60)
    holder = upkeep_holder(store)
    assert holder is not None
    client = next(client_of(store))
    page = client.get("/locks").text
    upkeep = section(page, "upkeep")
    assert f'id="upkeep-holder">{holder}<' in upkeep
    assert upkeep.count(socket.gethostname()) == 1  # the worker id names its host once
    assert 'data-lock="deploy"' in page  # the user's lock, with its button
    assert 'data-lock="jobq upkeep"' not in page
    assert 'value="jobq upkeep"' not in page  # no Release button for it
    worker.process.terminate()
    assert worker.process.wait(timeout=60) == 0, worker.stderr()


@pytest.fixture
def flow(app: jobq.App) -> dict[str, int]:
    """A chord: two header nodes (one done, one failed for good with markup in its error)
    and a callback waiting for them (blocked, then cancelled)."""

    @app.task(name="flows.part")
    def part(x: int) -> int:
        return x

    @app.task(name="flows.total")
    def total() -> int:
        return 0

    handle = jobq.chord(jobq.group(part.s(x=1), part.s(x=2)), total.s()).enqueue()
    first, second, callback = (t.id for t in handle.tasks)
    store = app.store
    for task_id, ok in ((first, True), (second, False)):
        set_columns(store, task_id, queue_id=f"staging-{task_id}")
        [run] = store.capture(1, queues=f"staging-{task_id}", worker_id="worker-1")
        if ok:
            assert store.set_status(run.id, run.attempt, Status.DONE, result=1)
        else:
            set_columns(store, task_id, retries_left=0)
            error = f"Traceback\nValueError: {XSS}"
            assert store.set_status(run.id, run.attempt, Status.FAILED, error=error)
    return {"workflow": handle.id, "first": first, "second": second, "callback": callback}


def test_a_node_page_shows_its_workflow_parents_and_children(
    app: jobq.App, flow: dict[str, int]
) -> None:
    client = next(client_of(app.store))
    node = client.get(f"/tasks/{flow['callback']}").text
    assert f'href="/workflows/{flow["workflow"]}"' in node
    parents = re.search(r'<ul class="nodes" id="parents">.*?</ul>', node, re.S)
    assert parents is not None
    assert f'<li data-task-id="{flow["first"]}">' in parents.group(0)
    assert 'data-status="done"' in parents.group(0) and 'data-status="failed"' in parents.group(0)
    first = client.get(f"/tasks/{flow['first']}").text
    children = re.search(r'<ul class="nodes" id="children">.*?</ul>', first, re.S)
    assert children is not None and f'data-task-id="{flow["callback"]}"' in children.group(0)
    assert 'data-status="cancelled"' in children.group(0)  # the failure cancelled it


def test_the_workflow_page_is_the_graph(app: jobq.App, flow: dict[str, int]) -> None:
    client = next(client_of(app.store))
    page = client.get(f"/workflows/{flow['workflow']}")
    assert page.status_code == 200
    rows = dict(re.findall(r'<tr data-task-id="(\d+)" data-status="(\w+)">', page.text))
    assert rows == {
        str(flow["first"]): "done", str(flow["second"]): "failed",
        str(flow["callback"]): "cancelled",
    }  # fmt: skip
    callback_row = page.text.split(f'<tr data-task-id="{flow["callback"]}"', 1)[1]
    callback_row = callback_row.split("</tr>", 1)[0]
    assert f'data-parent="{flow["first"]}"' in callback_row
    assert f'data-parent="{flow["second"]}"' in callback_row
    assert "ValueError: &lt;script&gt;" in page.text and XSS not in page.text
    assert client.get("/workflows/987654321").status_code == 404


def test_a_large_workflow_page_lists_its_first_nodes(app: jobq.App) -> None:
    @app.task(name="flows.part")
    def part(x: int) -> int:
        return x

    handle = jobq.group(*(part.s(x=i) for i in range(520))).enqueue()
    page = next(client_of(app.store)).get(f"/workflows/{handle.id}").text
    assert len(re.findall(r"<tr data-task-id=", page)) == 500
    assert "The first 500 nodes of 520" in page


def test_the_task_list_shows_each_errors_last_line(client: TestClient, rows: Rows) -> None:
    page = client.get("/tasks").text
    failed_row = page.split(f'<tr data-task-id="{rows.failed}">', 1)[1].split("</tr>", 1)[0]
    assert "ValueError: no data for 2026-11-24" in failed_row
    assert "Traceback" not in failed_row
    retrying_row = page.split(f'<tr data-task-id="{rows.retrying}">', 1)[1].split("</tr>", 1)[0]
    assert ">boom<" in retrying_row


def test_bulk_retry_and_cancel_of_the_tasks_ticked(
    client: TestClient, store: jobq.Store, rows: Rows
) -> None:
    page = client.get("/tasks").text
    assert 'id="bulk-form"' in page
    assert f'<input type="checkbox" name="id" value="{rows.failed}" form="bulk-form"' in page
    csrf = csrf_of(client)
    ids = [rows.failed, rows.cancelled, rows.done]
    form = {"csrf": csrf, "do": "retry", "id": [str(i) for i in ids], "next": "/tasks?queue=mail"}
    answer = client.post("/tasks/bulk", data=form, follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/tasks?queue=mail"
    statuses = {i: store.get(i).status for i in ids}  # type: ignore[union-attr]
    assert statuses == {rows.failed: Status.QUEUED, rows.cancelled: Status.QUEUED,
                        rows.done: Status.DONE}  # fmt: skip
    flashed = client.get("/tasks").text
    assert f"2 tasks retried; 1 not (not failed or cancelled, or gone): {rows.done}" in flashed
    # A cancel asks first, listing the tasks; its page posts them again with confirm=yes.
    cancel = {"csrf": csrf, "do": "cancel", "id": [str(rows.queued), str(rows.running)]}
    asked = client.post("/tasks/bulk", data=cancel)
    assert asked.status_code == 200 and 'id="confirm-form"' in asked.text
    assert f'name="id" value="{rows.running}"' in asked.text
    assert store.get(rows.queued).status is Status.QUEUED  # type: ignore[union-attr]
    done = client.post("/tasks/bulk", data={**cancel, "confirm": "yes"}, follow_redirects=False)
    assert done.status_code == 303
    assert store.get(rows.queued).status is Status.CANCELLED  # type: ignore[union-attr]
    running = store.get(rows.running)
    assert running is not None and running.cancel_requested_at is not None  # asked to stop


def test_bulk_actions_are_checked(client: TestClient, store: jobq.Store, rows: Rows) -> None:
    form = {"do": "retry", "id": [str(rows.failed)]}
    assert client.post("/tasks/bulk", data=form).status_code == 403  # no CSRF token
    assert client.post("/tasks/bulk", data={**form, "csrf": "forged"}).status_code == 403
    assert store.get(rows.failed).status is Status.FAILED  # type: ignore[union-attr]
    csrf = csrf_of(client)
    wrong = client.post("/tasks/bulk", data={"csrf": csrf, "do": "purge", "id": ["1"]})
    assert wrong.status_code == 400 and "do must be one of retry, cancel" in wrong.text
    bad = client.post("/tasks/bulk", data={"csrf": csrf, "do": "retry", "id": ["1", "x<"]})
    assert bad.status_code == 400 and "'x<' is not a task id" in bad.text
    many = {"csrf": csrf, "do": "retry", "id": [str(i) for i in range(1, 502)]}
    assert client.post("/tasks/bulk", data=many).status_code == 400
    gone = {"csrf": csrf, "do": "cancel", "id": ["987654321"], "confirm": "yes"}
    flashed = client.post("/tasks/bulk", data=gone).text  # the redirect's page
    assert "0 tasks cancelled; 1 gone: 987654321." in flashed


def test_read_only_has_no_bulk_actions(store: jobq.Store, rows: Rows) -> None:
    client = next(client_of(store, read_only=True))
    page = client.get("/tasks").text
    assert 'id="bulk-form"' not in page and 'type="checkbox"' not in page
    form = {"csrf": csrf_of(client), "do": "retry", "id": [str(rows.failed)]}
    assert client.post("/tasks/bulk", data=form).status_code == 403
    assert store.get(rows.failed).status is Status.FAILED  # type: ignore[union-attr]
