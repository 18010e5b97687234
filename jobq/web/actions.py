"""The dashboard's actions (POST handlers): retry and cancel a task, retry a queue's failed
tasks, pause and resume a queue, enable, disable and run a schedule, release a lock.

Every action is refused (403) in read-only mode and without the session's CSRF token
(unless sent with the Bearer token). A destructive one (cancel, pause, retry failed,
disable, release) acts only when the form says ``confirm=yes``: the page's script sets it
once confirm() is answered; without the script, the action first answers with a page
asking to confirm, whose button posts again with it (a script sent with the Bearer token
gets 400 instead). Each ends with a redirect (303)
back to the page it came from, and a flash message saying what happened.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from jobq import locks
from jobq.db.errors import JobqError, TaskNotFound
from jobq.web.auth import BEARER, csrf_ok, safe_next
from jobq.web.views import flash, render

if TYPE_CHECKING:
    from jobq.app.store import Store

#: (kind, text) of a flash message: kind is ok or error.
Outcome = tuple[str, str]


@dataclass(frozen=True)
class Action:
    """One POST endpoint: the form fields it reads, the question a destructive one asks
    (None: it acts at once), what it does, and the page it returns to by default."""

    fields: tuple[str, ...]
    question: Callable[[dict[str, Any]], str] | None
    run: Callable[[Store, dict[str, Any]], Outcome]
    back: Callable[[dict[str, Any]], str]
    button: str = "Confirm"


def _retry(store: Store, v: dict[str, Any]) -> Outcome:
    if store.retry(v["task_id"]):
        return "ok", f"Task {v['task_id']} is queued again."
    if store.get(v["task_id"]) is None:
        raise TaskNotFound(id=v["task_id"])
    return "error", (
        f"Task {v['task_id']} was not retried: only a failed or cancelled task can be, and "
        "not while another pending task holds its unique key."
    )


def _cancel(store: Store, v: dict[str, Any]) -> Outcome:
    task = store.get(v["task_id"])
    if not store.cancel(v["task_id"]):
        return "error", f"Task {v['task_id']} was not cancelled: it has ended already."
    if task is not None and task.status == "in_progress":
        return "ok", f"Task {v['task_id']} is running: its worker was asked to cancel it."
    return "ok", f"Task {v['task_id']} is cancelled."


def _retry_failed(store: Store, v: dict[str, Any]) -> Outcome:
    n = store.retry_failed(v["queue"])
    return "ok", f"{n:,} failed task{'' if n == 1 else 's'} of queue {v['queue']!r} queued again."


def _pause(store: Store, v: dict[str, Any]) -> Outcome:
    if store.pause_queue(v["queue"]):
        return "ok", f"Queue {v['queue']!r} is paused: running tasks finish, none start."
    return "ok", f"Queue {v['queue']!r} was paused already."


def _resume(store: Store, v: dict[str, Any]) -> Outcome:
    if store.resume_queue(v["queue"]):
        return "ok", f"Queue {v['queue']!r} is resumed."
    return "ok", f"Queue {v['queue']!r} was not paused."


def _enable(store: Store, v: dict[str, Any]) -> Outcome:
    store.set_schedule_enabled(v["name"], True)
    return "ok", f"Schedule {v['name']!r} is enabled: it runs from its next tick."


def _disable(store: Store, v: dict[str, Any]) -> Outcome:
    store.set_schedule_enabled(v["name"], False)
    return "ok", f"Schedule {v['name']!r} is disabled (a run under way finishes)."


def _run_now(store: Store, v: dict[str, Any]) -> Outcome:
    task_id = store.run_schedule_now(v["name"])
    return "ok", f"Task {task_id} enqueued: a run of schedule {v['name']!r}."


def _release(store: Store, v: dict[str, Any]) -> Outcome:
    if locks.release(store, v["name"]):
        return "ok", f"Lock {v['name']!r} is released."
    if any(key == v["name"] for key, *_ in store.running_lock_keys()):
        return (
            "error",
            f"{v['name']!r} is a running task's lock key: it is freed when the run ends.",
        )
    return "error", f"No held lock is named {v['name']!r}."


def _task_page(v: dict[str, Any]) -> str:
    return f"/tasks/{v['task_id']}"


ACTIONS: dict[str, Action] = {
    "retry": Action((), None, _retry, _task_page),
    "cancel": Action(
        (),
        lambda v: f"Cancel task {v['task_id']}? A running task is asked to stop.",
        _cancel,
        _task_page,
        "Cancel the task",
    ),
    "retry_failed": Action(
        ("queue",),
        lambda v: f"Queue every failed task of queue {v['queue']!r} again?",
        _retry_failed,
        lambda v: "/queues",
        "Retry failed tasks",
    ),
    "pause": Action(
        ("queue",),
        lambda v: f"Pause queue {v['queue']!r}? Workers stop taking its tasks.",
        _pause,
        lambda v: "/queues",
        "Pause the queue",
    ),
    "resume": Action(("queue",), None, _resume, lambda v: "/queues"),
    "enable": Action(("name",), None, _enable, lambda v: "/cron"),
    "disable": Action(
        ("name",),
        lambda v: f"Disable schedule {v['name']!r}? It stops running until enabled again.",
        _disable,
        lambda v: "/cron",
        "Disable the schedule",
    ),
    "run_now": Action(("name",), None, _run_now, lambda v: "/cron"),
    "release": Action(
        ("name",),
        lambda v: f"Release lock {v['name']!r}, whoever holds it?",
        _release,
        lambda v: "/locks",
        "Release the lock",
    ),
}


def forbidden(reason: str) -> Response:
    """403 with ``reason`` in plain text."""
    return PlainTextResponse(f"403 Forbidden: {reason}\n", status_code=403)


def endpoint(name: str) -> Callable[[Request], Any]:
    """The POST handler of action ``name``."""
    action = ACTIONS[name]

    async def handle(request: Request) -> Response:
        if request.app.state.read_only:
            return forbidden("the dashboard is read-only")
        form = await request.form()
        if not csrf_ok(request, form):
            return forbidden("missing or wrong CSRF token; reload the page and try again")
        values: dict[str, Any] = {
            field: str(form.get(field) or "").strip() for field in action.fields
        }
        values.update(request.path_params)
        missing = [field for field in action.fields if not values[field]]
        if missing:
            return PlainTextResponse(
                f"400 Bad Request: {missing[0]} is required\n", status_code=400
            )
        target = safe_next(str(form.get("next") or "")) if form.get("next") else action.back(values)
        if action.question is not None and form.get("confirm") != "yes":
            if request.scope.get(BEARER):  # a script: no page to answer, so say what is missing
                return PlainTextResponse(
                    f"400 Bad Request: {action.question(values)} Send confirm=yes.\n",
                    status_code=400,
                )
            context = {
                "page": "",
                "question": action.question(values),
                "action": request.url.path,
                "values": {k: v for k, v in values.items() if k in action.fields},
                "next": target,
                "button": action.button,
            }
            return render(request, "confirm.html", context)
        store = request.app.state.store
        try:
            kind, text = await run_in_threadpool(action.run, store, values)
        except TaskNotFound as error:
            return render(
                request,
                "missing.html",
                {"page": "tasks", "what": f"task {error.context['id']}"},
                status_code=404,
            )
        except JobqError as error:  # an unknown schedule, a name too long: said, not raised
            kind, text = "error", str(error)
        flash(request, text, kind)
        base = request.scope.get("root_path", "")
        return RedirectResponse(base + target, status_code=303)

    handle.__name__ = f"action_{name}"
    handle.__doc__ = f"POST: the {name.replace('_', ' ')} action."
    return handle


#: Tasks one bulk action takes at most: a page of the list holds 50.
BULK_LIMIT = 500
#: The bulk actions, by the form's ``do``: what each does to one task.
BULK = {"retry": "retried", "cancel": "cancelled"}


def _bulk(store: Store, action: str, ids: list[int]) -> Outcome:
    """``action`` (retry or cancel, as the task page's buttons do) on each of ``ids``,
    each in its own transaction; a flash message counting what was done and what not."""
    done: list[int] = []
    not_done: list[int] = []
    gone: list[int] = []
    for task_id in ids:
        try:
            acted = store.retry(task_id) if action == "retry" else store.cancel(task_id)
        except TaskNotFound:
            gone.append(task_id)
            continue
        (done if acted else not_done).append(task_id)
    parts = [f"{len(done):,} task{'' if len(done) == 1 else 's'} {BULK[action]}"]
    if not_done:
        # Store.retry says False for a task that is gone too; Store.cancel raises for one.
        why = "not failed or cancelled, or gone" if action == "retry" else "ended already"
        parts.append(f"{len(not_done):,} not ({why}): {_ids(not_done)}")
    if gone:
        parts.append(f"{len(gone):,} gone: {_ids(gone)}")
    return ("ok" if not not_done and not gone else "error"), "; ".join(parts) + "."


def _ids(ids: list[int]) -> str:
    shown = ", ".join(str(task_id) for task_id in ids[:10])
    return shown + (f" and {len(ids) - 10:,} more" if len(ids) > 10 else "")


async def bulk(request: Request) -> Response:
    """POST /tasks/bulk: retry or cancel (``do``) the tasks whose ids the form's ``id``
    fields name (the task list's check boxes); a cancel asks to confirm first."""
    if request.app.state.read_only:
        return forbidden("the dashboard is read-only")
    form = await request.form()
    if not csrf_ok(request, form):
        return forbidden("missing or wrong CSRF token; reload the page and try again")
    action = str(form.get("do") or "")
    if action not in BULK:
        return PlainTextResponse(
            f"400 Bad Request: do must be one of {', '.join(BULK)}, not {action!r}\n",
            status_code=400,
        )
    texts = [str(value).strip() for value in form.getlist("id")]
    wrong = [text for text in texts if not text.isascii() or not text.isdigit()
             or not 0 < int(text) < 2**63]  # fmt: skip
    if wrong:
        return PlainTextResponse(
            f"400 Bad Request: {wrong[0][:40]!r} is not a task id\n", status_code=400
        )
    ids = list(dict.fromkeys(int(text) for text in texts))
    if len(ids) > BULK_LIMIT:
        return PlainTextResponse(
            f"400 Bad Request: at most {BULK_LIMIT} tasks at once, not {len(ids):,}\n",
            status_code=400,
        )
    target = safe_next(str(form.get("next") or "")) if form.get("next") else "/tasks"
    base = request.scope.get("root_path", "")
    if not ids:
        flash(request, "No task was selected.", "error")
        return RedirectResponse(base + target, status_code=303)
    if action == "cancel" and form.get("confirm") != "yes":
        question = f"Cancel {len(ids):,} task{'' if len(ids) == 1 else 's'}: {_ids(ids)}?"
        if request.scope.get(BEARER):
            return PlainTextResponse(
                f"400 Bad Request: {question} Send confirm=yes.\n", status_code=400
            )
        context = {
            "page": "",
            "question": question + " Running ones are asked to stop.",
            "action": request.url.path,
            "values": {"do": action},
            "many": {"id": ids},
            "next": target,
            "button": "Cancel the tasks",
        }
        return render(request, "confirm.html", context)
    kind, text = await run_in_threadpool(_bulk, request.app.state.store, action, ids)
    flash(request, text, kind)
    return RedirectResponse(base + target, status_code=303)
