"""The rows of one task, of the running tasks and of a workflow, as pages read them: every
column but the large ones whole, those cut by the database (see values.py), and the
database's clock read in the same statement, for the ages the page shows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from jobq.db.tasks import Status, Task, as_utc
from jobq.dialects.schema import status_is, task_edges, tasks
from jobq.web.values import CELL_CHARS, FIELDS, PAGE_CHARS, Shown, clipped, shown

if TYPE_CHECKING:
    from jobq.app.store import Store

c = tasks.c
e = task_edges.c

#: Every column of a task but the ones that may be large (FIELDS).
SMALL_COLUMNS = tuple(column for column in tasks.c if column.name not in FIELDS)
_TIMES = {"run_at", "locked_until", "created_at", "started_at", "finished_at",
          "cancel_requested_at"}  # fmt: skip
#: Characters of a progress report a list reads: a whole report (its message is cut to
#: 1,000 characters when set) fits, so its bar and message can be shown.
PROGRESS_CHARS = 2_000


@dataclass(frozen=True)
class TaskView:
    """One task as its page shows it: the row (its large values left None, progress
    decoded when whole), each large value as shown, and the database's time."""

    task: Task
    values: dict[str, Shown | None]
    now: datetime


def _task_of(row: Any, progress: Shown | None) -> Task:
    """A Task of the small columns of ``row``; args, result and error left empty."""
    values = {column.name: getattr(row, column.name) for column in SMALL_COLUMNS}
    for name in _TIMES:
        values[name] = as_utc(values[name])
    values["status"] = Status(values["status"])
    values["recurring"] = bool(values["recurring"])
    values["awaited"] = bool(values["awaited"])
    decoded = progress.decoded if progress is not None else None
    progress_value = decoded if isinstance(decoded, dict) else None
    return Task(**values, args={}, result=None, error=None, progress=progress_value)


def task_view(store: Store, task_id: int) -> TaskView | None:
    """Task ``task_id`` for its page, each large value cut to PAGE_CHARS; None if absent."""
    dialect = store.dialect
    # An error's end is kept, not its start: a traceback's last line is the exception.
    parts = [
        part
        for name, column in FIELDS.items()
        for part in clipped(dialect, column, PAGE_CHARS, name, end=name == "error")
    ]
    stmt = sa.select(*SMALL_COLUMNS, *parts, dialect.now().label("db_now")).where(c.id == task_id)
    with store.db.unit(read_only=True) as conn:
        row = conn.execute(stmt).first()
    if row is None:
        return None
    values = {name: shown(row, name, PAGE_CHARS, is_json=name != "error") for name in FIELDS}
    now = as_utc(row.db_now)
    assert now is not None
    return TaskView(_task_of(row, values["progress"]), values, now)


@dataclass(frozen=True)
class RunningTask:
    """A running task as the workers page lists it."""

    task: Task
    progress: Shown | None


def running_tasks(store: Store) -> tuple[dict[str, list[RunningTask]], datetime]:
    """The running tasks by the worker id that captured them, each worker's oldest first,
    their progress cut to PROGRESS_CHARS; and the database's time."""
    dialect = store.dialect
    running = sa.and_(dialect.within("jobq_tasks_lease_expiry"), status_is(Status.IN_PROGRESS))
    stmt = (
        sa.select(*SMALL_COLUMNS, *clipped(dialect, c.progress, PROGRESS_CHARS, "progress"))
        .where(running)
        .order_by(c.started_at, c.id)
    )
    with store.db.unit(read_only=True) as conn:
        now = as_utc(conn.execute(sa.select(dialect.now())).scalar_one())
        rows = conn.execute(stmt).all()
    assert now is not None
    by_worker: dict[str, list[RunningTask]] = {}
    for row in rows:
        progress = shown(row, "progress", PROGRESS_CHARS, is_json=True)
        task = _task_of(row, progress)
        by_worker.setdefault(task.locked_by or "", []).append(RunningTask(task, progress))
    return by_worker, now


#: Nodes a workflow page lists at most: a page stays small however large the graph.
WORKFLOW_NODES = 500


@dataclass(frozen=True)
class WorkflowView:
    """A workflow as its page shows it: its first WORKFLOW_NODES nodes in the order they
    were added (each with its error's last characters), how many it has in all, each
    listed node's parents, and the database's time."""

    workflow_id: int
    nodes: list[Any]
    total: int
    parents: dict[int, list[int]]
    statuses: dict[int, str]
    now: datetime


def workflow_view(store: Store, workflow_id: int) -> WorkflowView | None:
    """Workflow ``workflow_id``'s nodes and edges (bounded); None if it has no nodes."""
    dialect = store.dialect
    of_workflow = sa.and_(dialect.within("jobq_tasks_workflow"), c.workflow_id == workflow_id)
    columns = (c.id, c.name, c.queue_id, c.status, c.attempt, c.finished_at, c.started_at)
    stmt = (
        sa.select(*columns, *clipped(dialect, c.error, CELL_CHARS, "error", end=True))
        .where(of_workflow)
        .order_by(c.id)
        .limit(WORKFLOW_NODES)
    )
    count = sa.select(sa.func.count()).where(of_workflow)
    with store.db.unit(read_only=True) as conn:
        now = as_utc(conn.execute(sa.select(dialect.now())).scalar_one())
        nodes = conn.execute(stmt).all()
        if not nodes:
            return None
        total = int(conn.execute(count).scalar_one())
        listed = [node.id for node in nodes]
        edges = conn.execute(
            sa.select(e.child_id, e.parent_id)
            .where(e.child_id.in_(listed))
            .order_by(e.child_id, e.position)
        ).all()
    assert now is not None
    parents: dict[int, list[int]] = {}
    for child_id, parent_id in edges:
        parents.setdefault(child_id, []).append(parent_id)
    statuses = {node.id: node.status for node in nodes}
    return WorkflowView(workflow_id, list(nodes), total, parents, statuses, now)


#: Parents or children a node's page lists at most.
NEIGHBOURS = 200


@dataclass(frozen=True)
class Neighbours:
    """A workflow node's parents (in its ``after=`` order) and children, each an (id,
    name, status) row, the first NEIGHBOURS of each; status None for a parent gone."""

    parents: Sequence[sa.Row[Any, Any, Any]]
    children: Sequence[sa.Row[Any, Any, Any]]


def neighbours(store: Store, task_id: int) -> Neighbours:
    """The parents and children of workflow node ``task_id`` with their statuses."""
    parent = tasks.alias("parent")
    child = tasks.alias("child")
    parents = (
        sa.select(e.parent_id.label("id"), parent.c.name, parent.c.status)
        .select_from(task_edges.outerjoin(parent, parent.c.id == e.parent_id))
        .where(e.child_id == task_id)
        .order_by(e.position)
        .limit(NEIGHBOURS)
    )
    children = (
        sa.select(child.c.id, child.c.name, child.c.status)
        .select_from(task_edges.join(child, child.c.id == e.child_id))
        .where(e.parent_id == task_id)
        .order_by(child.c.id)
        .limit(NEIGHBOURS)
    )
    with store.db.unit(read_only=True) as conn:
        return Neighbours(conn.execute(parents).all(), conn.execute(children).all())
