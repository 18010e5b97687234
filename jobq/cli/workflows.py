"""`jobq workflow show ID` (a workflow's graph and each node's status), and what `jobq
show` says of a workflow node's parents."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from jobq.cli.common import TASK_ID, database_url_option, store_for
from jobq.cli.json_output import dumps
from jobq.cli.output import table
from jobq.db.errors import JobqError, WorkflowNotFound
from jobq.db.tasks import Status, Task

Parents = Sequence[tuple[int, Task | None]]


@click.group()
def workflow() -> None:
    """Workflows: chains, groups, chords and DAGs of tasks."""


@workflow.command("show")
@click.argument("workflow_id", metavar="ID", type=TASK_ID)
@click.option("--json", "as_json", is_flag=True, help="The same as a JSON object.")
@database_url_option
def show_workflow(workflow_id: int, as_json: bool, database_url: str) -> None:
    """Workflow ID's nodes in the order they were added: each one's task id, name,
    status and the nodes it runs after (with theirs), then a count by status.

    ID is the workflow's (WorkflowHandle.id; `jobq show` of a node names it).
    """
    with store_for(database_url, read_only=True) as store:
        nodes = store.workflow_tasks(workflow_id)
        if not nodes:
            raise WorkflowNotFound(id=workflow_id)
        edges = store.workflow_edges(workflow_id)
    after: dict[int, list[int]] = {}
    for child_id, _, parent_id, _ in edges:
        after.setdefault(child_id, []).append(parent_id)
    if as_json:
        click.echo(dumps(_document(workflow_id, nodes, after)))
        return
    statuses = {task.id: task.status.value for task in nodes}
    rows = [
        [
            task.id,
            task.name,
            task.status.value,
            _after_text(after.get(task.id, []), statuses),
            _error_line(task),
        ]
        for task in nodes
    ]
    click.echo(f"workflow {workflow_id}: {len(nodes)} node(s)")
    click.echo(table(["id", "name", "status", "after", "error"], rows))
    counts = {s: sum(1 for t in nodes if t.status is s) for s in Status}
    click.echo("  ".join(f"{s.value} {n}" for s, n in counts.items() if n))


#: Parents a row of `jobq workflow show` names one by one; past that it counts them.
_PARENTS_NAMED = 4


def _after_text(parents: Sequence[int], statuses: dict[int, str]) -> str:
    """A node's parents and their statuses: "12 done, 13 running", or counts for many."""
    if not parents:
        return "-"
    if len(parents) <= _PARENTS_NAMED:
        return ", ".join(f"{p} {statuses.get(p, 'gone')}" for p in parents)
    counts: dict[str, int] = {}
    for p in parents:
        counts[statuses.get(p, "gone")] = counts.get(statuses.get(p, "gone"), 0) + 1
    by_status = ", ".join(f"{n:,} {status}" for status, n in sorted(counts.items()))
    return f"{len(parents):,} parents: {by_status}"


def _document(workflow_id: int, nodes: Sequence[Task], after: dict[int, list[int]]) -> Any:
    return {
        "workflow_id": workflow_id,
        "nodes": [
            {
                "id": task.id,
                "name": task.name,
                "queue": task.queue_id,
                "status": task.status.value,
                "after": after.get(task.id, []),
                "error": _error_line(task) or None,
            }
            for task in nodes
        ],
    }


def _error_line(task: Task) -> str:
    """The last line of a node's error, escaped for a terminal; empty without one."""
    if task.status is Status.DONE or not task.error:
        return ""
    lines = [line.strip() for line in task.error.splitlines() if line.strip()]
    text = lines[-1] if lines else ""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def parents_note(task: Task, parents: Parents) -> str | None:
    """What `jobq show` says of a workflow node's parents, or None for a task with none:
    which it waits for while blocked, else which it ran after."""
    if not parents:
        return None
    said = [
        f"{parent_id} ({'gone' if parent is None else parent.status.value})"
        for parent_id, parent in parents
    ]
    if task.status is Status.BLOCKED:
        waiting = [
            text
            for text, (_, parent) in zip(said, parents, strict=True)
            if parent is None or parent.status is not Status.DONE
        ]
        return f"waits for {len(waiting)} of its {len(parents)} parent(s): {', '.join(waiting)}"
    return f"runs after {', '.join(said)}"


def read_parents(store: Any, task: Task) -> Parents:
    """The parents of ``task`` (none for a task outside workflows, without a read)."""
    if task.workflow_id is None:
        return []
    try:
        return store.parents(task.id)
    except JobqError:
        return []
