"""A worker's presence in the database: its registry row, and its app's cron schedules.

The registry row (jobq_workers) says which workers live, where and on what queues (`jobq
workers`); the heartbeat touches it, and registers the worker again should it be gone.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from jobq.db.errors import JobqError

if TYPE_CHECKING:
    from jobq.app.store import Store
    from jobq.cron.periodic import Schedule

log = logging.getLogger("jobq.worker")


def register(
    store: Store,
    worker_id: str,
    queues: Sequence[str] | None,
    concurrency: int,
    supervisor_pid: int | None,
) -> None:
    """Write (or rewrite) the registry row of the worker ``worker_id`` of this process."""
    store.register_worker(
        worker_id, host=socket.gethostname(), pid=os.getpid(), queues=queues,
        concurrency=concurrency, supervisor_pid=supervisor_pid,
    )  # fmt: skip


def unregister(store: Store, worker_id: str) -> None:
    """Delete the registry row of ``worker_id``; a failure is logged, not raised."""
    try:
        store.unregister_worker(worker_id)
    except JobqError as error:
        log.warning("could not unregister worker %s: %s", worker_id, error)


def sync_schedules(
    store: Store, schedules: Iterable[Schedule], queues: Sequence[str] | None
) -> None:
    """Store the app's cron schedules: new ones, changes, and those no longer defined."""
    report = store.sync_schedules(schedules, queues=queues)
    for verb, names in (
        ("created", report.created), ("updated", report.updated),
        ("disabled (no longer defined)", report.removed),
    ):  # fmt: skip
        if names:
            log.info("schedules %s: %s", verb, ", ".join(names))
