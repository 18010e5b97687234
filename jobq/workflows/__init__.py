"""Workflows: tasks that run after other tasks, as rows and conditions like the rest of jobq.

- graph.py: signatures (``task.s(...)``), ``Workflow`` (any DAG) and ``chain``, ``group``
  and ``chord`` built on it. Pure: nothing is written until ``enqueue``.
- rows.py: a part of Store. A workflow is written whole in one transaction (or the
  caller's). A node whose parents are not all done is a ``blocked`` row, which no capture
  index holds, so waiting nodes cost capture nothing.
- settle.py: what the end of a node does to the nodes after it, in the transaction that
  records the end: the last parent done queues a child, a parent failed for good (or
  cancelled) cancels its descendants. Each parent writes only its own edge rows, so many
  parents ending into one child never queue up behind a lock on the child's row.
- handle.py: ``WorkflowHandle``, a workflow from the caller's side.
- in_task.py: ``parent_results()`` for a running node.
"""

from jobq.workflows.graph import Chain, Chord, Group, Node, Signature, Workflow, chain, chord, group
from jobq.workflows.handle import WorkflowHandle
from jobq.workflows.in_task import parent_results

__all__ = [
    "Chain",
    "Chord",
    "Group",
    "Node",
    "Signature",
    "Workflow",
    "WorkflowHandle",
    "chain",
    "chord",
    "group",
    "parent_results",
]
