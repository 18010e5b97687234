"""A task's life from the caller's side, and what a running task can say about itself.

- ``in_task``: inside a run: jobq.set_progress, jobq.check_cancelled, raising jobq.Snooze.
- ``run_control``: a worker's side of those: cancel requests heard, progress written.
- ``handles``: TaskHandle: an enqueued task's id that can wait for its result or cancel it.
- ``waiting``: how a waiter hears of an end: a notification on PostgreSQL, else polling.
- ``bulk``: cancelling and purging a queue's waiting tasks in batches.
- ``admin``: TaskAdmin (``store.admin``): list, count, retry and cancel tasks, prune.

A capability below the others (workflows build on its handles): it uses the core only.
"""
