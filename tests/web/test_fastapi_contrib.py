"""jobq.contrib.fastapi in real FastAPI and Starlette applications, on every database.

The lifespan checks the database at startup and disposes of the Store at shutdown; the
dependency gives handlers the App; the dashboard, mounted under a prefix behind the
application's own check, renders its links under the prefix and keeps its CSRF checks.
Requests go through the whole ASGI application (Starlette's TestClient runs its lifespan).
"""

from __future__ import annotations

import base64
import secrets
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi import Depends, FastAPI, HTTPException, Request
from starlette.applications import Starlette
from starlette.responses import JSONResponse, RedirectResponse
from starlette.routing import Route

import jobq
from jobq.contrib.fastapi import JobqApp, NoJobqApp, get_app, guard_dashboard, jobq_lifespan
from jobq.web import create_app
from tests.web.conftest import CSRF

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Starlette asks for httpx2; httpx works the same here
    from starlette.testclient import TestClient

ADMIN = ("ada", "correct horse")


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"authorization": f"Basic {token}"}


def require_admin(request: Request) -> str:
    """The application's own check: HTTP Basic, the admin only. Its user name."""
    scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        raise HTTPException(401, "sign in", headers={"www-authenticate": "Basic"})
    user, _, password = base64.b64decode(encoded).decode().partition(":")
    if user != ADMIN[0] or not secrets.compare_digest(password, ADMIN[1]):
        raise HTTPException(403, "admins only")
    return user


def service(app: jobq.App, **lifespan: Any) -> FastAPI:
    """A FastAPI application with a task enqueued by a handler through JobqApp."""

    @app.task(queue="fastapi")
    def double(n: int) -> int:
        return 2 * n

    api = FastAPI(lifespan=jobq_lifespan(app, **lifespan))

    @api.post("/double/{n}")
    async def enqueue(n: int, jobq_app: JobqApp) -> dict[str, Any]:
        handle = await double.enqueue_async(n=n)
        return {"id": handle.id, "same_app": jobq_app is app}

    return api


def disposals(app: jobq.App) -> list[str]:
    """A list each disposal of ``app``'s Store appends to."""
    seen: list[str] = []
    app.store.on_dispose.append(lambda: seen.append("disposed"))
    return seen


def test_a_handler_enqueues_into_the_app_of_the_lifespan_which_disposes_of_it(
    app: jobq.App,
) -> None:
    disposed = disposals(app)
    with TestClient(service(app)) as client:
        answer = client.post("/double/21")
        assert answer.status_code == 200, answer.text
        assert answer.json()["same_app"] is True
        task = app.store.get(answer.json()["id"])
        assert task is not None and (task.name, task.args, task.queue_id) == (
            "double", {"n": 21}, "fastapi",
        )  # fmt: skip
        assert disposed == []
    assert disposed == ["disposed"]


def test_startup_fails_with_jobqs_error_on_a_database_not_migrated(empty_url: str) -> None:
    app = jobq.App(empty_url)
    disposed = disposals(app)
    with pytest.raises(jobq.SchemaNotMigrated), TestClient(service(app)):
        pass
    assert disposed == ["disposed"]


def test_startup_fails_on_a_sqlite_file_that_is_not_there_and_makes_none(tmp_path: Path) -> None:
    app = jobq.App(f"sqlite:///{tmp_path / 'typo.db'}")
    with pytest.raises(jobq.DatabaseNotFound), TestClient(service(app)):
        pass
    assert not (tmp_path / "typo.db").exists()


def test_startup_fails_on_a_server_that_does_not_answer() -> None:
    app = jobq.App("postgres://jobq:s3cret@127.0.0.1:1/app")  # nothing listens on port 1
    with pytest.raises(jobq.DatabaseUnavailable) as raised, TestClient(service(app)):
        pass
    assert "s3cret" not in str(raised.value)


def test_the_applications_own_lifespan_runs_inside_and_keeps_its_state(app: jobq.App) -> None:
    events = disposals(app)

    @asynccontextmanager
    async def own(api: FastAPI) -> AsyncIterator[dict[str, Any]]:
        events.append("own started")
        yield {"greeting": "hello"}
        events.append("own ended")

    api = service(app, lifespan=own)

    @api.get("/greeting")
    async def greeting(request: Request, jobq_app: JobqApp) -> dict[str, str]:
        return {"greeting": request.state.greeting, "url": str(jobq_app.store.engine.url)}

    with TestClient(api) as client:
        assert client.get("/greeting").json()["greeting"] == "hello"
        assert events == ["own started"]
    assert events == ["own started", "own ended", "disposed"]


def test_without_the_lifespan_a_handler_asking_for_the_app_fails_clearly() -> None:
    api = FastAPI()

    @api.get("/")
    async def index(jobq_app: JobqApp) -> None: ...

    with TestClient(api, raise_server_exceptions=True) as client, pytest.raises(NoJobqApp):
        client.get("/")


def test_a_starlette_application_gets_the_app_from_its_requests(app: jobq.App) -> None:
    @app.task
    def note(text: str) -> None: ...

    async def enqueue(request: Request) -> JSONResponse:
        handle = await get_app(request).enqueue_async("note", {"text": "hi"})
        return JSONResponse({"id": handle.id})

    web = Starlette(routes=[Route("/", enqueue, methods=["POST"])], lifespan=jobq_lifespan(app))
    with TestClient(web) as client:
        task = app.store.get(client.post("/").json()["id"])
        assert task is not None and task.args == {"text": "hi"}


def test_dependency_overrides_give_a_handler_another_app(app: jobq.App, tmp_path: Path) -> None:
    other = jobq.App(f"sqlite:///{tmp_path / 'other.db'}")
    api = service(app)
    api.dependency_overrides[get_app] = lambda: other

    @api.get("/which")
    async def which(jobq_app: JobqApp) -> dict[str, bool]:
        return {"other": jobq_app is other}

    with TestClient(api) as client:
        assert client.get("/which").json() == {"other": True}


# --- the dashboard under a prefix, behind the application's own check --------------------


def admin_api(store: jobq.Store) -> tuple[FastAPI, Starlette]:
    """An application whose dashboard is at /admin/jobq behind require_admin; the board."""
    app = jobq.App()
    app.store = store
    board = create_app(store)
    api = FastAPI(lifespan=jobq_lifespan(app, dashboard=board))
    api.mount("/admin/jobq", guard_dashboard(board, allow=require_admin))

    @api.get("/me")
    def me(user: str = Depends(require_admin)) -> dict[str, str]:
        return {"user": user}

    return api, board


@pytest.fixture
def admin_site(store: jobq.Store) -> Iterator[TestClient]:
    """A client of admin_api's application."""
    api, _ = admin_api(store)
    with TestClient(api, headers={"accept": "text/html"}) as client:
        yield client


def test_the_dashboard_refuses_whom_the_applications_check_refuses(
    admin_site: TestClient,
) -> None:
    client = admin_site
    anonymous = client.get("/admin/jobq/queues")
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"] == "Basic"
    assert client.get("/admin/jobq/queues", headers=basic("eve", "guess")).status_code == 403
    # The same check guards the application's own routes.
    assert client.get("/me", headers=basic(*ADMIN)).json() == {"user": "ada"}
    assert client.get("/me").status_code == 401


def test_the_admin_sees_pages_whose_links_stay_under_the_prefix(
    admin_site: TestClient,
) -> None:
    client = admin_site
    page = client.get("/admin/jobq/queues", headers=basic(*ADMIN))
    assert page.status_code == 200, page.text
    assert 'href="/admin/jobq/tasks"' in page.text
    assert 'href="/tasks"' not in page.text
    assert client.get("/admin/jobq/static/app.css", headers=basic(*ADMIN)).status_code == 200


def test_an_action_needs_the_dashboards_csrf_token_as_well_as_the_check(
    admin_site: TestClient, store: jobq.Store
) -> None:
    client = admin_site
    admin = basic(*ADMIN)
    fields = {"queue": "mail", "confirm": "yes"}
    page = client.get("/admin/jobq/queues", headers=admin)
    found = CSRF.search(page.text)
    assert found, "no CSRF token on the page"
    token = found.group(1)

    anonymous = client.post("/admin/jobq/queues/pause", data={**fields, "csrf": token})
    assert anonymous.status_code == 401
    forged = client.post("/admin/jobq/queues/pause", data=fields, headers=admin)
    assert forged.status_code == 403 and "CSRF" in forged.text
    assert store.paused_queues() == []

    done = client.post(
        "/admin/jobq/queues/pause", data={**fields, "csrf": token}, headers=admin,
        follow_redirects=False,
    )  # fmt: skip
    assert done.status_code == 303, done.text
    assert done.headers["location"].startswith("/admin/jobq/queues")
    assert store.paused_queues() == ["mail"]


def test_the_lifespan_stops_the_mounted_dashboards_counts(store: jobq.Store) -> None:
    api, board = admin_api(store)
    with TestClient(api, headers={"accept": "text/html"}) as client:
        assert client.get("/admin/jobq/", headers=basic(*ADMIN)).status_code == 200
        threads = board.state.counts._threads
        assert threads and all(thread.is_alive() for thread in threads)
    assert not any(thread.is_alive() for thread in threads)


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_check_may_answer_with_a_response_or_be_a_coroutine(store: jobq.Store) -> None:
    async def signed_in(request: Request) -> Any:
        if request.cookies.get("user") == "ada":
            return True
        return RedirectResponse("/login", status_code=303)

    web = Starlette()
    web.mount("/jobq", guard_dashboard(create_app(store), allow=signed_in))
    with TestClient(web, headers={"accept": "text/html"}) as client:
        refused = client.get("/jobq/", follow_redirects=False)
        assert (refused.status_code, refused.headers["location"]) == (303, "/login")
        client.cookies.set("user", "ada")
        assert client.get("/jobq/").status_code == 200

    def says_no(_request: Request) -> bool:
        return False

    web = Starlette()
    web.mount("/jobq", guard_dashboard(create_app(store), allow=says_no))
    with TestClient(web) as client:
        assert client.get("/jobq/").status_code == 403
