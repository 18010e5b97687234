"""guard_dashboard: the dashboard behind the application's own authentication.

Mounted in an application, the dashboard (jobq.web.create_app) asks for no token of its
own; a request reaches it only when the application's check lets it in. The dashboard's
CSRF checks of its forms stay on: every POST still needs the session's token.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from jobq.db.errors import MissingExtra

try:
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response
    from starlette.types import ASGIApp, Receive, Scope, Send
except ImportError:  # pragma: no cover - the extra is installed wherever tests run
    raise MissingExtra(feature="jobq.contrib.fastapi", extra="web") from None

#: The scope key holding what the check returned for a request it let in (its user, say).
USER = "jobq.contrib.user"

Check = Callable[[Request], Any]


def guard_dashboard(dashboard: ASGIApp, *, allow: Check) -> ASGIApp:
    """``dashboard`` answering only the requests ``allow`` lets in: mount the result,
    ``api.mount("/admin/jobq", guard_dashboard(board, allow=require_admin))``.

    ``allow(request)`` is a function or coroutine function of the Starlette Request (a
    plain function runs in the thread pool, as FastAPI runs sync dependencies); the
    application's own check, which may read ``request.user`` set by its authentication
    middleware, its cookies or its headers. What it does decides:

    - raises HTTPException (FastAPI's too): that status, detail and headers are the
      answer (401 with ``WWW-Authenticate``, a 303 to a sign-in page...);
    - returns a Response: that is the answer;
    - returns None or False: 403 Forbidden;
    - returns anything else (True, the user): the request goes on to the dashboard, with
      the value in ``request.scope["jobq.contrib.user"]``.

    Give the dashboard no token (``create_app(store)``): this check replaces its sign-in.
    """
    return DashboardGuard(dashboard, allow)


class DashboardGuard:
    """ASGI middleware: guard_dashboard's check before every HTTP request."""

    def __init__(self, app: ASGIApp, allow: Check) -> None:
        self.app = app
        self.allow = allow

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan, websockets: the dashboard has none to guard
            await self.app(scope, receive, send)
            return
        refusal = await self._refusal(Request(scope, receive))
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _refusal(self, request: Request) -> Response | None:
        try:
            verdict = await _call(self.allow, request)
        except HTTPException as error:
            return PlainTextResponse(
                f"{error.status_code} {error.detail}\n",
                status_code=error.status_code,
                headers=error.headers,
            )
        if isinstance(verdict, Response):
            return verdict
        if verdict is None or verdict is False:
            return PlainTextResponse("403 Forbidden\n", status_code=403)
        request.scope[USER] = verdict
        return None


async def _call(check: Check, request: Request) -> Any:
    if inspect.iscoroutinefunction(check) or inspect.iscoroutinefunction(
        getattr(check, "__call__", None)  # noqa: B004 - an object with an async __call__
    ):
        result: Awaitable[Any] = check(request)
        return await result
    return await run_in_threadpool(check, request)
