"""Large stored values on every page: cut by the database to a readable size, their whole
size said, the whole value a download away; no page near their size."""

from __future__ import annotations

import json
import re

import pytest
import sqlalchemy as sa

import jobq
from jobq import Status
from jobq.dialects import clipping
from jobq.dialects.schema import tasks
from tests.helpers import set_columns
from tests.web.conftest import client_of

#: A page's bytes at most, whatever the rows hold.
MOST_BYTES = 1_000_000
#: Bytes of each large value: over 4 MB, under MariaDB's default 16 MB packet.
LARGE = 5_000_000
XSS = "<script>alert(1)</script>"


def large_text(n: int, end: str) -> str:
    """About ``n`` characters of several lines (non-ASCII and markup among them), ending
    with the line ``end``."""
    line = f"frame é😀 {XSS} " + "x" * 60 + "\n"
    return line * (n // len(line.encode())) + end


def ended_in_failure(store: jobq.Store, args: dict[str, object], error: str) -> int:
    """A task of ``args`` that failed for good with ``error``: its id."""
    task_id = store.enqueue("reports.build", args, queue="big-staging", retries=0)
    [run] = store.capture(1, queues="big-staging", worker_id="worker-1")
    assert store.set_status(task_id, run.attempt, Status.FAILED, error=error)
    set_columns(store, task_id, queue_id="big")
    return task_id


def test_a_task_page_shows_a_part_of_each_large_value(store: jobq.Store) -> None:
    args = {"rows": "a" * LARGE, "note": XSS, "name": "é😀"}
    error = large_text(LARGE, "ValueError: the last line")
    task_id = ended_in_failure(store, args, error)
    progress = {"current": 1, "total": None, "message": "m" * LARGE}
    result = ["r" * LARGE]
    set_columns(store, task_id, progress=progress, result=result)
    client = next(client_of(store))
    page = client.get(f"/tasks/{task_id}")
    assert page.status_code == 200
    assert len(page.content) < MOST_BYTES, len(page.content)
    for name in ("args", "result", "error", "progress"):
        assert f'id="{name}-cut"' in page.text, name
        assert f'href="/tasks/{task_id}/values/{name}"' in page.text
    assert "Showing the first 16,000 characters of 5.0 MB" in page.text  # args: 5,000,0xx bytes
    assert "ValueError: the last line" in page.text  # an error's end is kept
    assert XSS not in page.text and "&lt;script&gt;" in page.text


def test_the_whole_value_is_a_json_download(store: jobq.Store) -> None:
    args = {"rows": "a" * LARGE, "note": XSS, "name": "é😀"}
    error = large_text(LARGE, "ValueError: the last line")
    task_id = ended_in_failure(store, args, error)
    client = next(client_of(store))
    whole = client.get(f"/tasks/{task_id}/values/args")
    assert whole.status_code == 200
    assert whole.headers["content-type"] == "application/json"
    assert whole.headers["content-disposition"] == (
        f'attachment; filename="task-{task_id}-args.json"'
    )
    assert json.loads(whole.content) == args
    trace = client.get(f"/tasks/{task_id}/values/error")
    stored = store.get(task_id)
    assert stored is not None and stored.error is not None and len(stored.error) > 100_000
    assert json.loads(trace.content) == stored.error  # as stored (set_status cuts the middle)
    assert client.get(f"/tasks/{task_id}/values/result").status_code == 404  # NULL
    assert client.get(f"/tasks/{task_id}/values/secret").status_code == 404
    assert client.get("/tasks/987654321/values/args").status_code == 404


def test_a_small_value_is_shown_whole(store: jobq.Store) -> None:
    task_id = store.enqueue("emails.send", {"to": "ada@example.com", "tags": ["é", XSS]})
    client = next(client_of(store))
    page = client.get(f"/tasks/{task_id}").text
    assert 'id="args-cut"' not in page
    assert re.search(r'<pre id="args" class="code">\{\s+&#34;to&#34;: &#34;ada@example.com', page)
    assert "&lt;script&gt;" in page and XSS not in page


def test_the_list_and_workflow_pages_stay_small(store: jobq.Store) -> None:
    error = large_text(200_000, f"RuntimeError: {XSS} at the end")
    for _ in range(50):
        ended_in_failure(store, {"n": 1}, error)
    client = next(client_of(store))
    page = client.get("/tasks")
    assert len(page.content) < MOST_BYTES, len(page.content)
    assert page.text.count("RuntimeError: &lt;script&gt;") >= 50  # the error column
    assert XSS not in page.text


def test_the_workers_page_cuts_a_running_tasks_progress(store: jobq.Store) -> None:
    task_id = store.enqueue("reports.build", {"n": 1}, queue="reports")
    [run] = store.capture(1, queues="reports", worker_id="worker-1")
    store.register_worker("worker-1", host="host-a", pid=1, queues=None, concurrency=1)
    set_columns(store, run.id, progress={"current": 2, "total": None, "message": "m" * LARGE})
    client = next(client_of(store))
    page = client.get("/workers")
    assert len(page.content) < MOST_BYTES, len(page.content)
    assert f'href="/tasks/{task_id}"' in page.text and "5.0 MB of progress" in page.text


@pytest.mark.parametrize("text", ["", "a", "é😀" * 10, "x" * 50 + "é"])
def test_the_database_cuts_and_measures_text(store: jobq.Store, text: str) -> None:
    """clipping's head, tail and size on every database, with characters of 1-4 bytes."""
    task_id = store.enqueue("t", {"v": text})
    set_columns(store, task_id, error=text)
    d = store.dialect
    c = tasks.c
    stmt = sa.select(
        clipping.head(c.error, 7), clipping.tail(d, c.error, 7), clipping.size_in_bytes(d, c.error),
        clipping.size_in_bytes(d, c.args), clipping.as_text(c.args),
    ).where(c.id == task_id)  # fmt: skip
    with store.engine.connect() as conn:
        head, tail, size, args_size, args_text = conn.execute(stmt).one()
    assert (head, tail, size) == (text[:7], text[-7:], len(text.encode()))
    assert json.loads(args_text) == {"v": text}
    assert args_size == len(args_text.encode())


def test_a_one_line_error_is_cut_in_the_why_too(store: jobq.Store) -> None:
    """`why` quotes an error's last line: a line of megabytes is cut there as well."""
    task_id = ended_in_failure(store, {"n": 1}, "boom")
    set_columns(store, task_id, error="E" * LARGE)  # as a writer other than jobq might
    page = next(client_of(store)).get(f"/tasks/{task_id}")
    assert page.status_code == 200
    assert len(page.content) < MOST_BYTES, len(page.content)
    assert 'id="error-cut"' in page.text
