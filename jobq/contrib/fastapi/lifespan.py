"""jobq_lifespan: the App's Store opened (checked) with the application, disposed with it.

The App travels in the lifespan's state (Starlette copies it into every request's
``request.state``), so get_app finds it in any handler, mounted applications' included.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any, TypeVar

from jobq.db.errors import MissingExtra

try:
    from starlette.applications import Starlette
    from starlette.requests import HTTPConnection
except ImportError:  # pragma: no cover - the extra is installed wherever tests run
    raise MissingExtra(feature="jobq.contrib.fastapi", extra="web") from None

from jobq.app import App

#: The key of the lifespan's state holding the App.
STATE_KEY = "jobq_app"

_A = TypeVar("_A")
Lifespan = Callable[[_A], AbstractAsyncContextManager[Mapping[str, Any] | None]]


class NoJobqApp(RuntimeError):
    """Raised by get_app when the application's lifespan is not jobq_lifespan (or the
    server did not run it)."""


def jobq_lifespan(
    app: App,
    *,
    dashboard: Starlette | None = None,
    lifespan: Lifespan[_A] | None = None,
    check: bool = True,
) -> Callable[[_A], AbstractAsyncContextManager[dict[str, Any]]]:
    """The lifespan of a FastAPI or Starlette application using ``app``:
    ``FastAPI(lifespan=jobq_lifespan(app))``.

    At startup it checks, in a thread, that ``app``'s database is reachable and its schema
    migrated to this jobq's revision: otherwise startup fails with jobq's own error
    (DatabaseUnavailable, DatabaseNotFound, SchemaNotMigrated, SchemaTooNew,
    InvalidDatabaseURL), so a
    server never starts answering on a database it cannot use. Then it runs the
    lifespan of ``dashboard`` (a ``jobq.web.create_app`` mounted in the application:
    mounted apps' lifespans are not run by Starlette) and the application's own
    ``lifespan``, whose state it keeps. At shutdown it ends them in the reverse order
    and disposes of ``app``'s Store (its pooled connections, its waiters' threads).

    Args:
        app: the App whose Store handlers use; ``get_app`` (``JobqApp``) gives it to them.
        dashboard: a dashboard app mounted in this application, whose background counts
            are stopped at shutdown.
        lifespan: the application's own lifespan, run inside this one.
        check: False skips the startup check (the Store is still disposed at shutdown).
    """

    @asynccontextmanager
    async def run(asgi_app: _A) -> AsyncIterator[dict[str, Any]]:
        state: dict[str, Any] = {}
        try:
            if check:
                await asyncio.to_thread(_check, app)
            async with AsyncExitStack() as stack:
                if dashboard is not None:
                    await stack.enter_async_context(dashboard.router.lifespan_context(dashboard))
                if lifespan is not None:
                    own = await stack.enter_async_context(lifespan(asgi_app))
                    state.update(own or {})
                state[STATE_KEY] = app
                yield state
        finally:
            await asyncio.to_thread(app.store.dispose)

    return run


def _check(app: App) -> None:
    """DatabaseNotFound for a SQLite file that is not there (none is made), else
    check_schema's errors."""
    app.store.db.require_existing()
    app.store.check_schema()


def get_app(request: HTTPConnection) -> App:
    """The App of the application's jobq_lifespan: a FastAPI dependency (see JobqApp),
    or a function to call with a Starlette request. NoJobqApp if there is none."""
    found = getattr(request.state, STATE_KEY, None)
    if not isinstance(found, App):
        raise NoJobqApp(
            "no jobq App in this request's state: give the application "
            "lifespan=jobq_lifespan(app), and a server that runs lifespans"
        )
    return found
