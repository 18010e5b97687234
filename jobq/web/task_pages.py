"""The pages of one task and of one workflow, and the downloads of a task's whole values.

Each reads its rows in a worker thread through task_rows.py, whose queries cut the large
values in the database; a download sends one value whole, as a JSON file, never a page.
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from jobq.app.store import Store
from jobq.db.errors import TaskNotFound
from jobq.db.tasks import Status, Task
from jobq.web.task_rows import neighbours, task_view, workflow_view
from jobq.web.values import FIELDS, whole_value
from jobq.web.views import render

#: The largest id a task or workflow can have (a signed 64-bit key).
LARGEST_ID = 2**63 - 1


def _store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def _task(store: Store, task_id: int) -> dict[str, Any] | None:
    view = task_view(store, task_id)
    if view is None:
        return None
    try:
        explanation = store.explain(task_id)
    except TaskNotFound:  # deleted (pruned) between the two reads
        return None
    related = neighbours(store, task_id) if view.task.workflow_id is not None else None
    return {
        "task": view.task,
        "values": view.values,
        "now": view.now,
        "why": explanation,
        "related": related,
    }


def _missing(request: Request, what: str) -> Response:
    return render(request, "missing.html", {"page": "tasks", "what": what}, status_code=404)


async def task_detail(request: Request) -> Response:
    """/tasks/<id>: everything stored about one task (each large value cut, with a link
    to the whole), why it is or is not running, and a workflow node's neighbours."""
    task_id: int = request.path_params["task_id"]
    data = None
    if 0 < task_id <= LARGEST_ID:
        data = await run_in_threadpool(_task, _store(request), task_id)
    if data is None:
        return _missing(request, f"task {task_id}")
    task = data["task"]
    retryable = task.status in (Status.FAILED, Status.CANCELLED) and not task.recurring
    context = {"page": "tasks", **data, "cancellable": _cancellable(task), "retryable": retryable}
    return render(request, "task.html", context)


def _cancellable(task: Task) -> bool:
    """Whether Store.cancel would act on ``task`` (a request, for a running one)."""
    if task.recurring:
        return False
    if task.status is Status.FAILED:
        return task.retries_left > 0
    if task.status is Status.IN_PROGRESS:
        return task.cancel_requested_at is None
    return task.status in (Status.QUEUED, Status.BLOCKED)


async def task_value(request: Request) -> Response:
    """/tasks/<id>/values/<name>: value ``name`` (args, result, error, progress) of a task
    whole, as a JSON file to download; 404 for no such task or an empty value."""
    task_id: int = request.path_params["task_id"]
    name: str = request.path_params["name"]
    if name not in FIELDS:
        return PlainTextResponse(
            f"404 Not Found: a task has no value {name!r} (one of: {', '.join(FIELDS)})\n",
            status_code=404,
        )
    found, body = False, None
    if 0 < task_id <= LARGEST_ID:
        found, body = await run_in_threadpool(whole_value, _store(request), task_id, name)
    if not found or body is None:
        what = f"task {task_id}" if not found else f"{name} of task {task_id}"
        return PlainTextResponse(f"404 Not Found: there is no {what}\n", status_code=404)
    filename = f"task-{task_id}-{name}.json"
    headers = {"content-disposition": f'attachment; filename="{filename}"'}
    return Response(body, media_type="application/json", headers=headers)


async def workflow_page(request: Request) -> Response:
    """/workflows/<id>: the graph `jobq workflow show` prints: each node, its status, the
    nodes it runs after with theirs, and its error's last line; then a count by status."""
    workflow_id: int = request.path_params["workflow_id"]
    view = None
    if 0 < workflow_id <= LARGEST_ID:
        view = await run_in_threadpool(workflow_view, _store(request), workflow_id)
    if view is None:
        return _missing(request, f"workflow {workflow_id}")
    counts: dict[str, int] = {}
    for node in view.nodes:
        counts[node.status] = counts.get(node.status, 0) + 1
    by_status = [(s.value, counts[s.value]) for s in Status if counts.get(s.value)]
    context = {"page": "tasks", "workflow": view, "now": view.now, "by_status": by_status}
    return render(request, "workflow.html", context)
