"""Queues as operators see them: how long each queue's finished tasks are kept
(retention.py, ``store.retention``), and the overview of every queue that `jobq queues list`
prints (overview.py). A capability: it uses the core, and lifecycle and limits below it.
Pausing a queue is a column of its limits row: jobq.limits.pause."""
