"""The dashboard's actions on a real database: each changes what it should and nothing
else, asks first when destructive, and is refused without a CSRF token or when the
dashboard is read-only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

import jobq
from jobq import Mutex, Status
from jobq.dialects.schema import limits, locks
from tests.helpers import all_rows
from tests.web.conftest import Rows, client_of, csrf_of


def post(client: TestClient, path: str, **fields: str) -> tuple[int, str, str]:
    """POST ``fields`` with the session's CSRF token: (status, location, flash or page)."""
    answer = client.post(path, data={"csrf": csrf_of(client), **fields}, follow_redirects=False)
    location = answer.headers.get("location", "")
    if answer.status_code != 303:
        return answer.status_code, location, answer.text
    page = client.get(location).text
    flash = page.split('<div class="flash', 1)[1].split("</div>", 1)[0] if "flash" in page else ""
    return 303, location, flash


def state(store: jobq.Store) -> tuple[object, ...]:
    """Every row an action may change: tasks, locks, limits and pauses, schedules."""
    with store.engine.connect() as conn:
        others = [
            [tuple(row) for row in conn.execute(sa.select(table).order_by(*table.primary_key))]
            for table in (locks, limits)
        ]
    return (all_rows(store), *others, store.schedules())


def status(store: jobq.Store, task_id: int) -> Status:
    task = store.get(task_id)
    assert task is not None
    return task.status


def test_retry_queues_a_failed_task_again(
    client: TestClient, store: jobq.Store, rows: Rows
) -> None:
    code, location, flash = post(client, f"/tasks/{rows.failed}/retry")
    assert (code, location) == (303, f"/tasks/{rows.failed}")
    assert "is queued again" in flash and "flash-ok" in flash
    assert status(store, rows.failed) is Status.QUEUED


def test_retry_of_a_task_that_cannot_be_says_so(
    client: TestClient, store: jobq.Store, rows: Rows
) -> None:
    code, _, flash = post(client, f"/tasks/{rows.queued}/retry")
    assert code == 303 and "flash-error" in flash and "was not retried" in flash
    assert status(store, rows.queued) is Status.QUEUED
    assert post(client, "/tasks/987654321/retry")[0] == 404


def test_cancel_asks_first_then_cancels(client: TestClient, store: jobq.Store, rows: Rows) -> None:
    before = state(store)
    code, _, page = post(client, f"/tasks/{rows.queued}/cancel")
    assert code == 200 and 'id="confirm-form"' in page and "Cancel task" in page
    assert state(store) == before
    code, location, flash = post(client, f"/tasks/{rows.queued}/cancel", confirm="yes")
    assert (code, location) == (303, f"/tasks/{rows.queued}")
    assert "is cancelled" in flash
    assert status(store, rows.queued) is Status.CANCELLED


def test_cancel_of_a_running_task_requests_it(
    client: TestClient, store: jobq.Store, rows: Rows
) -> None:
    code, _, flash = post(client, f"/tasks/{rows.running}/cancel", confirm="yes")
    assert code == 303 and "asked to cancel" in flash
    task = store.get(rows.running)
    assert task is not None and task.status is Status.IN_PROGRESS
    assert task.cancel_requested_at is not None


def test_bulk_retry_of_a_queues_failed_tasks(
    client: TestClient, store: jobq.Store, rows: Rows
) -> None:
    assert post(client, "/queues/retry-failed", queue="reports")[0] == 200  # asks first
    assert status(store, rows.failed) is Status.FAILED
    code, location, flash = post(client, "/queues/retry-failed", queue="reports", confirm="yes")
    assert (code, location) == (303, "/queues")
    assert "1 failed task of queue" in flash
    assert status(store, rows.failed) is Status.QUEUED
    assert status(store, rows.retrying) is Status.FAILED  # another queue's, retrying anyway


def test_pause_and_resume(client: TestClient, store: jobq.Store, rows: Rows) -> None:
    assert post(client, "/queues/pause", queue="mail")[0] == 200
    assert store.paused_queues() == []
    code, _, flash = post(client, "/queues/pause", queue="mail", confirm="yes")
    assert code == 303 and "is paused" in flash
    assert store.paused_queues() == ["mail"]
    page = client.get("/queues").text
    assert 'data-queue="mail" data-paused="true"' in page
    assert 'action="/queues/resume"' in page
    code, _, flash = post(client, "/queues/resume", queue="mail")
    assert code == 303 and "is resumed" in flash
    assert store.paused_queues() == []


def test_cron_disable_enable_and_run_now(client: TestClient, store: jobq.Store, rows: Rows) -> None:
    [schedule] = store.schedules()
    assert post(client, "/cron/disable", name=schedule.name, confirm="yes")[0] == 303
    assert not store.schedules()[0].enabled
    assert 'data-enabled="false"' in client.get("/cron").text
    code, _, flash = post(client, "/cron/enable", name=schedule.name)
    assert code == 303 and "is enabled" in flash
    assert store.schedules()[0].enabled
    newest = max(row["id"] for row in all_rows(store))
    code, location, flash = post(client, "/cron/run", name=schedule.name)
    assert (code, location) == (303, "/cron")
    run = store.get(newest + 1)
    assert run is not None and run.name == "cleanup" and run.status is Status.QUEUED
    assert f"Task {run.id} enqueued" in flash


def test_an_unknown_schedule_is_said(client: TestClient, store: jobq.Store, rows: Rows) -> None:
    code, _, flash = post(client, "/cron/enable", name="nope")
    assert code == 303 and "flash-error" in flash and "nope" in flash


def test_release_a_lock(client: TestClient, store: jobq.Store, rows: Rows) -> None:
    code, _, flash = post(client, "/locks/release", name="deploy", confirm="yes")
    assert code == 303 and "is released" in flash
    assert Mutex(store, "deploy").acquire()  # free again
    code, _, flash = post(client, "/locks/release", name="report:daily", confirm="yes")
    assert "flash-error" in flash and "freed when the run ends" in flash


@pytest.mark.parametrize("token", [None, "", "not-the-token"])
def test_without_the_csrf_token_nothing_happens(
    client: TestClient, store: jobq.Store, rows: Rows, token: str | None
) -> None:
    csrf_of(client)  # the session has a token: the request must carry it
    before = state(store)
    fields = {} if token is None else {"csrf": token}
    for path, form in [
        (f"/tasks/{rows.failed}/retry", {}),
        (f"/tasks/{rows.queued}/cancel", {"confirm": "yes"}),
        ("/queues/retry-failed", {"queue": "reports", "confirm": "yes"}),
        ("/queues/pause", {"queue": "mail", "confirm": "yes"}),
        ("/cron/disable", {"name": "nightly-cleanup", "confirm": "yes"}),
        ("/cron/run", {"name": "nightly-cleanup"}),
        ("/locks/release", {"name": "deploy", "confirm": "yes"}),
    ]:
        answer = client.post(path, data={**fields, **form}, follow_redirects=False)
        assert answer.status_code == 403, path
    assert state(store) == before


@pytest.fixture
def read_only(store: jobq.Store) -> Iterator[TestClient]:
    yield from client_of(store, read_only=True)


def test_read_only_shows_no_buttons_and_refuses_actions(
    read_only: TestClient, store: jobq.Store, rows: Rows
) -> None:
    for path in ["/", "/tasks", f"/tasks/{rows.failed}", f"/tasks/{rows.queued}", "/queues",
                 "/cron", "/locks", "/workers"]:  # fmt: skip
        page = read_only.get(path).text
        assert 'method="post"' not in page, path
    assert 'id="read-only"' in read_only.get("/").text
    before = state(store)
    for path, form in [
        (f"/tasks/{rows.failed}/retry", {}),
        (f"/tasks/{rows.queued}/cancel", {"confirm": "yes"}),
        ("/queues/pause", {"queue": "mail", "confirm": "yes"}),
        ("/cron/run", {"name": "nightly-cleanup"}),
        ("/locks/release", {"name": "deploy", "confirm": "yes"}),
    ]:
        answer = read_only.post(path, data=form, follow_redirects=False)
        assert answer.status_code == 403 and "read-only" in answer.text, path
    assert state(store) == before


def test_a_confirmation_page_posts_the_action(
    client: TestClient, store: jobq.Store, rows: Rows
) -> None:
    """Without the script, the server's question page carries the form that acts."""
    page = post(client, "/locks/release", name="deploy")[2]
    assert 'action="/locks/release"' in page and 'name="confirm" value="yes"' in page
    assert 'name="name" value="deploy"' in page
    code, _, _ = post(client, "/locks/release", name="deploy", confirm="yes", next="/locks")
    assert code == 303
    assert not any(lock.name == "deploy" for lock in jobq.locks.list_locks(store))


def test_next_never_leaves_the_site(client: TestClient, store: jobq.Store, rows: Rows) -> None:
    for target in [
        "https://evil.example/",
        "//evil.example/",
        "/\\evil.example",
        "/\t/evil.example",
    ]:
        code, location, _ = post(client, "/queues/resume", queue="mail", next=target)
        assert code == 303 and location == "/", target


def test_a_refresh_leaves_the_flash_for_the_page(
    client: TestClient, store: jobq.Store, rows: Rows
) -> None:
    answer = client.post(
        "/queues/resume", data={"csrf": csrf_of(client), "queue": "mail"}, follow_redirects=False
    )
    assert answer.status_code == 303
    fragment = client.get("/queues", headers={"x-jobq-fragment": "1"}).text
    assert "flash" not in fragment
    page = client.get("/queues").text
    assert '<div class="flash flash-ok" role="status">' in page and "was not paused" in page
    assert 'class="flash' not in client.get("/queues").text  # shown once
