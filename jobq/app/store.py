"""Store: the core's TaskStore with every capability built on it, each an object of its own.

``Store(url)`` is what applications and jobq's own commands use. The core (capture, the
fenced ends, heartbeat, rescue, enqueue, the registry of workers) is TaskStore's; each
capability is an attribute, made on the core and hooked into it (jobq.core.hooks):

- ``store.admin``: list, count, retry and cancel tasks, bulk cancel, purge, prune
  (jobq.lifecycle.admin);
- ``store.queue_limits``: concurrency and rate limits (jobq.limits.sql), and
  ``store.pauses``: paused queues (jobq.limits.pause);
- ``store.retention``: how long each queue's finished tasks are kept (jobq.queues);
- ``store.cron``: schedules as recurring rows (jobq.cron.periodic);
- ``store.workflows``: workflows' rows, and what the ends of their nodes do
  (jobq.workflows.rows);
- ``store.locks``: mutexes, timeout locks, leases and advisory locks (jobq.locks).

The methods these had when Store was one class of mixins (``store.cancel``,
``store.pause_queue``, ``store.schedule_runs``, ...) are still there, as the capability's
own bound methods: docs/reference/capabilities.md lists them and the attribute each now
belongs to.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from jobq.app.why import Explanation, explain
from jobq.core.retry import Backoff
from jobq.core.store import TaskStore
from jobq.cron.periodic import Periodic
from jobq.lifecycle.admin import TaskAdmin
from jobq.limits.fair import FairQueues
from jobq.limits.pause import Pauses
from jobq.limits.sql import Limits
from jobq.locks import Locks
from jobq.queues.retention import QueueRetention
from jobq.workflows.rows import Workflows


class Store(TaskStore):
    """Tasks in SQL rows: the core (enqueue, capture, the fenced ends, heartbeat, rescue),
    with every capability an attribute of its own.

    ``store.admin`` (list, count, retry, cancel, purge, prune), ``store.queue_limits``,
    ``store.pauses``, ``store.retention``, ``store.cron``, ``store.workflows`` and
    ``store.locks``: see [Store capabilities](capabilities.md). Their methods are also
    the Store's own (``store.cancel`` is ``store.admin.cancel``). An App makes its Store
    when first used (``app.store``); make one yourself to work by task name, without an
    app's definitions.

    Args:
        url_or_engine: a database URL, or a SQLAlchemy Engine to share (it keeps its
            own settings); default $JOBQ_DATABASE_URL, else sqlite:///jobq.db.
        backoff: the retry policy of failures that say no delay of their own
            (jobq.ExponentialBackoff by default, or jobq.FixedBackoff).
        listen_url: where workers and waiters listen for notifications when the URL goes
            through a transaction pooler (``?jobq_pooler=transaction``): the server's own.
        enqueue_wait: seconds an enqueue (not in a caller's transaction) waits for a
            database it cannot reach, a restart say, before it raises DatabaseUnavailable;
            0 refuses at once. Default $JOBQ_ENQUEUE_WAIT, else 5. It is tried again only
            while it certainly wrote nothing: never twice.

    Raises:
        InvalidDatabaseURL: a URL jobq cannot use; nothing connects before.
        InvalidOption: a negative ``enqueue_wait`` (or $JOBQ_ENQUEUE_WAIT not a duration).
        MissingExtra: the URL's driver is in an extra that is not installed.

    Example:
        ```python
        import jobq

        store = jobq.Store()  # $JOBQ_DATABASE_URL
        store.migrate()
        task_id = store.enqueue("report", {"day": "2026-11-21"}, unique_key="report:2026-11-21")
        again = store.enqueue("report", {"day": "2026-11-21"}, unique_key="report:2026-11-21")
        assert again == task_id  # one pending task per unique key
        assert store.counts()[("default", jobq.Status.QUEUED)] == 1
        assert store.cancel(task_id) and store.get(task_id).status == "cancelled"
        ```
    """

    def __init__(
        self,
        url_or_engine: str | sa.URL | Engine | None = None,
        *,
        backoff: Backoff | None = None,
        listen_url: str | sa.URL | None = None,
        enqueue_wait: float | None = None,
    ) -> None:
        super().__init__(
            url_or_engine, backoff=backoff, listen_url=listen_url, enqueue_wait=enqueue_wait
        )
        self.admin = self.capability(TaskAdmin)
        self.queue_limits = self.capability(Limits)
        self.pauses = self.capability(Pauses)
        self.fair_queues = self.capability(FairQueues)
        self.retention = self.capability(QueueRetention)
        self.cron = self.capability(Periodic)
        self.workflows = self.capability(Workflows)
        self.locks = self.capability(Locks)
        # The former methods of the mixin now store.admin.
        self.cancel = self.admin.cancel
        self.running_lock_keys = self.admin.running_lock_keys
        self.retry = self.admin.retry
        self.retry_failed = self.admin.retry_failed
        self.get_with_now = self.admin.get_with_now
        self.list_tasks = self.admin.list_tasks
        self.oldest_waiting = self.admin.oldest_waiting
        self.due_later = self.admin.due_later
        self.counts = self.admin.counts
        self.cancel_queue = self.admin.cancel_queue
        self.purge = self.admin.purge
        self.prune = self.admin.prune
        self.running_tasks = self.admin.running_tasks
        # The former methods of the mixin now store.queue_limits.
        self.set_limit = self.queue_limits.set_limit
        self.clear_limit = self.queue_limits.clear_limit
        self.limits = self.queue_limits.limits
        self.limit_usage = self.queue_limits.limit_usage
        self.limited_queues = self.queue_limits.limited_queues
        self.withheld_queues = self.queue_limits.withheld_queues
        self.limited_waiting = self.queue_limits.limited_waiting
        self.capture_within_limit = self.queue_limits.capture_within_limit
        self.capture_from_limited_queue = self.queue_limits.capture_from_limited_queue
        # The former methods of the mixin now store.pauses.
        self.pause_queue = self.pauses.pause_queue
        self.resume_queue = self.pauses.resume_queue
        self.paused_queues = self.pauses.paused_queues
        # The former methods of the mixin now store.retention.
        self.set_retention = self.retention.set_retention
        self.clear_retention = self.retention.clear_retention
        self.retentions = self.retention.retentions
        # The former methods of the mixin now store.cron.
        self.sync_schedules = self.cron.sync_schedules
        self.schedules = self.cron.schedules
        self.schedule_runs = self.cron.schedule_runs
        self.set_schedule_enabled = self.cron.set_schedule_enabled
        self.run_schedule_now = self.cron.run_schedule_now
        # The former methods of the mixin now store.workflows.
        self.enqueue_workflow = self.workflows.enqueue_workflow
        self.settle_ends = self.workflows.settle_ends
        self.end_nodes = self.workflows.end_nodes
        self.look_again = self.workflows.look_again
        self.sweep_workflows = self.workflows.sweep_workflows
        self.workflow_tasks = self.workflows.workflow_tasks
        self.workflow_edges = self.workflows.workflow_edges
        self.parents = self.workflows.parents
        self.parent_results = self.workflows.parent_results
        self.cancel_workflow = self.workflows.cancel_workflow

    def explain(self, id: int) -> Explanation:
        """Why task ``id`` is or is not running, from the rows alone (see jobq.app.why);
        TaskNotFound if there is no such task."""
        return explain(self, id)
