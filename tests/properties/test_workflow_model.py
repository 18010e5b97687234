"""Workflows against a model (hypothesis), on every database.

Each example enqueues a random DAG (up to 8 nodes, each after a random list of earlier
nodes, of tasks with 0 to 2 retries), then drives it through the Store as workers and
operators would: captures of random sizes, ends of random runs in random batches by
set_status, set_statuses or complete_and_capture (done, failed with or without retries
left, failed for good), replays of stale fences, leases expiring (rescue, then the
sweep), cancels of single nodes and of the whole workflow. After every step the rows
must be what the model below says, and:

- a node is waiting to be captured, running or done only if every parent is done, and
  blocked only while some parent is not done and no ancestor will never be done;
- each capture hands out a new fence: no node runs twice at once, none runs twice per
  capture, and a captured node sees its parents' results in its ``after=`` order;
- a node cancelled for its ancestor names one that failed for good or was cancelled.

At the end every node is done, failed or cancelled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import jobq
from jobq import Status
from jobq.db.tasks import Completion
from jobq.dialects.schema import task_edges, tasks, workflows
from jobq.workflows import Node

c = tasks.c

#: Nodes of a DAG at most.
MOST_NODES = 8
#: Random steps before the run to the end.
MOST_STEPS = 14
#: Examples per database: SQLite is fast; a server costs a few round trips a step.
EXAMPLES = {"sqlite": 200, "postgresql": 50, "mysql": 50}
#: The error of a node cancelled because a node before it will never be done.
FOR_ANCESTOR = re.compile(
    r"cancelled: task (\d+) \((\w+)\), which it waits for, (failed|was cancelled)"
)

#: What the rows may be, as the model names them ("retrying": failed, retries left).
WAITING = ("blocked", "queued", "retrying")
FINISHED = ("done", "failed", "cancelled")


@dataclass
class ModelNode:
    """One node of the model: where its row should be."""

    parents: tuple[int, ...]
    retries_left: int
    status: str
    attempt: int = 0
    #: A cancel was asked for while it runs.
    asked: bool = False
    #: Why it was cancelled: "ancestor", "workflow", "request" or "direct".
    why: str | None = None


class Model:
    """A workflow as the issue describes it, node by node (indexes in node order)."""

    def __init__(self, dag: list[tuple[tuple[int, ...], int]]) -> None:
        self.nodes = [
            ModelNode(parents, retries, "blocked" if parents else "queued")
            for parents, retries in dag
        ]
        self.children: list[list[int]] = [[] for _ in dag]
        for index, (parents, _) in enumerate(dag):
            for parent in parents:
                self.children[parent].append(index)

    def descendants(self, index: int) -> set[int]:
        found: set[int] = set()
        todo = list(self.children[index])
        while todo:
            child = todo.pop()
            if child not in found:
                found.add(child)
                todo.extend(self.children[child])
        return found

    def ancestors(self, index: int) -> set[int]:
        found: set[int] = set()
        todo = list(self.nodes[index].parents)
        while todo:
            parent = todo.pop()
            if parent not in found:
                found.add(parent)
                todo.extend(self.nodes[parent].parents)
        return found

    def with_status(self, *names: str) -> list[int]:
        return [i for i, node in enumerate(self.nodes) if node.status in names]

    def capturable(self) -> list[int]:
        return self.with_status("queued", "retrying")

    def capture(self, index: int) -> None:
        node = self.nodes[index]
        assert node.status in ("queued", "retrying"), node
        if node.status == "retrying":
            node.retries_left -= 1
        node.status, node.attempt = "running", node.attempt + 1

    def end(self, index: int, outcome: str) -> None:
        """The end of ``index``'s run: "done", "failed" (a retry if any is left) or
        "terminal" (failed for good whatever is left)."""
        node = self.nodes[index]
        assert node.status == "running", node
        asked, node.asked = node.asked, False
        if outcome == "done":
            node.status = "done"
            for child in self.children[index]:
                waiting = self.nodes[child]
                if waiting.status == "blocked" and all(
                    self.nodes[p].status == "done" for p in waiting.parents
                ):
                    waiting.status = "queued"
        elif outcome == "failed" and node.retries_left > 0:
            if asked:  # it would wait again: the request wins
                node.status, node.why = "cancelled", "request"
                self.cancel_descendants(index)
            else:
                node.status = "retrying"
        else:
            node.status = "failed"
            if outcome == "terminal":  # failed for good: no retry is left
                node.retries_left = 0
            self.cancel_descendants(index)

    def cancel_descendants(self, index: int) -> int:
        cancelled = 0
        for below in self.descendants(index):
            if self.nodes[below].status == "blocked":
                self.nodes[below].status, self.nodes[below].why = "cancelled", "ancestor"
                cancelled += 1
        return cancelled

    def rescue(self, index: int) -> None:
        """Rescue of ``index``'s run, its lease expired: failed ("lease expired"), or
        cancelled if a cancel was asked for; it settles nothing (see settle_lost)."""
        node = self.nodes[index]
        assert node.status == "running", node
        if node.asked:
            node.status, node.why, node.asked = "cancelled", "request", False
        else:
            node.status = "retrying" if node.retries_left > 0 else "failed"

    def settle_lost(self) -> int:
        """What a sweep does after rescue: cancel the blocked descendants of nodes that
        will never be done; how many."""
        ended = self.with_status("failed", "cancelled")
        return sum(self.cancel_descendants(index) for index in ended)

    def cancel(self, index: int) -> bool:
        """Store.cancel of one node: whether it applied."""
        node = self.nodes[index]
        if node.status in WAITING:
            node.status, node.why = "cancelled", "direct"
            self.cancel_descendants(index)
            return True
        if node.status == "running":
            node.asked = True
            return True
        return False

    def cancel_workflow(self) -> int:
        changed = 0
        for node in self.nodes:
            if node.status in WAITING:
                node.status, node.why = "cancelled", "workflow"
                changed += 1
            elif node.status == "running":
                node.asked = True
                changed += 1
        return changed


@st.composite
def dags(draw: st.DrawFn) -> list[tuple[tuple[int, ...], int]]:
    """(parents in after= order, retries) per node; parents come before their children."""
    size = draw(st.integers(1, MOST_NODES), "nodes")
    dag = []
    for index in range(size):
        parents = (
            draw(st.lists(st.integers(0, index - 1), unique=True, max_size=3), f"after {index}")
            if index
            else []
        )
        dag.append((tuple(parents), draw(st.integers(0, 2), f"retries {index}")))
    return dag


OUTCOMES = st.sampled_from(["done", "done", "failed", "terminal"])
STEPS = st.sampled_from(
    ["capture", "capture", "end", "end", "end", "replay", "cancel", "lease expires"]
)


class Run:
    """One example: a DAG enqueued, driven step by step, checked after each."""

    def __init__(self, store: jobq.Store, nodes: list[jobq.TaskFunction], dag: Any) -> None:
        self.store = store
        self.model = Model(dag)
        flow = jobq.Workflow()
        added: list[Node] = []
        for index, (parents, retries) in enumerate(dag):
            signature = nodes[retries].s(i=index)
            added.append(flow.add(signature, after=[added[p] for p in parents]))
        self.handle = flow.enqueue()
        self.ids = [task.id for task in self.handle.tasks]
        self.index = {task_id: index for index, task_id in enumerate(self.ids)}
        #: Every fence ever handed out, and the running ones by node.
        self.fences: set[tuple[int, int]] = set()
        self.running: dict[int, jobq.Task] = {}
        self.check()

    # --- steps --------------------------------------------------------------------------

    def took(self, captured: list[jobq.Task], limit: int) -> None:
        """Check and record a capture of ``limit`` that took ``captured``."""
        capturable = self.model.capturable()
        taken = [self.index[task.id] for task in captured]
        assert set(taken) <= set(capturable), (taken, capturable)
        assert len(taken) == len(set(taken)) == min(limit, len(capturable)), (taken, capturable)
        for task in captured:
            index = self.index[task.id]
            assert task.fence not in self.fences, f"fence {task.fence} given twice"
            assert task.attempt == self.model.nodes[index].attempt + 1
            self.fences.add(task.fence)
            self.model.capture(index)
            self.running[index] = task
            parents = self.model.nodes[index].parents
            assert self.store.parent_results(task.id) == [{"node": p} for p in parents]

    def capture(self, limit: int) -> None:
        self.took(self.store.capture(limit, worker_id="w"), limit)

    def end(self, ends: list[tuple[int, str]], path: str, limit: int) -> None:
        """End the runs of ``ends`` (node, outcome) by ``path``; a complete_and_capture
        then captures up to ``limit``."""
        completions = []
        for index, outcome in ends:
            task = self.running.pop(index)
            if outcome == "done":
                completion = Completion(
                    task.id, task.attempt, Status.DONE, result={"node": index}, in_workflow=True
                )
            else:
                completion = Completion(
                    task.id, task.attempt, Status.FAILED, error=f"node {index} failed",
                    retry_delay=0, terminal=outcome == "terminal", in_workflow=True,
                )  # fmt: skip
            completions.append(completion)
        if path == "set_status":
            for end in completions:
                assert self.store.set_status(
                    end.id, end.attempt, end.status, result=end.result, error=end.error,
                    retry_delay=end.retry_delay,
                )  # fmt: skip
        elif path == "set_statuses":
            assert self.store.set_statuses(completions) == len(completions)
        for index, outcome in ends:
            self.model.end(index, outcome)
        if path == "complete_and_capture":
            applied, captured = self.store.complete_and_capture(completions, limit, worker_id="w")
            assert applied == len(completions)
            self.took(captured, limit)

    def replay(self, fence: tuple[int, int], outcome: str) -> None:
        """A stale end (of a run ended long ago) changes nothing."""
        task_id, attempt = fence
        status = Status.DONE if outcome == "done" else Status.FAILED
        stale = Completion(
            task_id, attempt, status, result={"stale": True}, error="stale", retry_delay=0,
            terminal=outcome == "terminal", in_workflow=True,
        )  # fmt: skip
        assert self.store.set_statuses([stale]) == 0

    def cancel(self, index: int) -> None:
        assert self.store.cancel(self.ids[index]) == self.model.cancel(index)

    def lease_expires(self, index: int) -> None:
        """The worker running ``index`` is gone: rescue ends its run, the sweep (both
        every worker's) settles what that end would have."""
        task = self.running.pop(index)
        with self.store.engine.begin() as conn:
            past = self.store.dialect.now_plus(-60.0)
            conn.execute(sa.update(tasks).where(c.id == task.id).values(locked_until=past))
        assert self.store.rescue() == 1
        self.model.rescue(index)
        assert self.store.sweep_workflows() == self.model.settle_lost()

    def cancel_workflow(self) -> None:
        assert self.handle.cancel() == self.model.cancel_workflow()

    # --- the check after each step ----------------------------------------------------------

    def check(self) -> None:
        query = (
            sa.select(
                c.id, c.name, c.status, c.finished_at, c.retries_left, c.attempt,
                c.cancel_requested_at, c.error,
            )
            .where(c.workflow_id == self.handle.id)
            .order_by(c.id)
        )  # fmt: skip
        with self.store.engine.connect() as conn:
            rows = conn.execute(query).all()
        assert [r.id for r in rows] == self.ids
        found = [_status(r.status, r.finished_at) for r in rows]
        nodes = self.model.nodes
        assert found == [node.status for node in nodes]
        for index, (r, node) in enumerate(zip(rows, nodes, strict=True)):
            assert (r.retries_left, r.attempt) == (node.retries_left, node.attempt), index
            if node.status == "running":
                assert (r.cancel_requested_at is not None) == node.asked, index
            parents_done = all(found[p] == "done" for p in node.parents)
            if node.status in ("queued", "retrying", "running", "done"):
                assert parents_done, f"node {index} is {node.status} before its parents are done"
            if node.status == "blocked":
                assert not parents_done, f"node {index} is blocked with its parents done"
                ended = [a for a in self.model.ancestors(index) if found[a] in FINISHED[1:]]
                assert not ended, f"node {index} still waits for {ended}, which ended"
            if node.status == "cancelled":
                self._check_cancel_error(index, r.error, rows, found)

    def _check_cancel_error(self, index: int, error: str | None, rows: Any, found: Any) -> None:
        why = self.model.nodes[index].why
        if why == "workflow":
            assert error == "cancelled with its workflow", (index, error)
        elif why == "request":
            assert error == "cancelled on request", (index, error)
        elif why == "ancestor":
            named = FOR_ANCESTOR.fullmatch(error or "")
            assert named is not None, (index, error)
            ancestor = self.index.get(int(named[1]))
            assert ancestor in self.model.ancestors(index), (index, error)
            assert named[2] == rows[ancestor].name
            how = {"failed": "failed", "cancelled": "was cancelled"}.get(found[ancestor])
            assert named[3] == how, (index, error, found[ancestor])

    def finished(self) -> bool:
        return all(node.status in FINISHED for node in self.model.nodes)


def _status(status: str, finished_at: Any) -> str:
    """The model's name for a row's status."""
    if status == Status.FAILED.value:
        return "failed" if finished_at is not None else "retrying"
    if status == Status.IN_PROGRESS.value:
        return "running"
    return status


def clear(store: jobq.Store) -> None:
    """A fresh set of rows per example, cheaper than migrating."""
    with store.engine.begin() as conn:
        for table in (task_edges, tasks, workflows):
            conn.execute(sa.delete(table))


def drive(run: Run, data: st.DataObject) -> None:
    """Random steps, then every run to its end; checked after each step."""
    cancel_at = data.draw(st.none() | st.integers(0, 3 * MOST_STEPS), "cancel_workflow at")
    for step in range(data.draw(st.integers(0, MOST_STEPS), "steps")):
        if step == cancel_at:
            run.cancel_workflow()
        else:
            one_step(run, data)
        run.check()
    for _ in range(4 * MOST_NODES):  # each node runs at most three times
        if run.finished():
            break
        assert run.running or run.model.capturable(), "nothing can run, yet nodes wait"
        if run.model.capturable():
            run.capture(100)
        ends = [(index, data.draw(OUTCOMES, f"end of {index}")) for index in sorted(run.running)]
        if ends:
            run.end(ends, "set_statuses", 0)
        run.check()
    assert run.finished(), [node.status for node in run.model.nodes]


def one_step(run: Run, data: st.DataObject) -> None:
    step = data.draw(STEPS, "step")
    if step == "capture":
        run.capture(data.draw(st.integers(1, 4), "limit"))
    elif step == "end" and run.running:
        chosen = data.draw(
            st.lists(st.sampled_from(sorted(run.running)), min_size=1, unique=True), "ended"
        )
        ends = [(index, data.draw(OUTCOMES, f"end of {index}")) for index in chosen]
        if any(outcome == "terminal" for _, outcome in ends):
            paths = ["set_statuses", "complete_and_capture"]  # set_status has no terminal
        else:
            paths = ["set_status", "set_statuses", "complete_and_capture"]
        path = data.draw(st.sampled_from(paths), "path")
        run.end(ends, path, data.draw(st.integers(0, 3), "then capture"))
    elif step == "lease expires" and run.running:
        run.lease_expires(data.draw(st.sampled_from(sorted(run.running)), "lost"))
    elif step == "replay":
        stale = sorted(run.fences - {task.fence for task in run.running.values()})
        if stale:
            run.replay(data.draw(st.sampled_from(stale), "fence"), data.draw(OUTCOMES, "as"))
    elif step == "cancel":  # mostly a node not finished yet, often a running one
        unfinished = [i for i, node in enumerate(run.model.nodes) if node.status not in FINISHED]
        run.cancel(data.draw(st.sampled_from(unfinished or range(len(run.ids))), "cancelled"))


def test_random_workflows_follow_the_model(db_url: str, backend: str) -> None:
    """Random DAGs, runs and cancels: the rows follow the model after every step, nodes
    run only after their parents, and every node ends done, failed or cancelled."""
    app = jobq.App(db_url)
    nodes = []
    for retries in range(3):

        def node(i: int) -> int:
            return i

        nodes.append(app.task(name=f"node_r{retries}", retries=retries)(node))

    @settings(
        max_examples=EXAMPLES[backend],
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(dag=dags(), data=st.data())
    def example(dag: list[tuple[tuple[int, ...], int]], data: st.DataObject) -> None:
        clear(app.store)
        drive(Run(app.store, nodes, dag), data)

    try:
        example()
    finally:
        app.store.dispose()
