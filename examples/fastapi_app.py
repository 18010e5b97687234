"""A FastAPI service that hands work to jobq and waits for results without blocking.

    pip install 'jobq[fastapi]'
    jobq migrate --database-url sqlite:///examples-fastapi.db
    EXAMPLE_ADMIN_PASSWORD=secret uvicorn examples.fastapi_app:api     # the service
    jobq worker --app examples.fastapi_app:app                         # runs the tasks

    curl -d '{"text": "to be or not to be"}' -H 'content-type: application/json' \\
        http://127.0.0.1:8000/counts                    # 202 {"id": 1, ...}
    curl 'http://127.0.0.1:8000/counts/1?wait=5'        # 200 {"words": 6, ...}, or 202
    open http://127.0.0.1:8000/admin/jobq/              # the dashboard: user admin

The database is $JOBQ_DATABASE_URL (postgres:// URLs too), else a SQLite file of its own.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

import jobq
from jobq.contrib.fastapi import JobqApp, guard_dashboard, jobq_lifespan
from jobq.web import create_app

app = jobq.App(os.environ.get("JOBQ_DATABASE_URL") or "sqlite:///examples-fastapi.db")


@app.task(queue="counts", retries=1)
def count_words(text: str) -> int:
    return len(text.split())


def require_admin(request: Request) -> str:
    """The service's own authentication: HTTP Basic, user ``admin``, the password in
    $EXAMPLE_ADMIN_PASSWORD (unset: nobody is admin). The user's name."""
    expected = os.environ.get("EXAMPLE_ADMIN_PASSWORD")
    scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
    try:
        user, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        user = password = ""
    if scheme.lower() != "basic" or not expected or user != "admin":
        raise HTTPException(401, "sign in as admin", headers={"www-authenticate": "Basic"})
    if not secrets.compare_digest(password.encode(), expected.encode()):
        raise HTTPException(401, "sign in as admin", headers={"www-authenticate": "Basic"})
    return user


# The dashboard asks for no token of its own: require_admin guards it, and its forms keep
# their CSRF tokens. jobq_lifespan stops its background counts at shutdown.
dashboard = create_app(app.store)
api = FastAPI(lifespan=jobq_lifespan(app, dashboard=dashboard))
api.mount("/admin/jobq", guard_dashboard(dashboard, allow=require_admin))

#: Requests waiting for a result right now (one event loop: no lock needed).
waiting = 0


class Text(BaseModel):
    text: str


@api.post("/counts", status_code=202)
async def enqueue_count(body: Text) -> dict[str, Any]:
    """Enqueue a count; the event loop serves other requests during the write."""
    handle = await count_words.enqueue_async(text=body.text)
    return {"id": handle.id, "result": f"/counts/{handle.id}"}


@api.get("/counts/{task_id}")
async def count_result(
    task_id: int, jobq_app: JobqApp, wait: Annotated[float, Query(ge=0, le=30)] = 10
) -> JSONResponse:
    """The count once done: 200; still waiting or running after ``wait`` seconds: 202."""
    global waiting
    waiting += 1
    try:
        words = await jobq_app.handle(task_id).wait(timeout=wait)
    except jobq.ResultTimeout as timeout:
        return JSONResponse({"id": task_id, "status": timeout.context["status"]}, status_code=202)
    except jobq.TaskNotFound:
        raise HTTPException(404, f"no task {task_id}") from None
    except (jobq.TaskFailed, jobq.TaskCancelled) as error:
        return JSONResponse({"id": task_id, "error": error.context["summary"]}, status_code=500)
    finally:
        waiting -= 1
    return JSONResponse({"id": task_id, "status": "done", "words": words})


@api.get("/health")
async def health() -> dict[str, int]:
    """Alive, and how many requests wait for a result now."""
    return {"waiting": waiting}


@api.get("/me")
def me(user: Annotated[str, Depends(require_admin)]) -> dict[str, str]:
    """The service's own routes use the same check as the dashboard's mount."""
    return {"user": user}
