"""Waiters outlive outages: a fast restart of PostgreSQL, and their sessions ended by the
server (pg_terminate_backend, MariaDB's KILL), while a real `jobq worker` runs the tasks.

Sync waiters (handle.result, each in a thread) and async ones (await handle.wait, in one
event loop) wait for tasks that are due only later; the server then drops every
connection the waiters' Store holds, the waiters read their rows again (the LISTEN
connection made again wakes them all; elsewhere they poll), and only then are the tasks
released to the worker. Every wait must return its result: none may give up on a stale
pooled connection or a server that is back. Several rounds each, on the same Store.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import jobq
from jobq.dialects.schema import tasks
from jobq.lifecycle import waiting
from tests import postgres_server
from tests.acceptance.test_worker_processes import wait_until
from tests.integration.test_database_errors import end_sessions, server_ids
from tests.worker_processes import Workers

pytestmark = pytest.mark.slow

APP = "tests.apps.lifecycle_app:app"
#: Waiters of each kind (sync and async) in each round.
EACH = 6
ROUNDS = 3
#: Seconds any one wait may take: far more than the outage and the tasks need.
WAIT = 60


class Waiters:
    """EACH sync and EACH async waiters of tasks ``ids`` of ``store``, started at once;
    ``results()`` gives what each wait returned or raised, in the order of ``ids``."""

    def __init__(self, store: jobq.Store, ids: list[int]) -> None:
        handles = [jobq.TaskHandle(task_id, store) for task_id in ids]
        sync, async_ = handles[:EACH], handles[EACH:]
        self._pool = ThreadPoolExecutor(max_workers=EACH + 1)
        self._sync = [self._pool.submit(handle.result, WAIT) for handle in sync]
        self._async = self._pool.submit(asyncio.run, _gather_waits(async_))

    def results(self) -> list[Any]:
        try:
            return [_outcome(future) for future in self._sync] + self._async.result(WAIT + 30)
        finally:
            self._pool.shutdown(wait=False)


async def _gather_waits(handles: list[jobq.TaskHandle]) -> list[Any]:
    waits = [handle.wait(timeout=WAIT) for handle in handles]
    return list(await asyncio.gather(*waits, return_exceptions=True))


def _outcome(future: Future[Any]) -> Any:
    try:
        return future.result(WAIT + 30)
    except Exception as error:
        return error


def delayed_tasks(admin: jobq.Store, count: int) -> list[int]:
    """``count`` tasks add(i, 1000) that no worker takes before release()."""
    return [admin.enqueue("add", {"a": i, "b": 1000}, delay=3600, retries=0) for i in range(count)]


def release(admin: jobq.Store, ids: list[int]) -> None:
    """Make tasks ``ids`` due now, for the worker to take."""
    stmt = sa.update(tasks).where(tasks.c.id.in_(ids)).values(run_at=admin.dialect.now())
    admin.db.write(lambda conn: conn.execute(stmt))


def outlive(
    admin: jobq.Store, waiters_store: jobq.Store, drop: Callable[[], None], rounds: int = ROUNDS
) -> None:
    """Rounds of: 2 * EACH waiters on ``waiters_store`` wait; ``drop()`` ends the Store's
    connections; every waiter reads its row again; the tasks are released; each wait
    must return its task's result."""
    watcher = waiting.watcher_for(waiters_store)

    def read_after(reads: int) -> None:
        """Wait until the waiters have read their rows 2 * EACH times since ``reads``."""
        wait_until(lambda: watcher.reads >= reads + 2 * EACH)

    for _ in range(rounds):
        # The test's own calls start afresh: a restart left its Store's connections stale.
        admin.db.dispose()
        ids = delayed_tasks(admin, 2 * EACH)
        reads = watcher.reads
        waiters = Waiters(waiters_store, ids)
        # Each waiter has read its row (so its Store holds connections), and waits (where
        # the database notifies, a waiter reads only once it is registered and listening).
        read_after(reads)
        reads = watcher.reads
        drop()
        # Every waiter reads its row again, on a connection the server dropped if any is
        # left in the pool: woken when LISTEN is made again, or at its next poll.
        read_after(reads)
        admin.db.dispose()
        release(admin, ids)
        assert waiters.results() == [i + 1000 for i in range(2 * EACH)]


#: A private PostgreSQL server for the module (a fixture).
server = postgres_server.private_server


def test_waiters_outlive_fast_restarts_of_postgresql(
    server: postgres_server.PostgresServer, tmp_path: Path
) -> None:
    admin = jobq.Store(server.url)
    admin.migrate()
    waiters_store = jobq.Store(server.url)
    workers = Workers(APP, server.url, tmp_path)
    worker = workers.start()
    try:
        outlive(admin, waiters_store, server.restart)
        assert worker.process.poll() is None, worker.stderr()
    finally:
        workers.kill_all()
        waiters_store.dispose()
        admin.dispose()


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_waiters_outlive_their_sessions_ended_by_the_server(
    db_url: str, backend: str, tmp_path: Path
) -> None:
    """pg_terminate_backend of every session of the waiters' Store (its LISTEN one too),
    found by an application_name of its own; on MariaDB, KILL of its idle connections."""
    admin = jobq.Store(db_url)
    name = f"jobq_waiters_{uuid.uuid4().hex[:8]}"
    url = sa.make_url(db_url)
    if backend == "postgresql":
        url = url.update_query_dict({"application_name": name})
    waiters_store = jobq.Store(url.render_as_string(hide_password=False))
    workers = Workers(APP, db_url, tmp_path)
    worker = workers.start()

    def drop() -> None:
        if backend == "postgresql":
            assert terminate_sessions(admin, name) > 0
        else:
            wait_until(lambda: bool(server_ids(waiters_store)))  # not all in use this instant
            end_sessions(waiters_store, server_ids(waiters_store))

    try:
        outlive(admin, waiters_store, drop)
        assert worker.process.poll() is None, worker.stderr()
    finally:
        workers.kill_all()
        waiters_store.dispose()
        admin.dispose()


def terminate_sessions(admin: jobq.Store, application_name: str) -> int:
    """pg_terminate_backend of every session called ``application_name``; how many."""
    with admin.engine.connect() as conn:
        ended = conn.exec_driver_sql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = %(name)s",
            {"name": application_name},
        ).scalar_one()
    return int(ended)


@pytest.mark.parametrize("url", ["postgresql://u@127.0.0.1:1/x", "mysql://u@127.0.0.1:1/x"])
def test_a_wait_gives_up_on_an_unreachable_database_only_when_its_timeout_passes(
    url: str,
) -> None:
    """Nothing answers: result() and wait() keep trying until their timeout, then say the
    database cannot be reached (they said so at once on the first refusal)."""
    store = jobq.Store(url)
    handle = jobq.TaskHandle(1, store)
    try:
        for wait in (lambda: handle.result(timeout=1.0), lambda: asyncio.run(handle.wait(1.0))):
            began = time.monotonic()
            with pytest.raises(jobq.DatabaseUnavailable, match=r"127\.0\.0\.1:1"):
                wait()
            assert time.monotonic() - began >= 1.0
    finally:
        store.dispose()
