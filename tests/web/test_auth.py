"""Sign-in, sessions and the headers of the dashboard; its database's credentials never
shown; and the dashboard mounted inside another Starlette application."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

import jobq
from jobq import Status
from jobq.web import create_app
from jobq.web.auth import COOKIE
from tests.web.conftest import Rows, client_of, csrf_of

TOKEN = "s3cret-dashboard-token"
JSON = {"accept": "application/json"}


@pytest.fixture
def guarded(store: jobq.Store) -> Iterator[TestClient]:
    """A client of a dashboard that asks for TOKEN."""
    yield from client_of(store, token=TOKEN)


def sign_in(client: TestClient, token: str = TOKEN, next: str = "/") -> object:
    form = client.get(f"/login?next={next}")
    assert form.status_code == 200 and 'id="login-form"' in form.text
    csrf = form.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    return client.post(
        "/login", data={"csrf": csrf, "token": token, "next": next}, follow_redirects=False
    )


def test_without_a_token_pages_are_refused(guarded: TestClient, rows: Rows) -> None:
    for path in ["/", "/tasks", f"/tasks/{rows.done}", "/queues", "/cron", "/locks", "/workers"]:
        api = guarded.get(path, headers=JSON)
        assert api.status_code == 401, path
        assert api.headers["www-authenticate"].startswith("Bearer")
        browser = guarded.get(path, follow_redirects=False)
        assert browser.status_code == 303
        assert browser.headers["location"].startswith("/login?next=")
    assert guarded.get("/tasks?queue=mail", follow_redirects=False).headers["location"] == (
        "/login?next=%2Ftasks%3Fqueue%3Dmail"
    )
    # A refresh whose session ended is told so (the script then reloads the page).
    assert guarded.get("/", headers={"x-jobq-fragment": "1"}).status_code == 401


def test_a_wrong_bearer_token_is_401(guarded: TestClient, rows: Rows) -> None:
    for value in ["Bearer nope", f"Bearer {TOKEN}x", f"Basic {TOKEN}", "Bearer"]:
        answer = guarded.get("/", headers={"authorization": value}, follow_redirects=False)
        assert answer.status_code == 401, value


def test_the_bearer_token_lets_scripts_in_without_csrf(
    guarded: TestClient, store: jobq.Store, rows: Rows
) -> None:
    bearer = {"authorization": f"Bearer {TOKEN}"}
    for path in ["/", "/tasks", f"/tasks/{rows.failed}", "/queues", "/workers"]:
        assert guarded.get(path, headers=bearer).status_code == 200, path
    answer = guarded.post(f"/tasks/{rows.failed}/retry", headers=bearer, follow_redirects=False)
    assert answer.status_code == 303
    task = store.get(rows.failed)
    assert task is not None and task.status is Status.QUEUED
    assert "set-cookie" not in answer.headers  # no session: nothing to keep
    # A destructive action must say confirm=yes: a script has no page to confirm on.
    asked = guarded.post("/queues/pause", headers=bearer, data={"queue": "mail"})
    assert asked.status_code == 400 and "confirm=yes" in asked.text
    assert store.paused_queues() == []
    paused = guarded.post(
        "/queues/pause", headers=bearer, data={"queue": "mail", "confirm": "yes"},
        follow_redirects=False,
    )  # fmt: skip
    assert paused.status_code == 303 and store.paused_queues() == ["mail"]


def test_the_sign_in_form_sets_a_session_cookie(guarded: TestClient, rows: Rows) -> None:
    answer = sign_in(guarded, next="/queues")
    assert answer.status_code == 303 and answer.headers["location"] == "/queues"  # type: ignore[attr-defined]
    cookie = answer.headers["set-cookie"].lower()  # type: ignore[attr-defined]
    assert cookie.startswith(f"{COOKIE}=") and "httponly" in cookie and "samesite=lax" in cookie
    for path in ["/", "/tasks", "/queues", "/cron", "/locks", "/workers"]:
        assert guarded.get(path).status_code == 200, path
    assert 'id="logout-form"' in guarded.get("/").text


def test_a_wrong_token_in_the_form_signs_nobody_in(guarded: TestClient) -> None:
    answer = sign_in(guarded, token="wrong")
    assert answer.status_code == 401  # type: ignore[attr-defined]
    assert 'id="login-error"' in answer.text  # type: ignore[attr-defined]
    assert guarded.get("/", follow_redirects=False).status_code == 303


def test_sign_out_ends_the_session(guarded: TestClient, rows: Rows) -> None:
    sign_in(guarded)
    assert guarded.post("/logout", data={}, follow_redirects=False).status_code == 403
    answer = guarded.post("/logout", data={"csrf": csrf_of(guarded, "/")}, follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/login"
    assert guarded.get("/", follow_redirects=False).status_code == 303
    assert guarded.get("/", headers=JSON).status_code == 401


def test_a_signed_in_session_still_needs_the_csrf_token(
    guarded: TestClient, store: jobq.Store, rows: Rows
) -> None:
    sign_in(guarded)
    answer = guarded.post(f"/tasks/{rows.failed}/retry", data={}, follow_redirects=False)
    assert answer.status_code == 403
    assert store.get(rows.failed).status is Status.FAILED  # type: ignore[union-attr]
    csrf = csrf_of(guarded)
    answer = guarded.post(
        f"/tasks/{rows.failed}/retry", data={"csrf": csrf}, follow_redirects=False
    )
    assert answer.status_code == 303
    assert store.get(rows.failed).status is Status.QUEUED  # type: ignore[union-attr]


def test_without_a_configured_token_no_sign_in_is_needed(client: TestClient) -> None:
    assert client.get("/", headers=JSON).status_code == 200
    assert client.get("/login", follow_redirects=False).status_code == 303


def test_security_headers_on_every_answer(guarded: TestClient) -> None:
    for answer in [guarded.get("/login"), guarded.get("/", headers=JSON),
                   guarded.get("/static/app.js")]:  # fmt: skip
        csp = answer.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "'unsafe-inline'" not in csp
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["referrer-policy"] == "no-referrer"
    page = guarded.get("/login").text
    assert "<script>" not in page and "<script " not in page.replace('<script src="', "")


# --- no database needed: a URL with a password, of a server that is not there ------------

SECRET_URL = "postgresql+psycopg://jobq:pa55-w0rd-xyz@127.0.0.1:9/jobq"


def test_the_database_password_is_never_shown() -> None:
    app = create_app(SECRET_URL, token=TOKEN)
    with TestClient(app, headers={"accept": "text/html"}) as client:
        page = client.get("/login").text
        assert "127.0.0.1" in page and "pa55-w0rd-xyz" not in page
    app.state.counts.stop()


def test_an_unreachable_database_is_a_503_page() -> None:
    app = create_app(SECRET_URL)
    with TestClient(app, headers={"accept": "text/html"}) as client:
        for path in ["/tasks", "/cron", "/tasks/1"]:
            answer = client.get(path)
            assert answer.status_code == 503, path
            assert 'id="unavailable"' in answer.text and "pa55-w0rd-xyz" not in answer.text
    app.state.counts.stop()


def test_it_mounts_inside_another_application(store: jobq.Store, rows: Rows) -> None:
    dashboard = create_app(store)
    host = Starlette(routes=[Mount("/ops/jobq", app=dashboard)])
    with TestClient(host, headers={"accept": "text/html"}) as client:
        page = client.get("/ops/jobq/tasks")
        assert page.status_code == 200
        assert f'href="/ops/jobq/tasks/{rows.done}"' in page.text
        assert 'href="/ops/jobq/static/app.css"' in page.text
        assert client.get("/ops/jobq/static/app.js").status_code == 200
        csrf = csrf_of(client, "/ops/jobq/queues")
        answer = client.post(
            f"/ops/jobq/tasks/{rows.failed}/retry", data={"csrf": csrf}, follow_redirects=False
        )
        assert answer.headers["location"] == f"/ops/jobq/tasks/{rows.failed}"
        assert store.get(rows.failed).status is Status.QUEUED  # type: ignore[union-attr]
    dashboard.state.counts.stop()
