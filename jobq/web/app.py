"""create_app: the dashboard as an ASGI application, its routes and its middleware."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from jobq.db.errors import MissingExtra

try:
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.sessions import SessionMiddleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute, Mount, Route
    from starlette.staticfiles import StaticFiles
    from starlette.types import ASGIApp, Receive, Scope, Send
except ImportError:  # pragma: no cover - the extra is installed wherever tests run
    raise MissingExtra(feature="jobq dashboard", extra="web") from None

from jobq.app.store import Store
from jobq.db.errors import DatabaseUnavailable, SchemaNotMigrated
from jobq.db.patience import Deadline, patiently
from jobq.db.urls import safe_url
from jobq.observe.counting import BackgroundCounts
from jobq.web import pages, task_pages
from jobq.web.actions import bulk, endpoint
from jobq.web.auth import COOKIE, SecurityHeaders, SignInRequired, session_secret
from jobq.web.guard import Throttle, proxy_networks
from jobq.web.sessions import SESSION_SECONDS, Sessions
from jobq.web.signin import login_page, login_submit, logout
from jobq.web.views import HERE, render

log = logging.getLogger("jobq.dashboard")

#: Seconds a page waits for a database that cannot be reached (a restart, its pooled
#: sessions ended) before it says so: a fast restart takes well under one.
PAGE_PATIENCE = 5.0


def routes() -> list[BaseRoute]:
    """Every page, action and the static files, by path."""
    post = ["POST"]
    return [
        Route("/", pages.overview, name="overview"),
        Route("/tasks", pages.task_list, name="tasks"),
        Route("/tasks/bulk", bulk, methods=post),
        Route("/tasks/{task_id:int}", task_pages.task_detail, name="task"),
        Route("/tasks/{task_id:int}/values/{name}", task_pages.task_value),
        Route("/workflows/{workflow_id:int}", task_pages.workflow_page, name="workflow"),
        Route("/tasks/{task_id:int}/retry", endpoint("retry"), methods=post),
        Route("/tasks/{task_id:int}/cancel", endpoint("cancel"), methods=post),
        Route("/queues", pages.queues, name="queues"),
        Route("/queues/pause", endpoint("pause"), methods=post),
        Route("/queues/resume", endpoint("resume"), methods=post),
        Route("/queues/retry-failed", endpoint("retry_failed"), methods=post),
        Route("/cron", pages.cron, name="cron"),
        Route("/cron/enable", endpoint("enable"), methods=post),
        Route("/cron/disable", endpoint("disable"), methods=post),
        Route("/cron/run", endpoint("run_now"), methods=post),
        Route("/locks", pages.locks, name="locks"),
        Route("/locks/release", endpoint("release"), methods=post),
        Route("/workers", pages.workers, name="workers"),
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login_submit, methods=post),
        Route("/logout", logout, methods=post),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]


def create_app(
    store_or_url: Store | str,
    *,
    read_only: bool = False,
    token: str | None = None,
    allowed_hosts: Sequence[str] | None = None,
    interval: float = 5.0,
    finished_interval: float = 60.0,
    trusted_proxies: Sequence[str] = (),
    throttle: Throttle | None = None,
) -> Starlette:
    """The dashboard of the jobq database ``store_or_url``, as an ASGI app to serve or to
    mount in a Starlette or FastAPI application.

    ``read_only`` hides every button and refuses every action (403). ``token`` (None or
    empty: no sign-in at all) is asked of every request, as a Bearer header or through
    the sign-in form; a client that keeps sending a wrong one is made to wait (429).
    ``allowed_hosts`` (None: any) are the Host headers answered. ``trusted_proxies``
    (addresses or networks) are the peers whose X-Forwarded-For and X-Forwarded-Proto
    say who the client is and whether it used HTTPS; nobody else's are believed.
    ``throttle`` says how long a client waits after wrong tokens (default: Throttle()).
    Active counts are refreshed every ``interval`` seconds, finished ones every
    ``finished_interval`` (see jobq.observe.counting). A URL given makes a Store the app disposes of
    when its lifespan ends; a Store given stays the caller's.
    """
    if isinstance(store_or_url, Store):
        store, owned = store_or_url, False
    else:
        store, owned = Store(store_or_url), True
    token = token or None
    trusted = proxy_networks(trusted_proxies)  # a bad entry: ValueError naming it
    sessions = Sessions()
    throttle = throttle or Throttle()
    counts = BackgroundCounts(
        store, interval=interval, finished_interval=finished_interval, log=log
    )

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        counts.stop()
        if owned:
            store.dispose()

    # The first is the outermost: headers are added to every answer, even a refusal.
    middleware = [Middleware(SecurityHeaders, trusted=trusted)]
    if allowed_hosts is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)))
    middleware += [
        Middleware(
            SessionMiddleware,
            secret_key=session_secret(token),
            session_cookie=COOKIE,
            max_age=SESSION_SECONDS,
            same_site="lax",
        ),
        Middleware(SignInRequired, token=token, sessions=sessions, throttle=throttle),
        Middleware(PatientPages),
    ]
    app = Starlette(
        routes=routes(),
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={
            DatabaseUnavailable: _database_problem,
            SchemaNotMigrated: _database_problem,
        },
    )
    app.state.store = store
    app.state.counts = counts
    app.state.read_only = read_only
    app.state.token = token
    app.state.sessions = sessions
    app.state.throttle = throttle
    app.state.database_label = safe_url(store.engine.url)
    return app


class PatientPages:
    """ASGI middleware: a page (GET, HEAD) waits out an outage for up to PAGE_PATIENCE
    seconds, its stale pooled connections replaced (jobq.db.patience); an action (POST) is
    not run again, so it stays as it was."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        # run_in_threadpool runs the page's reads in a copy of this context: patient too.
        with patiently(Deadline(PAGE_PATIENCE)):
            await self.app(scope, receive, send)


async def _database_problem(request: Request, error: Any) -> Response:
    """503 with the database's problem (messages never hold credentials)."""
    context = {"page": "", "problem": str(error)}
    return render(request, "unavailable.html", context, status_code=503)
