"""The dashboard's pages (GET handlers): each reads what it shows in a worker thread,
through bounded queries only (see queries.py and jobq.observe.counting), then renders a template."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from jobq.core.live_workers import LiveWorker
from jobq.db.tasks import Status
from jobq.limits import FairShare, Limit
from jobq.locks import Lease, list_locks
from jobq.observe.counting import ACTIVE_PART, FINISHED_PART
from jobq.upkeep import UPKEEP_LOCK
from jobq.web.chart import Chart, chart
from jobq.web.queries import (
    MINUTES,
    busy_slots,
    database_now,
    parse_filters,
    task_page,
    throughput,
    upkeep_lease,
)
from jobq.web.task_rows import running_tasks
from jobq.web.views import render

if TYPE_CHECKING:
    from jobq.app.store import Store
    from jobq.observe.counting import BackgroundCounts


@dataclass
class QueueRow:
    """One queue as the overview and the queues page show it."""

    name: str
    queued: int = 0
    running: int = 0
    retrying: int = 0  # failed, with retries left
    done: int | None = None  # None: the finished rows are not counted yet
    failed: int | None = None  # failed for good
    cancelled: int | None = None
    oldest: float | None = None  # seconds the longest-due waiting task has waited
    paused: bool = False
    limit: Limit | None = None
    usage: tuple[int, int] | None = None  # (running, starts within the rate's period)
    fair: FairShare | None = None  # a fair queue's setting
    fair_keys: int = 0  # a fair queue's keys with work (as last counted)
    workers: list[str] = field(default_factory=list)
    chart: Chart | None = None


def _store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def _counts(request: Request) -> BackgroundCounts:
    counts: BackgroundCounts = request.app.state.counts
    return counts


def _queue_rows(
    store: Store, counts: BackgroundCounts, workers: list[LiveWorker], *, with_limits: bool
) -> tuple[list[QueueRow], dict[str, Any]]:
    """Every queue with tasks, a pause, a limit or a live worker naming it (of
    ``workers``), and the counts' ages: the overview's and the queues page's table."""
    active, finished = counts.active(), counts.finished()
    paused = set(store.paused_queues())
    limits = store.limits() if with_limits else {}
    usage = store.limit_usage() if with_limits else {}
    fair = store.fair_queues.shares() if with_limits else {}
    live = [worker for worker in workers if worker.alive]
    names = set(paused) | set(limits) | set(fair)
    names |= {queue for worker in live for queue in worker.queues or ()}
    for snapshot in (active, finished):
        if snapshot is not None:
            names |= {queue for queue, _ in snapshot.tasks}
    rows = []
    for name in sorted(names):
        row = QueueRow(name, paused=name in paused, limit=limits.get(name), usage=usage.get(name))
        row.fair = fair.get(name)
        if active is not None:
            row.fair_keys = active.fair_keys.get(name, 0)
            row.queued = active.tasks.get((name, Status.QUEUED.value), 0)
            row.running = active.tasks.get((name, Status.IN_PROGRESS.value), 0)
            row.retrying = active.tasks.get((name, Status.FAILED.value), 0)
            row.oldest = active.oldest.get(name)
        if finished is not None:
            row.done = finished.tasks.get((name, Status.DONE.value), 0)
            row.failed = finished.tasks.get((name, Status.FAILED.value), 0)
            row.cancelled = finished.tasks.get((name, Status.CANCELLED.value), 0)
        row.workers = [w.worker_id for w in live if w.queues is None or name in w.queues]
        rows.append(row)
    ages = {
        "active_age": None if active is None else active.age(),
        "finished_age": None if finished is None else finished.age(),
        "active_error": counts.error(ACTIVE_PART),
        "finished_error": counts.error(FINISHED_PART),
    }
    return rows, ages


def _overview(store: Store, counts: BackgroundCounts) -> dict[str, Any]:
    workers = store.live_workers()
    rows, ages = _queue_rows(store, counts, workers, with_limits=False)
    rate = throughput(store)
    names = {row.name for row in rows}
    for name in rate.queues():
        if name not in names:
            rows.append(QueueRow(name))
    rows.sort(key=lambda row: row.name)
    for row in rows:
        done = rate.done.get(row.name, [0] * MINUTES)
        failed = rate.failed.get(row.name, [0] * MINUTES)
        row.chart = chart(done, failed, rate.now, width=180, height=28)
    busy = busy_slots(store)
    return {
        "queues": rows,
        "total_chart": chart(
            rate.total("done"), rate.total("failed"), rate.now, width=720, height=120
        ),
        "workers": workers,
        "busy": busy,
        "slots": sum(w.concurrency for w in workers if w.alive),
        "busy_total": sum(busy.get(w.worker_id, 0) for w in workers if w.alive),
        "now": rate.now,
        **ages,
    }


async def overview(request: Request) -> Response:
    """/: per queue its counts, the last hour's throughput, its oldest waiting task; the
    live workers and their busy slots."""
    data = await run_in_threadpool(_overview, _store(request), _counts(request))
    return render(request, "overview.html", {"page": "overview", **data})


async def task_list(request: Request) -> Response:
    """/tasks: filtered by queue, status and name, newest first, ``?before=<id>`` pages;
    ``?id=<n>`` goes to task n."""
    query = request.query_params
    wanted = query.get("id", "").strip()
    base = request.scope.get("root_path", "")
    if wanted:
        if task_id_in(wanted) is not None:
            return RedirectResponse(f"{base}/tasks/{int(wanted)}", status_code=303)
        problems = [f"{wanted!r} is not a task id"]
    else:
        problems = []
    filters, more = parse_filters(
        query.get("queue", ""), query.get("status", ""), query.get("name", "")
    )
    problems += more
    before_text = query.get("before", "").strip()
    before = task_id_in(before_text)
    if before_text and before is None:
        problems.append(f"{before_text!r} is not a task id")
    found = await run_in_threadpool(task_page, _store(request), filters, before)
    context = {
        "page": "tasks",
        "filters": filters,
        "result": found,
        "problems": problems,
        "statuses": [s.value for s in Status],
        "now": found.now,
        "bulk_actions": not request.app.state.read_only,
    }
    return render(request, "tasks.html", context)


def task_id_in(text: str) -> int | None:
    """The task id ``text`` spells in ASCII digits (1 to 2**63 - 1), else None."""
    if not re.fullmatch(r"[0-9]{1,19}", text):
        return None
    value = int(text)
    return value if 0 < value < 2**63 else None


def _queues(store: Store, counts: BackgroundCounts) -> dict[str, Any]:
    rows, ages = _queue_rows(store, counts, store.live_workers(), with_limits=True)
    return {"queues": rows, **ages}


async def queues(request: Request) -> Response:
    """/queues: each queue's counts, pause, limit and its use; pause, resume, retry failed."""
    data = await run_in_threadpool(_queues, _store(request), _counts(request))
    return render(request, "queues.html", {"page": "queues", **data})


def _cron(store: Store) -> dict[str, Any]:
    return {"schedules": store.schedules(), "now": database_now(store)}


async def cron(request: Request) -> Response:
    """/cron: every schedule, its next and last run and last status; enable, disable, run."""
    data = await run_in_threadpool(_cron, _store(request))
    return render(request, "cron.html", {"page": "cron", **data})


def _locks(store: Store) -> dict[str, Any]:
    """The locks users hold, apart from the upkeep lease (jobq's own: see jobq.upkeep),
    shown by itself with its holder, the worker id, once."""
    found = list_locks(store)
    users = [lock for lock in found if not (lock.kind == Lease.kind and lock.name == UPKEEP_LOCK)]
    return {"locks": users, "upkeep": upkeep_lease(store), "now": database_now(store)}


async def locks(request: Request) -> Response:
    """/locks: held mutexes, timeout locks, leases and running tasks' lock keys; release.
    The upkeep lease is shown apart, without a button: it is no user's lock."""
    data = await run_in_threadpool(_locks, _store(request))
    return render(request, "locks.html", {"page": "locks", **data})


def _workers(store: Store) -> dict[str, Any]:
    registered = store.live_workers()
    running, now = running_tasks(store)
    known = {worker.worker_id for worker in registered}
    unregistered = sorted(worker_id for worker_id in running if worker_id not in known)
    return {"workers": registered, "unregistered": unregistered, "running": running, "now": now}


async def workers(request: Request) -> Response:
    """/workers: every registered worker, its busy slots and the tasks it runs now."""
    data = await run_in_threadpool(_workers, _store(request))
    return render(request, "workers.html", {"page": "workers", **data})
