"""jobq in FastAPI and Starlette applications (extra jobq[fastapi]; Starlette alone: jobq[web]).

- lifespan.py: ``jobq_lifespan(app)``, the application's lifespan: it checks at startup
  that the App's database is reachable and migrated (startup fails with jobq's error
  otherwise), runs a mounted dashboard's own lifespan, composes with the application's
  own lifespan, and disposes of the App's Store at shutdown.
- dependencies.py: ``get_app`` (a FastAPI dependency, or a plain function of a Starlette
  request) and ``JobqApp = Annotated[jobq.App, Depends(get_app)]``: handlers get the App
  the lifespan opened, and enqueue with ``await task.enqueue_async(...)`` or wait with
  ``await handle.wait(timeout=...)`` without blocking the event loop.
- dashboard.py: ``guard_dashboard(dashboard, allow=...)``: the dashboard (jobq.web) behind
  the application's own authentication, to mount under a prefix; its CSRF checks stay on.

Only Starlette is needed for jobq_lifespan, get_app and guard_dashboard; ``JobqApp`` needs
FastAPI and is imported on first use.
"""

from __future__ import annotations

from typing import Any

from jobq.contrib.fastapi.dashboard import guard_dashboard
from jobq.contrib.fastapi.lifespan import NoJobqApp, get_app, jobq_lifespan

__all__ = ["JobqApp", "NoJobqApp", "get_app", "guard_dashboard", "jobq_lifespan"]


def __getattr__(name: str) -> Any:
    if name == "JobqApp":  # imports FastAPI: MissingExtra without jobq[fastapi]
        from jobq.contrib.fastapi.dependencies import JobqApp

        return JobqApp
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
