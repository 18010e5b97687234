"""Signatures and the graphs made of them: Workflow (any DAG), chain, group and chord.

Pure: building a graph checks it and writes nothing; ``enqueue`` writes it whole.
Chains, groups and chords are built on Workflow: each adds its nodes after a set of
nodes and says which of its own come last, so they nest (a chain of groups, a chord
whose header holds chains).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, overload

from jobq.db.errors import InvalidWorkflow
from jobq.db.validation import INT32, check_datetime, check_int, check_key, check_seconds
from jobq.workflows.rows import Workflows

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from jobq.core.store import TaskStore
    from jobq.workflows.handle import WorkflowHandle


class SignatureApp(Protocol):
    """What a signature needs of the app whose task it runs (a jobq.App)."""

    @property
    def store(self) -> TaskStore: ...

    def _connection(self, given: object) -> AbstractContextManager[Connection | None]:
        """``given`` (what the caller passed as ``connection``) as a SQLAlchemy Connection:
        None and Connections as they are, a framework's through jobq.app.connections."""
        ...

    def _enqueued(self, connection: Connection | None) -> None: ...


#: The enqueue options a signature takes (``task.s(x=1, _queue="q")``).
SIGNATURE_OPTIONS = ("_delay", "_run_at", "_priority", "_queue", "_fair_key")


@dataclass(frozen=True, eq=False)
class Signature:
    """One run of a registered task, with its arguments and options, not yet enqueued.

    Made by ``task.s(**kwargs)`` (see TaskFunction.s): the arguments are checked against
    the function and for JSON then. A node's ``delay`` counts from the workflow's
    enqueue, and ``run_at`` is a moment: once its parents are done, a node still waits
    for it if it is later. A signature is a part of jobq.chain, group and chord, and a
    node of a jobq.Workflow; ``sig.enqueue()`` enqueues it alone, as a workflow of one
    node.

    Raises:
        InvalidWorkflow: ``_delay`` and ``_run_at`` together.
        InvalidOption: an empty ``_queue``, a ``_priority`` that is not a 32-bit int, a
            negative ``_delay``.
    """

    app: SignatureApp
    name: str
    arguments: dict[str, Any]
    #: ``arguments`` as the JSON text stored (encoded, and so checked, once).
    args_text: str
    queue: str
    priority: int
    retries: int
    timeout: float | None
    lock_key: str | None
    delay: float | None = None
    run_at: datetime | None = None
    #: The key a fair queue shares its captures by (jobq.limits.fair), if any.
    fair_key: str | None = None

    def __post_init__(self) -> None:
        check_key("_queue", self.queue, required=True)
        check_int("_priority", self.priority, minimum=INT32[0], maximum=INT32[1])
        if self.delay is not None and self.run_at is not None:
            raise InvalidWorkflow(reason=f"task {self.name!r}: give _delay or _run_at, not both")
        if self.delay is not None:
            check_seconds("_delay", self.delay)
        if self.run_at is not None:
            check_datetime("_run_at", self.run_at)

    def __repr__(self) -> str:
        return f"<Signature {self.name}({', '.join(self.arguments)})>"

    def add_to(self, workflow: Workflow, after: Sequence[Node]) -> list[Node]:
        """Add this signature as one node after ``after``; that node, the last."""
        return [workflow.add(self, after=after)]

    def enqueue(self, connection: Connection | None = None) -> WorkflowHandle:
        """Enqueue a workflow of this one node, in one transaction (or the caller's
        ``connection``); its jobq.WorkflowHandle, whose result is this task's."""
        return _enqueue(self, connection)


@dataclass(frozen=True, eq=False)
class Node:
    """A node of a Workflow: ``signature``, run once every node of ``after`` is done."""

    workflow: Workflow
    index: int
    signature: Signature
    after: tuple[Node, ...]

    def __repr__(self) -> str:
        return f"<Node {self.index} {self.signature.name}>"


class Workflow:
    """A DAG of signatures: ``node = wf.add(sig, after=[other, ...])``, then ``wf.enqueue()``.

    For the graphs chain, group and chord do not draw (a node after two nodes of
    different branches, say). A node may only come after nodes added before it, so every
    workflow is acyclic by construction. Each node runs once every node it comes after is
    done; one that fails for good (or is cancelled) cancels every node after it. The
    workflow's result is that of its final node (the one no node comes after), or the
    list of its final nodes' results.

    Example:
        ```python
        import jobq
        from jobq.worker import Worker

        app = jobq.App()
        app.migrate()

        @app.task(queue="etl")
        def fetch(source: str) -> int:
            return len(source)

        @app.task(queue="etl")
        def merge() -> list[int]:
            return jobq.parent_results()

        wf = jobq.Workflow()
        a = wf.add(fetch.s(source="abc"))
        b = wf.add(fetch.s(source="de"))
        wf.add(merge.s(), after=[b, a])  # parent_results() in this order
        handle = wf.enqueue()
        assert [task.status for task in handle.tasks] == ["queued", "queued", "blocked"]
        Worker(app, queues=["etl"], burst=True, burst_wait=0).run()
        assert handle.result(timeout=5) == [2, 3]
        ```
    """

    def __init__(self) -> None:
        #: The nodes, in the order they were added (the order of WorkflowHandle.tasks).
        self.nodes: list[Node] = []

    def __repr__(self) -> str:
        return f"<Workflow of {len(self.nodes)} node(s)>"

    def add(self, signature: Signature, after: Iterable[Node] = ()) -> Node:
        """Add a node running ``signature`` once every node of ``after`` is done; the
        Node, for later nodes' ``after``. Nothing is written until enqueue().

        Inside its run, ``jobq.parent_results()`` gives their results in this order.

        Raises:
            InvalidWorkflow: ``signature`` is not a signature (``task.s(...)``); ``after``
                names something that is not a node of this workflow, or a node twice;
                the task is of an app on another database than the other nodes'.
        """
        if not isinstance(signature, Signature):
            raise InvalidWorkflow(
                reason=f"a node runs a signature (task.s(...)), not {type(signature).__name__}"
            )
        parents = tuple(after)
        seen: set[int] = set()
        for parent in parents:
            if not isinstance(parent, Node) or parent.workflow is not self:
                raise InvalidWorkflow(
                    reason=f"after= names {parent!r}, not a node of this workflow"
                )
            if parent.index in seen:
                raise InvalidWorkflow(reason=f"after= names node {parent.index} twice")
            seen.add(parent.index)
        if self.nodes and signature.app.store is not self.nodes[0].signature.app.store:
            raise InvalidWorkflow(reason="its tasks belong to apps with different databases")
        node = Node(self, len(self.nodes), signature, parents)
        self.nodes.append(node)
        return node

    def enqueue(self, connection: Connection | None = None) -> WorkflowHandle:
        """Write every node and edge in one transaction (or the caller's ``connection``,
        committing or rolling back with it: a SQLAlchemy Connection, or what
        jobq.app.connections adapts, Django's with jobq.contrib.django); the workflow's
        jobq.WorkflowHandle. Nodes
        after others are written ``blocked``, the others ``queued``. InvalidWorkflow if
        it has no nodes."""
        from jobq.workflows.handle import WorkflowHandle

        if not self.nodes:
            raise InvalidWorkflow(reason="it has no nodes")
        app = self.nodes[0].signature.app
        store = app.store
        with app._connection(connection) as conn:
            workflow_id, ids = store.capability(Workflows).enqueue_workflow(
                self.nodes, connection=conn
            )
        app._enqueued(connection)  # jobq.testing.immediate runs them now
        sinks = _sinks(self.nodes)
        return WorkflowHandle(workflow_id, store, ids, [node.index for node in sinks])


def _sinks(nodes: Sequence[Node]) -> list[Node]:
    """The nodes no other node comes after: the workflow's results."""
    parents = {parent.index for node in nodes for parent in node.after}
    return [node for node in nodes if node.index not in parents]


@dataclass(frozen=True, eq=False)
class Chain:
    """Parts run one after another: each starts once the previous one is done."""

    parts: tuple[Part, ...] = field(default=())

    def add_to(self, workflow: Workflow, after: Sequence[Node]) -> list[Node]:
        last = list(after)
        for part in self.parts:
            last = part.add_to(workflow, last)
        return last

    def enqueue(self, connection: Connection | None = None) -> WorkflowHandle:
        """Enqueue the chain as one workflow; the result is its last part's."""
        return _enqueue(self, connection)


@dataclass(frozen=True, eq=False)
class Group:
    """Parts run side by side; the group's result is the list of theirs."""

    parts: tuple[Part, ...] = field(default=())

    def add_to(self, workflow: Workflow, after: Sequence[Node]) -> list[Node]:
        return [node for part in self.parts for node in part.add_to(workflow, after)]

    def enqueue(self, connection: Connection | None = None) -> WorkflowHandle:
        """Enqueue the group as one workflow; the result is the list of the parts'."""
        return _enqueue(self, connection)


@dataclass(frozen=True, eq=False)
class Chord:
    """A group, then ``callback`` once every part of the group is done (its
    ``parent_results()`` are the group's results, in order)."""

    header: Group
    callback: Part

    def add_to(self, workflow: Workflow, after: Sequence[Node]) -> list[Node]:
        return self.callback.add_to(workflow, self.header.add_to(workflow, after))

    def enqueue(self, connection: Connection | None = None) -> WorkflowHandle:
        """Enqueue the chord as one workflow; the result is the callback's."""
        return _enqueue(self, connection)


#: What chains, groups and chords are made of.
Part = Signature | Chain | Group | Chord


def _part(value: Any) -> Part:
    if not isinstance(value, Signature | Chain | Group | Chord):
        raise InvalidWorkflow(
            reason=f"expected a signature (task.s(...)), chain, group or chord, not "
            f"{type(value).__name__}"
        )
    return value


def chain(*parts: Part) -> Chain:
    """Each part runs once the previous one is done: ``chain(a.s(), b.s(), c.s())``.

    A part is a signature (``task.s(...)``), a chain, a group or a chord; a failure for
    good, or a cancel, of one cancels every part after it. ``.enqueue()`` writes every
    node in one transaction and returns a jobq.WorkflowHandle; a task reads what the
    parts before it returned with jobq.parent_results().

    Raises:
        InvalidWorkflow: no parts, or a part that is none of those.

    Example:
        ```python
        import jobq
        from jobq.worker import Worker

        app = jobq.App()
        app.migrate()

        @app.task
        def add(a: int, b: int) -> int:
            return a + b

        @app.task
        def total() -> int:
            return sum(jobq.parent_results())

        steps = jobq.chain(add.s(a=1, b=1), total.s()).enqueue()
        fan_in = jobq.chord(jobq.group(add.s(a=1, b=2), add.s(a=3, b=4)), total.s()).enqueue()
        Worker(app, burst=True, burst_wait=0).run()
        assert steps.result(timeout=5) == 2 and fan_in.result(timeout=5) == 10
        ```
    """
    if not parts:
        raise InvalidWorkflow(reason="a chain needs at least one part")
    return Chain(tuple(_part(part) for part in parts))


@overload
def group(parts: Iterable[Part], /) -> Group: ...


@overload
def group(*parts: Part) -> Group: ...


def group(*parts: Part | Iterable[Part]) -> Group:
    """The parts run in parallel: ``group(a.s(x=1), a.s(x=2))``; also group(iterable).

    Its result is the list of its parts' results, in order (see jobq.chain's example).

    Raises:
        InvalidWorkflow: no parts, or a part that is not a signature, chain, group or chord.
    """
    members: Sequence[object] = parts
    if len(parts) == 1 and not isinstance(parts[0], Part):
        try:
            members = tuple(parts[0])  # group(task.s(x=n) for n in range(10))
        except TypeError:
            _part(parts[0])  # says what it is instead
    if not members:
        raise InvalidWorkflow(reason="a group needs at least one part")
    return Group(tuple(_part(part) for part in members))


def chord(header: Group | Iterable[Part], callback: Part) -> Chord:
    """``callback`` runs once every part of ``header`` (a group) is done.

    ``header`` may be a group or an iterable of parts; ``callback`` reads the header's
    results with jobq.parent_results(). See jobq.chain's example.
    """
    if not isinstance(header, Group):
        header = group(header)  # a part alone, or an iterable of parts
    return Chord(header, _part(callback))


def _enqueue(part: Part, connection: Connection | None) -> WorkflowHandle:
    workflow = Workflow()
    part.add_to(workflow, [])
    return workflow.enqueue(connection)
