"""JobqApp: the App of the application's jobq_lifespan, as a FastAPI dependency."""

from __future__ import annotations

from typing import Annotated

from jobq.db.errors import MissingExtra

try:
    from fastapi import Depends
except ImportError:  # pragma: no cover - the extra is installed wherever tests run
    raise MissingExtra(feature="jobq.contrib.fastapi.JobqApp", extra="fastapi") from None

from jobq.app import App
from jobq.contrib.fastapi.lifespan import get_app

#: A handler's parameter ``app: JobqApp`` is the App given to jobq_lifespan; override
#: ``get_app`` in ``dependency_overrides`` to give tests another one.
JobqApp = Annotated[App, Depends(get_app)]
