"""Workflows (``store.workflows``): write, read, settle and cancel them.

A workflow is one row of jobq_workflows, a task row per node (``workflow_id`` set; a
node with parents starts ``blocked``) and an edge row per (child, parent), all written in
one transaction. See settle.py for what a node's end does to the nodes after it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.core.cancel import cancel_update
from jobq.core.enqueue_keys import with_fair_settings
from jobq.core.run_end import chunked_records
from jobq.db.errors import JobqError, WorkflowNotFound
from jobq.db.room import Room
from jobq.db.tasks import Completion, Status, Task
from jobq.db.validation import check_int
from jobq.dialects.base import Dialect
from jobq.dialects.schema import task_edges, tasks, workflows
from jobq.workflows import settle, writing
from jobq.workflows.writing import NodeRow

if TYPE_CHECKING:
    from jobq.core.store import TaskStore

c = tasks.c
e = task_edges.c
log = logging.getLogger("jobq.workflows")

#: The error of a node cancelled with its whole workflow (WorkflowHandle.cancel).
WORKFLOW_CANCELLED = "cancelled with its workflow"


class Workflows:
    """Workflows' rows (``store.workflows``): enqueue_workflow, their nodes and edges, and
    what the ends of nodes do to the others. jobq.Workflow, chain, group, chord and
    jobq.WorkflowHandle are the API; these are what they and `jobq workflow` call."""

    def __init__(self, store: TaskStore) -> None:
        """Made on a TaskStore (``store.capability(Workflows)``): the ends of nodes settle
        the nodes after them, as cancels, retries and bulk removals of nodes do (the hooks
        of jobq.core.hooks)."""
        self.store = store
        self.db = store.db
        self.dialect = store.dialect
        hooks = store.hooks
        hooks.ends_in_workflow = self.end_nodes
        hooks.after_cancel.append(self._cancel_after)
        hooks.after_retry.append(self._revive_after)
        hooks.after_removal.append(self._settle_removed)

    # --- writing ---------------------------------------------------------------------

    def enqueue_workflow(
        self, nodes: Sequence[NodeRow], *, connection: Connection | None = None
    ) -> tuple[int, list[int]]:
        """Write a workflow of ``nodes`` (each after nodes listed before it): its id, and
        the task ids of its nodes in order. One transaction, or the caller's. Workflow.enqueue
        calls it with its nodes; nodes after others are written ``blocked``."""
        delays = any(n.signature.run_at is not None for n in nodes)
        # Waits for an unreachable database as an enqueue does (Enqueuer.waiting), and
        # writes again only if its transaction certainly did not commit.
        with self.store.enqueuer.waiting(connection):
            written = with_fair_settings(
                self.store.hooks,
                connection,
                lambda given: self._write(nodes, delays, self.db.room(), given),
            )
        # A large workflow is a bulk load: the planner's statistics are refreshed after it
        # as after enqueue_many's (Enqueuer.loaded).
        self.store.enqueuer.loaded(connection, len(nodes))
        return written

    def _write(
        self,
        nodes: Sequence[NodeRow],
        delays: bool,
        room: Room,
        connection: Connection | None,
    ) -> tuple[int, list[int]]:
        """enqueue_workflow's transaction."""

        def write(conn: Connection) -> tuple[int, list[int]]:
            now = conn.execute(sa.select(self.dialect.now())).scalar_one() if delays else None
            header = sa.insert(workflows).values(nodes=len(nodes), created_at=self.dialect.now())
            inserted = conn.execute(header).inserted_primary_key
            assert inserted is not None  # None only when no row was inserted; this writes one
            workflow_id = int(inserted[0])
            insert = writing.node_insert(self.dialect)
            keys, wake = self._fair_keys(nodes, conn)
            records = [
                writing.node_record(node, now, key) for node, key in zip(nodes, keys, strict=True)
            ]
            for chunk in chunked_records(records, room):
                conn.execute(insert, {"nodes": chunk, "workflow_id": workflow_id})
            # Ids grow in the order the rows were inserted (ORDER BY position).
            ids = list(
                conn.execute(writing.node_ids(self.dialect), {"workflow_id": workflow_id}).scalars()
            )
            edges = [
                {"child_id": ids[node.index], "position": position, "parent_id": ids[p.index]}
                for node in nodes
                for position, p in enumerate(node.after)
            ]
            for chunk in chunked_records(edges, room) if edges else ():
                conn.execute(writing.edge_insert(self.dialect), {"edges": chunk})
            if (hook := self.store.hooks.fair_keys) is not None:
                for queue, woken in sorted(wake.items()):
                    hook.enqueued(conn, queue, sorted(woken))
            return workflow_id, ids

        return self.db.write(write, connection, atomic=True)

    def _fair_keys(
        self, nodes: Sequence[NodeRow], conn: Connection
    ) -> tuple[list[str | None], dict[str, set[str]]]:
        """Each node's fair key as stored (FairKeys.key_of: ``""`` for one without, in a
        fair queue), and by fair queue the keys to wake: those of the nodes written queued
        (a blocked node's wakes when it is released: _released)."""
        hook = self.store.hooks.fair_keys
        if hook is None:
            return [node.signature.fair_key for node in nodes], {}
        keys: list[str | None] = []
        wake: dict[str, set[str]] = {}
        for node in nodes:
            queue = node.signature.queue
            key, fair = hook.key_of(queue, node.signature.fair_key, conn)
            keys.append(key)
            if fair and key is not None and not node.after:
                wake.setdefault(queue, set()).add(key)
        return keys, wake

    def _released(self, conn: Connection, ids: Sequence[int]) -> None:
        """Nodes ``ids`` were released (queued): their fair keys wake (FairKeys.released)."""
        if (hook := self.store.hooks.fair_keys) is not None:
            hook.released(conn, ids)

    # --- what ends do ----------------------------------------------------------------

    def settle_ends(
        self, conn: Connection, done: Sequence[int], other: Sequence[int] = ()
    ) -> list[int]:
        """In the transaction that recorded them: queue the children that the ends of
        ``done`` leave waiting for nothing, and cancel the descendants of those of
        ``other`` (ends that were not done) that ended for good. Returns the ids of
        ``done`` with a child still blocked, to look at again once committed (look_again)."""
        parents: list[int] = []
        if done:
            mark = settle.mark_done(self.dialect)
            for part in settle.chunks(done):
                if conn.execute(mark, {"ids": part}).rowcount:
                    parents.extend(part)
            if parents:
                settle.queue_children(conn, self.dialect, parents, self._released)
                parents = settle.with_blocked_children(conn, self.dialect, parents)
        if other:
            self._cancel_after(conn, other)
        return parents

    def end_nodes(
        self,
        ends: Sequence[Completion],
        write: Callable[[Connection], int],
        connection: Connection | None = None,
    ) -> int:
        """``write(conn)``, which records ``ends`` and says how many applied, then the
        settling of the workflow nodes among them, in one transaction (or the caller's);
        once committed, look_again. How many ends applied."""
        done = [end.id for end in ends if end.in_workflow and end.status is Status.DONE]
        other = [end.id for end in ends if end.in_workflow and end.status is not Status.DONE]

        def write_and_settle(conn: Connection) -> tuple[int, list[int]]:
            applied = write(conn)
            return applied, self.settle_ends(conn, done, other) if applied else []

        applied, parents = self.db.write(write_and_settle, connection, atomic=True)
        if connection is None:  # else the caller commits later: the sweep looks again
            try:
                self.look_again(parents)
            except (JobqError, sa.exc.DBAPIError) as error:
                # The ends stand; every worker's sweep releases what this would have.
                log.warning("looking again at workflow nodes failed, left to the sweep: %s", error)
        return applied

    def look_again(self, parents: Sequence[int]) -> int:
        """After the commit that marked ``parents`` done: queue their children that wait
        for nothing now. A child whose last two parents ended in concurrent transactions
        was queued by neither; this read, begun after the commit, sees both."""
        if not parents:
            return 0
        return self.db.write(
            lambda conn: settle.queue_children(conn, self.dialect, parents, self._released)
        )

    def _cancel_after(self, conn: Connection, ids: Sequence[int]) -> int:
        """Cancel the blocked descendants of those of ``ids`` that ended without being done."""
        cancelled = 0
        for part in settle.chunks(ids):
            for parent_id, name, status in conn.execute(
                settle.failed_parents(self.dialect), {"ids": part}
            ).all():
                reason = settle.cancelled_because(parent_id, name, status)
                cancelled += settle.cancel_descendants(conn, self.dialect, parent_id, reason)
        return cancelled

    def _settle_removed(self, conn: Connection, ids: Sequence[int], queue: str) -> int:
        """After a bulk cancel or purge of queue ``queue`` took the tasks ``ids`` (in this
        transaction): cancel the blocked descendants of each, their errors naming it (as
        cancelled, or gone), as a single cancel does; how many.

        Descendants of ``queue`` are spared: the bulk action takes them itself, in this
        batch or a later one (a node's id is greater than its parents', and batches go in
        id order). Only tasks with a child still blocked are walked, so a batch that took
        a whole chain walks nothing.
        """
        cancelled = 0
        # In id order, ancestors first: a node is named by the first node taken before it.
        walked = sorted(settle.with_blocked_children(conn, self.dialect, ids))
        for part in settle.chunks(walked):
            # Cancelled ones are still rows (id, name, status); deleted ones are not.
            rows = conn.execute(settle.failed_parents(self.dialect), {"ids": part}).all()
            found = {parent_id: (name, status) for parent_id, name, status in rows}
            for parent_id in part:
                name, status = found.get(parent_id, (None, None))
                reason = settle.cancelled_because(parent_id, name, status)
                cancelled += settle.cancel_descendants(
                    conn, self.dialect, parent_id, reason, spared=queue
                )
        return cancelled

    def _revive_after(self, conn: Connection, id: int) -> int:
        """Task ``id`` runs again (Store.retry): its descendants cancelled before they ever
        ran wait for their parents again (blocked); how many."""
        below = list(conn.execute(settle.descendants(self.dialect), {"parent_id": id}).scalars())
        statement = settle.revive_cancelled(self.dialect)
        return sum(conn.execute(statement, {"ids": part}).rowcount for part in settle.chunks(below))

    def sweep_workflows(self) -> int:
        """Settle what no end settled: blocked nodes waiting for nothing (queued), or for
        parents that will never be done (cancelled). Every worker's rescue pass runs it;
        how many nodes it changed."""

        def sweep(conn: Connection) -> int:
            changed = 0
            for parent_id, name, status in conn.execute(settle.stuck_parents(self.dialect)).all():
                if status == Status.DONE.value:  # done by a write that did not mark its edges
                    conn.execute(settle.mark_done(self.dialect), {"ids": [parent_id]})
                    continue
                reason = settle.cancelled_because(parent_id, name, status)
                changed += settle.cancel_descendants(conn, self.dialect, parent_id, reason)
            ready = list(conn.execute(settle.stuck_ready(self.dialect)).scalars())
            return changed + settle.queue_tasks(conn, self.dialect, ready, self._released)

        return self.db.write(sweep, atomic=True)

    # --- reading and cancelling ------------------------------------------------------

    def workflow_tasks(self, workflow_id: int) -> list[Task]:
        """The tasks of workflow ``workflow_id``, in the order its nodes were added (empty if
        there is no such workflow, or its nodes were pruned)."""
        check_int("workflow_id", workflow_id)
        query = self.db.prepare(
            ("workflow", "tasks"),
            lambda: (
                sa.select(tasks)
                .where(
                    self.dialect.within("jobq_tasks_workflow"),
                    c.workflow_id == sa.bindparam("workflow_id", type_=sa.BigInteger),
                )
                .order_by(c.id)
            ),
        )
        rows = self.db.run(query, {"workflow_id": workflow_id}, fetch=True)
        return [Task.from_values(self.store._read(row)) for row in rows]

    def workflow_edges(self, workflow_id: int) -> list[tuple[int, int, int, bool]]:
        """(child_id, position, parent_id, parent_done) of every edge of workflow
        ``workflow_id``, by child and position; empty if there is no such workflow."""
        check_int("workflow_id", workflow_id)
        query = (
            sa.select(e.child_id, e.position, e.parent_id, e.parent_done)
            .join(tasks, c.id == e.child_id)
            .where(self.dialect.within("jobq_tasks_workflow"), c.workflow_id == workflow_id)
            .order_by(e.child_id, e.position)
        )
        with self.db.unit(read_only=True) as conn:
            return [tuple(row) for row in conn.execute(query)]

    def parents(self, id: int) -> list[tuple[int, Task | None]]:
        """The parents of task ``id``, in its ``after=`` order: (parent id, its task, or
        None if the row is gone). Empty for a task with none."""
        check_int("id", id)
        parent = tasks.alias("parent")
        query = self.db.prepare(
            ("workflow", "parents"),
            lambda: (
                sa.select(e.parent_id, *parent.c)
                .select_from(task_edges.outerjoin(parent, parent.c.id == e.parent_id))
                .where(e.child_id == sa.bindparam("id", type_=sa.BigInteger))
                .order_by(e.position)
            ),
        )
        rows = self.db.run(query, {"id": id}, fetch=True)
        return [
            (row[0], None if row[1] is None else Task.from_values(self.store._read(row[1:])))
            for row in rows
        ]

    def parent_results(self, id: int) -> list[Any]:
        """The results of task ``id``'s parents, in its ``after=`` order (None for one
        whose row was pruned)."""
        check_int("id", id)
        parent = tasks.alias("parent")
        query = (
            sa.select(parent.c.result)
            .select_from(task_edges.outerjoin(parent, parent.c.id == e.parent_id))
            .where(e.child_id == id)
            .order_by(e.position)
        )
        with self.db.unit(read_only=True) as conn:
            return list(conn.execute(query).scalars())

    def cancel_workflow(self, workflow_id: int) -> int:
        """Cancel every node of the workflow not finished yet: waiting ones at once,
        running ones by a cancel request (as store.admin.cancel). How many it did either
        to; WorkflowNotFound if there is no such workflow (WorkflowHandle.cancel).

        No node can start again afterwards, whatever runs meanwhile: one UPDATE decides
        each node by its status when it writes it, so a run ending into a retry cannot
        escape. A requested node's end that would make it wait again is recorded
        cancelled, and rescue ends it cancelled if its lease lapses.
        """
        check_int("workflow_id", workflow_id)
        exists = sa.select(workflows.c.id).where(workflows.c.id == workflow_id)
        statement = self.db.prepare(("workflow", "cancel"), lambda: _cancel_nodes(self.dialect))

        def cancel(conn: Connection) -> int:
            if conn.execute(exists).first() is None:
                raise WorkflowNotFound(id=workflow_id)
            count: int = self.db.run(statement, {"workflow_id": workflow_id}, connection=conn)
            return count

        return self.db.write(cancel, atomic=True)


def _cancel_nodes(dialect: Dialect) -> sa.Update:
    """The cancel of workflow ``workflow_id``'s nodes not finished yet (cancel_update)."""
    of_workflow = sa.and_(
        dialect.within("jobq_tasks_workflow"),
        c.workflow_id == sa.bindparam("workflow_id", type_=sa.BigInteger),
    )
    return cancel_update(dialect, of_workflow, WORKFLOW_CANCELLED)
