"""Helpers for users' own tests: run tasks at once through a real Store on in-memory SQLite.

    def test_signup(app):
        with jobq.testing.immediate(app) as store:
            task_id = send_welcome.enqueue(user_id=7)
            assert store.get(task_id).status == "done"

Nothing is faked: tasks are enqueued, captured, run and their status set through the same
Store the worker uses, on a private in-memory database.

``isolated(app, url)`` points an app at a database of the test's own instead, for tests
that run a real Worker; the pytest fixtures of jobq.testing.pytest_plugin (jobq_database,
jobq_isolate) make such databases.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.pool import StaticPool

from jobq.app import App
from jobq.app.store import Store
from jobq.db.tasks import Completion
from jobq.worker import executor
from jobq.workflows import in_task as workflow_results

WORKER_ID = "jobq.testing"


def memory_store() -> Store:
    """A migrated Store on a fresh in-memory SQLite database, shared by every thread."""
    engine = sa.create_engine(
        "sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False}
    )
    store = Store(engine)
    store.migrate()
    return store


def run_pending(app: App, *, retry_at_once: bool = True) -> int:
    """Capture and run the app's due tasks until none is left; how many runs there were.

    With ``retry_at_once``, a failure with retries left is retried at once instead of after
    its backoff, so every task ends done or terminally failed.
    """
    runs = 0
    workflow_results.serve(app.store)  # jobq.parent_results() in the tasks run here
    while captured := app.store.capture(100, worker_id=WORKER_ID):
        for task in captured:
            # The worker's rules: a run past its timeout fails, however it ended.
            outcome = executor.run(app.registry, task.name, task.args, task.attempt, task=task)
            app.store.set_statuses(
                [
                    Completion(
                        task.id, task.attempt, outcome.status, result=outcome.result,
                        error=outcome.error, terminal=outcome.terminal,
                        retry_delay=0.0 if retry_at_once else outcome.retry_delay,
                        in_workflow=task.workflow_id is not None,
                    )
                ]
            )  # fmt: skip
            runs += 1
    return runs


@contextmanager
def immediate(app: App, *, retry_at_once: bool = True) -> Iterator[Store]:
    """While inside, ``app`` uses a private in-memory Store and runs each task as it is enqueued.

    An enqueue made inside a caller's transaction (``_connection``) runs at the next
    enqueue or at ``run_pending(app)``, since only the caller knows when it commits. With
    ``retry_at_once`` (the default) a failure with retries left is retried at once, so
    each task ends done or failed for good before ``enqueue`` returns. On leaving, ``app``
    has its own Store again.

    Example:
        ```python
        import jobq
        import jobq.testing

        app = jobq.App()


        @app.task
        def shout(text: str) -> str:
            return text.upper()


        with jobq.testing.immediate(app) as store:
            handle = shout.enqueue(text="hi")
            assert store.get(handle).status == "done"
            assert handle.result() == "HI"
        ```
    """
    previous_store, previous_hook = app._store, app.after_enqueue
    store = memory_store()
    running = False

    def run_now() -> None:
        nonlocal running
        if running:  # a task enqueuing another: the loop already running picks it up
            return
        running = True
        try:
            run_pending(app, retry_at_once=retry_at_once)
        finally:
            running = False

    app.store, app.after_enqueue = store, run_now
    try:
        yield store
    finally:
        app._store, app.after_enqueue = previous_store, previous_hook
        store.dispose()


@contextmanager
def isolated(app: App, database_url: str) -> Iterator[Store]:
    """While inside, ``app`` enqueues into and captures from a Store on ``database_url``.

    On leaving, ``app`` has the Store it had before (none yet: the one its URL names, made
    when first used), and this one is disposed. Nothing is migrated here.
    """
    previous_store = app._store
    store = Store(database_url)
    app.store = store
    try:
        yield store
    finally:
        app._store = previous_store
        store.dispose()
