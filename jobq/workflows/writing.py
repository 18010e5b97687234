"""The statements that write a workflow's rows: a task row per node, an edge per parent.

Each is one INSERT ... SELECT over a JSON array parameter of records (Dialect.json_records),
whatever the number of nodes; Workflows.enqueue_workflow runs them in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

import sqlalchemy as sa

from jobq.db.tasks import Status, as_utc
from jobq.dialects.base import Dialect
from jobq.dialects.schema import task_edges, tasks

c = tasks.c


class NodeRow(Protocol):
    """What enqueue_workflow reads of a node (a jobq.workflows.graph.Node)."""

    @property
    def index(self) -> int: ...

    @property
    def signature(self) -> Any: ...

    @property
    def after(self) -> Sequence[NodeRow]: ...


#: The fields of each node's record in the insert's JSON array parameter ``nodes``.
NODE_FIELDS: tuple[tuple[str, Any], ...] = (
    ("position", sa.Integer()),
    ("queue_id", sa.String()),
    ("name", sa.String()),
    ("args", sa.Text()),  # JSON text
    ("status", sa.String()),
    ("priority", sa.Integer()),
    ("retries_left", sa.Integer()),
    ("timeout", sa.Float()),
    ("lock_key", sa.String()),
    ("fair_key", sa.String()),
    ("delay", sa.Float()),  # seconds from the database's now
)
#: The fields of each edge's record in the insert's JSON array parameter ``edges``.
EDGE_FIELDS: tuple[tuple[str, Any], ...] = (
    ("child_id", sa.BigInteger()),
    ("position", sa.Integer()),
    ("parent_id", sa.BigInteger()),
)


def node_insert(dialect: Dialect) -> sa.Insert:
    """INSERT of a task per record of the JSON array ``nodes``, in their order."""

    def build() -> sa.Insert:
        record = dialect.json_records(sa.bindparam("nodes", type_=sa.Text), NODE_FIELDS)
        columns = {
            "queue_id": record.c.queue_id,
            "name": record.c.name,
            "args": dialect.json_from_text(record.c.args),
            "status": record.c.status,
            "priority": record.c.priority,
            "retries_left": record.c.retries_left,
            "timeout": record.c.timeout,
            "lock_key": record.c.lock_key,
            "fair_key": record.c.fair_key,
            "run_at": dialect.now_plus(record.c.delay),
            "workflow_id": sa.bindparam("workflow_id", type_=sa.BigInteger),
            "attempt": sa.literal(0, sa.Integer),
            "recurring": sa.literal(False, sa.Boolean),
            "created_at": dialect.now(),
        }
        rows = sa.select(*columns.values()).order_by(record.c.position)
        return sa.insert(tasks).from_select(list(columns), rows)

    return dialect.memo(("workflow", "insert nodes"), build)


def node_ids(dialect: Dialect) -> sa.Select[Any]:
    """The ids of workflow ``workflow_id``'s tasks, in the order they were inserted."""
    return dialect.memo(
        ("workflow", "node ids"),
        lambda: (
            sa.select(c.id)
            .where(
                dialect.within("jobq_tasks_workflow"),
                c.workflow_id == sa.bindparam("workflow_id", type_=sa.BigInteger),
            )
            .order_by(c.id)
        ),
    )


def edge_insert(dialect: Dialect) -> sa.Insert:
    """INSERT of an edge per record of the JSON array ``edges``."""

    def build() -> sa.Insert:
        record = dialect.json_records(sa.bindparam("edges", type_=sa.Text), EDGE_FIELDS)
        rows = sa.select(record.c.child_id, record.c.position, record.c.parent_id)
        return sa.insert(task_edges).from_select(["child_id", "position", "parent_id"], rows)

    return dialect.memo(("workflow", "insert edges"), build)


def node_record(node: NodeRow, now: datetime | None, fair_key: str | None) -> dict[str, Any]:
    """The record of ``node``'s task row (stored with ``fair_key``) in the insert's ``nodes``
    parameter."""
    signature = node.signature
    delay = signature.delay or 0.0
    if signature.run_at is not None and now is not None:
        delay = (as_utc(signature.run_at) - as_utc(now)).total_seconds()
    return {
        "position": node.index,
        "queue_id": signature.queue,
        "name": signature.name,
        "args": signature.args_text,
        "status": (Status.BLOCKED if node.after else Status.QUEUED).value,
        "priority": signature.priority,
        "retries_left": signature.retries,
        "timeout": signature.timeout,
        "lock_key": signature.lock_key,
        "fair_key": fair_key,
        "delay": float(delay),
    }
